"""The control-loop benchmark (``python -m bench.loop``, ``make bench-loop``); its machinery
(``support``) serves the latency and scale benchmarks too."""
