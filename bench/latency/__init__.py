"""The latency benchmark (``python -m bench.latency``, ``make bench-latency``)."""
