"""Named crash points: the process kills itself with SIGKILL at a chosen one.

``AGENTRUN_CRASH_AT=<point>[,<point>...]`` makes the operator die right *after* the
write named ``<point>`` succeeded (``claim-lease``, ``claim-pod``,
``active``, ``command-ledger``, ``remove-command``, ``attempt-ended``, ``tombstone``,
``launch-spec-snapshot``, ``pin-snapshots``, ``pinned``, ``slots``). Tests use it to prove
that a restart converges: no attempt claimed twice, no command applied twice. SIGKILL,
not an exception, so no ``finally`` and no graceful shutdown can tidy up.
"""

from __future__ import annotations

import os
import signal

ENVIRONMENT = "AGENTRUN_CRASH_AT"


def armed() -> frozenset[str]:
    return frozenset(p.strip() for p in os.environ.get(ENVIRONMENT, "").split(",") if p.strip())


def reached(point: str) -> None:
    """Die here if ``point`` is armed (read on every call, so tests can arm per process)."""
    if point in armed():
        os.kill(os.getpid(), signal.SIGKILL)
