"""Leading: of several replicas one reconciles; the others stand by with warm caches.

The rules are :mod:`agentrun.core.policies.leadership`'s (client-go's); this is their
loop. It runs in a thread of its own, on a client of its own that no rate limit delays
(a renewal must not queue behind a burst of reconciles), and acts every ``retry``
seconds: read the leader Lease, decide, write. ``leading`` is set once a write made this
replica the holder, the fencing token names it (:meth:`Elector.token`) and admission sees
it so (:meth:`Elector.fenced_in`).

Losing is final. A leader that finds another holder, or has not renewed for
``renew_deadline``, stops the process at once (``on_lost``, by default
``os._exit``): its reconciles may be midway, and a graceful stop would let them go on
writing. The replica restarts as a candidate with fresh caches. The writes that were
already on their way are the fencing policy's to refuse
(:mod:`agentrun.core.policies.fencing`). A graceful stop *releases* the Lease (holder
empty), so the standby takes over within one ``retry``, not one lease duration.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from agentrun import rest
from agentrun.api import names
from agentrun.core.policies import fencing, leadership
from agentrun.core.policies.leadership import Move
from agentrun.kube import writes
from agentrun.rest import clocks

LOST_EXIT_CODE = 75  # EX_TEMPFAIL: try again (the kubelet restarts the container)


def lease_path(*, namespace: str, name: str | None = None) -> str:
    return rest.namespaced(group="coordination.k8s.io", version="v1", plural="leases",
                           namespace=namespace, name=name)


def exit_lost() -> None:
    os._exit(LOST_EXIT_CODE)


@dataclass
class Elector:
    client: rest.Rest
    identity: str
    timing: leadership.Timing
    logger: logging.Logger
    name: str = names.LEADER_LEASE
    # The operator's own (its Lease and token); required: never a default, which would
    # elect and fence another install's namespace when the operator is elsewhere.
    namespace: str = field(kw_only=True)
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], datetime] = clocks.system
    on_lost: Callable[[], None] = exit_lost
    on_lead: Callable[[], object] | None = None  # called (from its thread) on taking the lead
    leading: threading.Event = field(default_factory=threading.Event)
    stopping: threading.Event = field(default_factory=threading.Event)
    _observed: leadership.Observed | None = field(default=None, init=False)
    _renewed: float | None = field(default=None, init=False)  # monotonic, as leader
    _thread: threading.Thread | None = field(default=None, init=False)

    def step(self) -> None:
        """One pass: read the Lease, decide, write (a conflict: someone else wrote first).

        A leader also reads the fencing token after each renewal: one that names another
        pod (changed under it) means its writes are refused: it has lost. A candidate
        reads it before each write, so its term starts above any other pod's token
        (:func:`agentrun.core.policies.leadership.term`)."""
        now = self.clock()
        found = leadership.record(self.client.get(lease_path(namespace=self.namespace,
                                                             name=self.name)))
        self._observed = leadership.observe(found, observed=self._observed, now=now)
        if self.leading.is_set() and (found is None or found.holder != self.identity):
            self.lose(f"the leader Lease {self.namespace}/{self.name} is now held by "
                      f"{found.holder if found and found.holder else 'nobody'}")
            return
        move = leadership.decide(found, observed=self._observed, me=self.identity, now=now)
        if move is Move.WAIT:
            return
        token = None if self.leading.is_set() else self._token()
        who, held = fencing.token_names(token)
        body = leadership.body(move, found=found, me=self.identity, name=self.name,
                               namespace=self.namespace, timing=self.timing, now=self.wall(),
                               floor=-1 if who == self.identity else held)
        try:
            self._write(body, create=found is None)
        except writes.Conflict:
            return  # another candidate wrote first: read again next pass
        self._renewed = now
        if self.leading.is_set():
            named, _ = fencing.token_names(self._token())
            if named not in ("", self.identity):
                self.lose(f"the fencing token now names {named}")
            return
        if self.token(term=int(body["spec"]["leaseTransitions"]), found=token) and (
                self.fenced_in()):
            self.logger.info("leading: %s took the leader Lease %s/%s (%s, term %s)",
                             self.identity, self.namespace, self.name, move,
                             body["spec"]["leaseTransitions"])
            self.leading.set()
            if self.on_lead is not None:
                self.on_lead()

    def _write(self, body: leadership.Object, *, create: bool) -> None:
        try:
            if create:
                self.client.request("POST", lease_path(namespace=self.namespace), body=body)
            else:
                self.client.request("PUT", lease_path(namespace=self.namespace,
                                                      name=self.name), body=body)
        except rest.ApiError as error:
            raise writes.translated(error) from error

    def token(self, *, term: int, found: leadership.Object | None) -> bool:
        """Make the fencing token (``found``, as read before the Lease write) name this
        replica at ``term``, the term just written on the Lease; whether it does. Its term
        is above any other pod's token read then; a token written since at a term not
        below it means another replica took the Lease meanwhile: the write is refused
        (admission's term check, or the resourceVersion), and this one does not lead."""
        path = self._secrets()
        who, held = fencing.token_names(found)
        if (who, held) == (self.identity, term):
            return True
        if held > term:  # (this replica's own token at a later term: a Lease made anew)
            self.logger.warning("leading: the fencing token is at term %s, above the "
                                "Lease's %s", held, term)
        version = (found or {}).get("metadata", {}).get("resourceVersion")
        body = fencing.token_body(identity=self.identity, term=term,
                                  resource_version=version if found else None,
                                  namespace=self.namespace)
        try:
            if found is None:
                self.client.request("POST", path, body=body)
            else:
                self.client.request("PUT", f"{path}/{names.LEADER_SECRET}", body=body)
        except rest.ApiError as error:
            if error.status in (403, 409):  # a later term written first, or a race
                self.logger.warning("leading: the fencing token was not written (%s)",
                                    error.message[:300])
                return False
            raise
        return True

    def _secrets(self) -> str:
        return rest.namespaced(group="", version="v1", plural="secrets",
                               namespace=self.namespace)

    def _token(self) -> leadership.Object | None:
        """The fencing token as it is (None: none yet)."""
        return self.client.get(f"{self._secrets()}/{names.LEADER_SECRET}")

    def fenced_in(self) -> bool:
        """Does admission already see this replica as the holder? A server-side dry run
        the fencing policy refuses from anyone else: from its first success on, no former
        leader's write is admitted, so this replica's first write comes after its last.
        (Without the policy, e.g. for a local user, it is admitted at once.)"""
        try:
            self.client.request("POST", rest.namespaced(
                group="", version="v1", plural="events", namespace=self.namespace),
                body=fencing.probe_body(self.identity, namespace=self.namespace),
                query={"dryRun": "All"})
        except rest.ApiError as error:
            if error.status == 403 and fencing.FENCED in error.message:
                self.logger.info("leading: %s holds the Lease; admission does not see it "
                                 "yet (%s)", self.identity, error.message[:400])
                return False
            raise
        return True

    def overdue(self) -> bool:
        """A leader that has not renewed for the renew deadline."""
        return (self.leading.is_set() and self._renewed is not None
                and self.clock() - self._renewed > self.timing.renew_deadline)

    def lose(self, why: str) -> None:
        """Stop leading, and (``on_lost``) the process: at once, mid-reconcile."""
        self.logger.critical("leading: %s lost the lead (%s); stopping at once", self.identity,
                             why)
        self.leading.clear()
        self.on_lost()

    def run(self) -> None:
        """Act every ``retry`` seconds until stopped (a failing pass is retried)."""
        while not self.stopping.is_set():
            try:
                self.step()
            except Exception as error:  # an unreachable or failing API server: next pass
                self.logger.warning("leading: a pass failed (%s)", error)
            self.watch()
            self.stopping.wait(self.timing.retry)  # the election's period, not a sync

    def watch(self) -> None:
        """Stop at once if the renew deadline passed (also from the watchdog thread, so a
        pass stuck in a hung request cannot keep a leader past it)."""
        if self.overdue():
            self.lose(f"no renewal for {self.timing.renew_deadline:g} s")

    def _watchdog(self) -> None:
        while not self.stopping.wait(self.timing.retry / 2):  # its period, not a sync
            self.watch()

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, daemon=True, name="leader-election")
        self._thread.start()
        threading.Thread(target=self._watchdog, daemon=True, name="leader-watchdog").start()

    def stop(self) -> None:
        """Stop electing; a leader releases the Lease so its successor need not wait."""
        self.stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timing.retry + 5)
        if not self.leading.is_set():
            return
        self.leading.clear()
        try:
            found = leadership.record(self.client.get(lease_path(namespace=self.namespace,
                                                                 name=self.name)))
            if found is not None and found.holder == self.identity:
                self._write(leadership.released(found, name=self.name,
                                                namespace=self.namespace, now=self.wall()),
                            create=False)
                self.logger.info("leading: %s released the leader Lease", self.identity)
        except Exception as error:  # the successor then waits out the lease instead
            self.logger.warning("leading: the release failed (%s)", error)
