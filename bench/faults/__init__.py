"""The fault scenarios (``python -m bench.faults``, ``make faults``): one module a scenario,
``support`` what every scenario is made of."""
