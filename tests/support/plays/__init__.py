"""What a test sets up and checks in its namespace: scenarios, their convergence, quotas, the
recovery trace, the examples as applied, the admission canaries."""
