"""Experiments over many runs: ``compare`` trains encodings and sweeps them side by side (``vispe compare`` and the
demos)."""
