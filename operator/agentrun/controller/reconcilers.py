"""The reconcile loop both reconcilers share: step until settled, read again on conflict.

A *step* reads the object afresh, decides, and makes at most one write; it returns True
once there is nothing more to do now. A conflict (another writer moved first) simply
means another step. Any other error, or a loop that does not settle within its bound,
ends the loop unsettled, for the caller to look again after a backoff: an error never
kills the operator, and never leaves an object without a next look.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from agentrun.controller import applier
from agentrun.kube import reads, writes
from agentrun.rest import clocks


def settle(step: Callable[[], bool], *, what: str, logger: logging.Logger,
           max_steps: int) -> bool:
    """Run ``step`` until it returns True; False when it failed or did not settle."""
    for _ in range(max_steps):
        try:
            if step():
                return True
        except writes.Conflict as conflict:
            logger.debug("%s: %s; reading again", what, conflict)
        except Exception:
            logger.exception("%s: reconciling failed; will retry", what)
            return False
    logger.error("%s: not settled after %d steps; will look again later", what, max_steps)
    return False


class Reconciler:
    """What every reconciler holds: the reads, the applier, its clocks and its logger."""

    logger_name = "agentrun"

    def __init__(self, *, reader: reads.Reader, writer: writes.Writer,
                 clock: clocks.Clock = clocks.system, ticks: clocks.Clock = clocks.ticks,
                 logger: logging.Logger | None = None) -> None:
        self.reader = reader
        self.writer = writer
        self.clock = clock
        self.ticks = ticks  # monotonic: what lease expiry is measured on
        self.logger = logger or logging.getLogger(self.logger_name)

    @property
    def applier(self) -> applier.Applier:
        """Every write goes through it (over the writer this reconciler holds now)."""
        return applier.Applier(writer=self.writer)
