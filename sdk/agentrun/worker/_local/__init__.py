"""``agentrun-worker local``: a worker's attempts run on a laptop, with no cluster.

Private, and loaded only by that subcommand (never by ``import agentrun.worker``). The
harness stands in for the two services a worker pod talks to, each on 127.0.0.1 at an
ephemeral port in the harness process: the Kubernetes API, for exactly the Lease calls
the SDK makes (:mod:`.kubeapi`), and an S3 store kept in a directory, for exactly what
:mod:`agentrun.objectstore` sends (:mod:`.s3api`). It writes what the operator would give
the pod (:mod:`.workspace`: a kubeconfig, the pinned configuration and the ``AGENTRUN_*``
environment) and plays the operator's part between attempts (:mod:`.attempts`): it ends
an attempt's Lease as the operator tombstones it and starts the next, so an author sees
committed steps skipped and the recoverable prefix resumed. Its defaults and bounds are
in :mod:`.settings`.
"""
