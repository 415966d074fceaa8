"""The scale benchmark (``python -m bench.scale``, ``make bench-scale``); ``heapdump/`` is its
``--heap`` preload."""
