"""The project's tests: ``unit/``, ``integration/`` and the helpers they share, ``support/``."""
