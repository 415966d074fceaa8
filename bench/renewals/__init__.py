"""The renewals benchmark (``python -m bench.renewals``, ``make bench-renewals``)."""
