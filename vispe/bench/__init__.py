"""Speed and memory: the encoding benchmark (``measure``, with its ``subjects``, ``timing``, ``rows`` and
``reports``), mixed-size batches (``mixed``), Runner-vs-loop throughput (``throughput``) and farthest-point sampling
(``fps``), behind ``vispe benchmark`` and ``vispe benchmark-fps``."""
