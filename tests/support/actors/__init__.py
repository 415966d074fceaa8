"""The processes a test runs beside agentrun: the operator (a subprocess or a pod), real
workers, the effect owner, the sidecar's server, a watch feeding the stores."""
