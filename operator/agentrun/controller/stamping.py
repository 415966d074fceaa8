"""Keeping the stamping epoch: mint a new one once the policy and binding are stable.

The rule (``core.policies.stamping``): a new epoch is minted only after quorum reads have found the
actor-stamping policy and its binding as shipped, with the same uid and generation, for
``ENFORCEMENT_DELAY_SECONDS``, so that every API server enforces them by the time the
epoch exists. What is remembered here (the identity first seen, and when) is only a delay:
lost on a restart, the wait starts again; it never makes a command trusted.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agentrun.controller import applier
from agentrun.core.base import actions
from agentrun.core.policies import fencing, stamping
from agentrun.kube import reads, writes


@dataclass
class Keeper:
    reader: reads.Reader
    writer: writes.Writer
    logger: logging.Logger
    delay: float = stamping.ENFORCEMENT_DELAY_SECONDS
    clock: Callable[[], float] = time.monotonic
    # Whether this replica may mint (only the leader does: a failover must not rotate the
    # epoch, or every command in flight would be StaleEpoch).
    may_mint: Callable[[], bool] = lambda: True
    # One check at a time (the start-up wait and the periodic check may overlap).
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _candidate: stamping.Identity | None = field(default=None, init=False)
    _since: float = field(default=0.0, init=False)

    def check(self) -> stamping.Stamping:
        """One pass: read, and mint a new epoch when one is due. What it found."""
        with self._lock:
            return self._check()

    def _check(self) -> stamping.Stamping:
        found = self.reader.stamping()
        if not found.mint_needed or not self.may_mint():
            self._candidate = None
            return found
        now = self.clock()
        if found.identity != self._candidate:
            self._candidate, self._since = found.identity, now
            self.logger.info("stamping: %s", found.problem)
            return found
        if now - self._since < self.delay:
            return found
        assert found.identity is not None
        body = stamping.secret_body(epoch=secrets.token_bytes(stamping.EPOCH_BYTES),
                                    identity=found.identity,
                                    resource_version=found.secret_version,
                                    namespace=self.reader.operator_namespace)
        try:
            applier.Applier(writer=self.writer).apply(actions.MintEpoch(body=body))
        except writes.Conflict:
            return found  # another operator minted first: read again next pass
        except writes.Rejected as error:
            if error.status != 403 or fencing.FENCED not in str(error):
                raise
            # Fenced: this pod is not the leader (`agentrun-operator stamping` run in a
            # standby's pod); the leader mints. Read again next pass.
            self.logger.info("stamping: not the leader's pod, so not minting: %s",
                             str(error)[:300])
            return found
        self._candidate = None
        self.logger.info("stamping: a new epoch minted for policy %s and binding %s",
                         found.identity.policy, found.identity.binding)
        return self.reader.stamping()

    def until_in_force(self, *, timeout: float, every: float = 0.5) -> stamping.Stamping:
        """Pass until stamping is in force (minting as due) or ``timeout`` runs out."""
        deadline = self.clock() + timeout
        while True:
            found = self.check()
            if found.epoch is not None or self.clock() >= deadline:
                return found
            time.sleep(every)  # the polling period of the check, not a synchronisation
