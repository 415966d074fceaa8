"""``make demo``: the recovery trace with real worker pods (``python -m demo.recovery``)."""
