"""Experiments over many runs: ``compare`` (train encodings and sweep them side by side), the ``leaderboard``
(every encoding x task x seed, archived, with its tables and figures in ``leaderboard_report``) and the model
``zoo`` (the leaderboard's best checkpoints as shipped models). The ``vispe compare`` and ``vispe leaderboard``
commands and the demos wrap these."""
