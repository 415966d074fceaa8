"""The fault scenarios shared by ``make faults`` and the fault tests, and their drivers
(network proxy, paused processes, faked clocks)."""
