"""What runs inside a worker pod: the worker SDK, so far its context and lease keeper.

:mod:`context` reads the attempt (run, slot, node, attempt, fencing token, lease) from the
environment the operator sets and the pinned configuration from the mounted snapshots,
verified against their digests. :mod:`keeper` renews the attempt's Lease in the
background and guards new effects (``ensure_live``); :mod:`renewals` holds its pure
decisions, :mod:`renewer` one renewal's reads and writes. :mod:`sdk` puts them together
as ``Worker.from_env()``. ``agentrun-worker run -- <command...>`` (:mod:`cli`) keeps the
lease while a command that does not use the SDK runs.
"""
