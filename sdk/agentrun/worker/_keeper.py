"""The lease keeper: renews the attempt's Lease in the background and guards new effects.

Terms (the pure rules are in :mod:`agentrun.worker._renewals`):
- *renewal*: one read of the Lease and, if it is still this pod's, one write of
  ``spec.renewTime`` under the resourceVersion read (:class:`renewer.Renewer`), with the
  pod's own service-account token. Every :func:`renewals.interval` (a third of the lease).
- *lapse point*: the *send* time of the last successful renewal's write plus the lease
  duration minus a margin (:func:`renewals.lapse_at`), on this process's monotonic clock.
  The operator cannot have seen that renewal before it was sent, so it cannot end the
  attempt for want of renewals before the lapse point plus the margin.
- *lapsed*: the lapse point has passed. :meth:`Keeper.ensure_live` raises
  :class:`LeaseLapsed`, so no new effect starts; renewal goes on, and a later successful
  renewal of the Lease (still this pod's, untombstoned, under its resourceVersion) makes
  the keeper live again (*resumed*). An API-server outage longer than a lease therefore
  pauses effects and does not by itself end the worker: the operator does not count its
  own blind time toward expiry either.
- *lost*: the Lease is tombstoned, held by another, deleted, or this account may no
  longer renew it (403, which is also how the admission policy refuses); or the keeper
  was stopped. Final: :meth:`Keeper.ensure_live` raises :class:`LeaseLost`, and the
  worker should exit, since a successor may be running.

Two daemon threads, not an asyncio task: agent code is mostly synchronous (a model call
blocks for minutes), the API client is synchronous, and a task would not run while the
agent blocks its event loop. One thread renews; the other (the *alarm*) wakes at the lapse
point to call ``on_lapse`` on time even while a renewal request hangs. :meth:`ensure_live`
needs neither: it compares the clock with the lapse point itself, so it is exact.
Callbacks run on the keeper's threads, outside its lock; an exception in one is logged.

*Renew gate* (``should_renew``): asked before each background renewal; it returns None to
renew, or why not (the sidecar's main container has not checked in in time). While it
says no, the keeper sends nothing and the lapse point stays where the last renewal put
it, so the lease lapses (effects stop) and then expires for the operator: a worker whose
work has hung is not kept alive. A later yes renews again, under the same checks as any
renewal (a tombstoned lease is lost, not revived). Each change is logged once.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

from agentrun.worker import _renewals as renewals
from agentrun.worker import _renewer as renewer
from agentrun.worker._renewals import Standing, Verdict

logger = logging.getLogger("agentrun.worker")
Callback = Callable[[str], None]
RenewGate = Callable[[], str | None]  # None: renew; else why not


class LeaseLapsed(Exception):
    """No new effect may start now: the lease may have lapsed (renewals are failing)."""


class LeaseLost(LeaseLapsed):
    """The lease is no longer this worker's, for good: exit. A lapse that cannot end, so
    code that stops at :class:`LeaseLapsed` stops here too."""


class Keeper:
    """Keeps ``renewer``'s lease renewed and says whether effects may start."""

    def __init__(self, *, renewer: renewer.Renewer, should_renew: RenewGate | None = None) -> None:
        self.renewer = renewer
        self.should_renew = should_renew
        self._held_back: str | None = None  # why the gate last said no (None: it says yes)
        self._lock = threading.Condition()
        self._lapse: float | None = None  # on renewer.monotonic
        self._lost: str | None = None
        self._failure: str | None = None  # the last failed renewal's reason, since a success
        self._told_lapse = False
        self._generation = 0  # counts changes, so the alarm misses none
        self._stop = threading.Event()
        self._released = False  # release() was called: it writes at most once
        self._threads: list[threading.Thread] = []
        self._on_lapse: Callback | None = None
        self._on_resume: Callback | None = None
        self._on_lost: Callback | None = None

    # -- the guard the effect ledger calls -------------------------------------------------

    def standing(self) -> Standing:
        with self._lock:
            return self._standing()

    def _standing(self) -> Standing:
        return renewals.standing(now=self.renewer.monotonic(), lapse=self._lapse,
                                 lost=self._lost is not None)

    def ensure_live(self) -> None:
        """Return only if a new effect may start now; else raise :class:`LeaseLost` (exit)
        or :class:`LeaseLapsed` (wait, see :meth:`wait_live`). Call it before each effect's
        intent and again before its call."""
        with self._lock:
            found = self._standing()
            if found is Standing.LOST:
                raise LeaseLost(f"lease {self._name()} is lost: {self._lost}")
            if found is Standing.STARTING:
                raise LeaseLapsed(f"lease {self._name()} has not been renewed yet")
            if found is Standing.LAPSED:
                raise LeaseLapsed(f"lease {self._name()} may have lapsed: no successful "
                                  "renewal in time; effects wait until one succeeds")

    check = ensure_live

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """``with keeper.guard(): start_effect()``: :meth:`ensure_live` on entry. It
        cannot stop a call already under way; the margin covers the gap to its send."""
        self.ensure_live()
        yield

    def wait_live(self, *, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the lease to be live (True) or lost/still
        not live (False). Needs :meth:`start`'s threads (they wake it)."""
        with self._lock:
            return self._lock.wait_for(
                lambda: self._standing() in (Standing.LIVE, Standing.LOST),
                timeout=timeout) and self._lost is None

    def _name(self) -> str:
        return f"{self.renewer.namespace}/{self.renewer.lease}"

    # -- one step each, called by the threads (and by unit tests, synchronously) ------------

    def renew(self) -> float | None:
        """One renewal; the seconds until the next one, or None once the lease is lost."""
        with self._lock:
            if self._lost is not None:  # lost (or stopped) is final: never write again
                return None
        if not self._gate_open():
            return renewals.interval(duration_seconds=self.renewer.duration_seconds)
        decision = self.renewer.renew_once()
        call: tuple[Callback | None, str] | None = None
        with self._lock:
            if self._lost is not None:
                return None
            if decision.verdict is Verdict.STOP:
                self._lost = decision.reason
                call = (self._on_lost, decision.reason)
            elif decision.verdict is Verdict.RETRY:
                self._failure = decision.reason
            elif decision.verdict is Verdict.RENEW:
                self._failure = None
                self._renewed()
                if self._told_lapse:
                    self._told_lapse = False
                    call = (self._on_resume, "a renewal succeeded again")
            self._changed()
        if decision.verdict is Verdict.RETRY:
            logger.warning("lease %s: %s; retrying in %.1fs", self._name(), decision.reason,
                           decision.delay_seconds)
        if call is not None:
            self._tell(*call)
        return None if decision.verdict is Verdict.STOP else decision.delay_seconds

    def _gate_open(self) -> bool:
        """Ask the renew gate; log when its answer changes (so a pause is said once)."""
        why = self.should_renew() if self.should_renew is not None else None
        if why is not None and self._held_back is None:
            logger.warning("lease %s: renewals stop: %s; the lease will lapse and expire "
                           "unless that changes", self._name(), why)
        elif why is None and self._held_back is not None:
            logger.info("lease %s: renewals resume (%s no longer holds)", self._name(),
                        self._held_back)
        self._held_back = why
        return why is None

    def poll(self) -> float | None:
        """Tell ``on_lapse`` once the lapse point has passed; the seconds until it (None:
        nothing to wait for until the next renewal changes it)."""
        with self._lock:
            if self._lost is not None or self._lapse is None or self._told_lapse:
                return None
            left = self._lapse - self.renewer.monotonic()
            if left > 0:
                return left
            self._told_lapse = True
            self._changed()
            sent = self.renewer.renewed_at
            reason = renewals.lapse_reason(
                since_renewal_seconds=self.renewer.monotonic() - (sent or 0.0),
                duration_seconds=self.renewer.duration_seconds, last_failure=self._failure)
        logger.warning("lease %s: %s; effects wait", self._name(), reason)
        self._tell(self._on_lapse, reason)
        return None

    def _renewed(self) -> None:
        """(Under the lock.) A renewal succeeded: move the lapse point to vouch for it."""
        if self.renewer.renewed_at is not None:
            self._lapse = renewals.lapse_at(sent_at=self.renewer.renewed_at,
                                            duration_seconds=self.renewer.duration_seconds)

    def _changed(self) -> None:
        """(Under the lock.) Wake the alarm and :meth:`wait_live` to look again."""
        self._generation += 1
        self._lock.notify_all()

    def _tell(self, callback: Callback | None, reason: str) -> None:
        if callback is None:
            return
        try:
            callback(reason)
        except Exception:  # a callback's failure must not stop renewal
            logger.exception("lease %s: a keeper callback failed", self._name())

    # -- the threads ------------------------------------------------------------------------

    def first_renewal(self, *, timeout: float) -> renewals.Decision:
        """Renew until one succeeds, the lease is lost, or ``timeout`` passes: the last
        decision (``Renew``, ``Stop`` or ``Retry``). A success tells the operator the
        worker started."""
        deadline = self.renewer.monotonic() + timeout
        while True:
            decision = self.renewer.renew_once()
            remaining = deadline - self.renewer.monotonic()
            if decision.verdict is not Verdict.RETRY or remaining <= 0:
                break
            logger.warning("first renewal: %s", decision.reason)
            if self._stop.wait(min(decision.delay_seconds, remaining)):
                break
        with self._lock:
            if decision.verdict is Verdict.STOP:
                self._lost = decision.reason
            elif decision.verdict is Verdict.RENEW:
                self._renewed()
            self._changed()
        return decision

    def start(self, *, on_lapse: Callback | None = None, on_resume: Callback | None = None,
              on_lost: Callback | None = None) -> None:
        """Renew in the background from now on (after :meth:`first_renewal`); the
        callbacks get a reason. ``on_lost`` is called once; ``on_lapse`` and ``on_resume``
        alternate."""
        if self._threads:
            raise RuntimeError("the keeper is already running")
        self._on_lapse, self._on_resume, self._on_lost = on_lapse, on_resume, on_lost
        self._threads = [threading.Thread(target=self._renewing, name="lease-keeper",
                                          daemon=True),
                         threading.Thread(target=self._alarm, name="lease-alarm",
                                          daemon=True)]
        for thread in self._threads:
            thread.start()

    def stop(self, *, timeout: float = 5.0) -> None:
        """Stop renewing, for good (the keeper is then lost: no effect starts)."""
        with self._lock:
            self._stop.set()
            if self._lost is None:
                self._lost = "the keeper was stopped"
            self._changed()
        for thread in self._threads:
            if thread is not threading.current_thread():  # stop() from a callback
                thread.join(timeout=timeout)

    def release(self) -> None:
        """Stop renewing, then release the lease: the worker's last write, after which
        admission refuses its every write and the operator ends the attempt as soon as the
        pod has finished. Only a keeper still live releases: one that never renewed has
        nothing the operator waits on, and one lapsed or lost vouches for nothing (the
        operator may have judged the lease expired already; "released" means the worker
        let go while it held it). A failure is logged, and the lease then expires as it
        would have."""
        live = self.standing() is Standing.LIVE
        self.stop()
        with self._lock:
            if not live or self.renewer.renewed_at is None or self._released:
                return
            self._released = True
        why = self.renewer.release_once()
        if why is None:
            logger.info("lease %s released", self._name())
        else:
            logger.warning("lease %s not released (%s): the operator waits for it to "
                           "expire instead", self._name(), why)

    def _renewing(self) -> None:
        delay: float | None = renewals.interval(duration_seconds=self.renewer.duration_seconds)
        while delay is not None and not self._stop.wait(delay):
            try:
                delay = self.renew()
            except Exception:  # a bug must not end renewal silently: log, try again
                logger.exception("lease %s: renewal raised", self._name())
                delay = renewals.interval(duration_seconds=self.renewer.duration_seconds)

    def _alarm(self) -> None:
        while True:
            with self._lock:
                seen = self._generation
            left = self.poll()
            with self._lock:
                if self._stop.is_set() or self._lost is not None:
                    return
                if self._generation == seen:  # nothing changed since poll() looked
                    self._lock.wait(left)  # a change or stop wakes it early
