"""Renewing one attempt's Lease: read it, judge it, write ``renewTime`` back; and, as the
worker ends, release it.

The only API calls a worker makes here are ``get`` and ``update`` on its own Lease (the
``agentrun-worker`` ClusterRole grants exactly those). Decisions come from
:mod:`agentrun.worker._renewals`; this module only performs them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import urllib3

from agentrun import rest
from agentrun.core.attempts import observations
from agentrun.worker import _renewals as renewals

logger = logging.getLogger("agentrun.worker")
FAILURES = (rest.ApiError, urllib3.exceptions.HTTPError, OSError)
RELEASE_TRIES = 3  # a write that lost a race (409) is judged again on a new reading


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(kw_only=True)
class Renewer:
    """The lease ``namespace``/``lease``, renewed as ``identity`` (the pod's name)."""

    api: rest.Rest
    namespace: str
    lease: str
    identity: str
    clock: Callable[[], datetime] = _utc_now
    monotonic: Callable[[], float] = time.monotonic
    duration_seconds: int | None = field(default=None, init=False)
    renewed_at: float | None = field(default=None, init=False)  # on ``monotonic``

    @property
    def path(self) -> str:
        return rest.namespaced(group="coordination.k8s.io", version="v1", plural="leases",
                               namespace=self.namespace, name=self.lease)

    def _failed(self, error: Exception) -> renewals.Decision:
        # Anything but an answer (a connection cut mid-handshake, a timeout) has no
        # status: no answer, like the OSError it stands for.
        status = error.status if isinstance(error, rest.ApiError) else None
        return renewals.judge_error(status=status, duration_seconds=self.duration_seconds)

    def renew_once(self) -> renewals.Decision:
        """One reading and, if the lease is still ours, one conditional write."""
        try:
            lease = self.api.request("GET", self.path)
        except FAILURES as error:
            return self._failed(error)
        view = observations.lease_view(lease)
        self.duration_seconds = view.duration_seconds
        decision = renewals.judge(lease=view, identity=self.identity)
        if decision.verdict is not renewals.Verdict.RENEW:
            return decision
        started = self.monotonic()
        try:
            self.api.request("PUT", self.path, body=renewals.renewed(lease, now=self.clock()))
        except FAILURES as error:
            return self._failed(error)
        self.renewed_at = started  # the write may have landed any time after this
        return decision

    def release_once(self) -> str | None:
        """Release the lease if it is still this worker's: None once released, else why
        not (not ours any more, or the API server failed: it then expires as before)."""
        why = "not tried"
        for _ in range(RELEASE_TRIES):
            try:
                lease = self.api.request("GET", self.path)
            except FAILURES as error:
                return f"could not read it: {error}"
            decision = renewals.judge(lease=observations.lease_view(lease),
                                      identity=self.identity)
            if decision.verdict is not renewals.Verdict.RENEW:
                return decision.reason
            try:
                self.api.request("PUT", self.path,
                                 body=renewals.released(lease, now=self.clock()))
            except rest.ApiError as error:
                why = f"could not write it: {error}"
                if error.status == 409:
                    continue
                return why
            except FAILURES as error:
                return f"could not write it: {error}"
            return None
        return why
