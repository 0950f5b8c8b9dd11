"""Speed and memory: the encoding benchmark (``measure``, with its ``subjects``, ``timing``, ``rows`` and
``targets``), mixed-size batches (``mixed``), Runner-vs-loop throughput (``throughput``), farthest-point sampling
(``fps``) and the GPU check (``gpu_check``, ``gpu_plan``, ``gpu_summary``). The ``vispe benchmark``,
``benchmark-fps`` and ``tools/gpu_check.py`` commands wrap these."""
