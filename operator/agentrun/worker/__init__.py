"""What runs inside a worker pod, until the worker SDK exists: a minimal lease renewer.

``agentrun-worker run -- <command...>`` keeps the attempt's Lease renewed with the pod's
own service-account credentials while ``command`` runs, and exits with its exit code.
:mod:`renewals` holds the pure decisions (how often, whether to go on), :mod:`renewer`
the reads and writes, :mod:`cli` the process around the child.
"""
