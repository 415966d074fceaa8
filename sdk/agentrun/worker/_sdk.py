"""``Worker``: the SDK's entry point in a worker pod: context, lease keeper, steps, effects.

    with Worker.from_env() as worker:      # reads and verifies; renews once; keeps renewing
        package = worker.context.pinned["package"].text
        notes = worker.step("gather", do=gather)            # skipped if committed before
        worker.effect("publish", key="publish", call=send, reconcile=ask)

:meth:`Worker.step` is "skip if committed, else do and commit" over the slot's
recoverable prefix (:mod:`agentrun.worker._prefix`), read once, on first use, from the
sealed Leases of earlier attempts and this attempt's own. :meth:`Worker.effect` is the
effect ledger (:mod:`agentrun.worker._effects`): intent, call, outcome; an ambiguous one is
asked about, never assumed. Records go on the attempt's own Lease
(:mod:`agentrun.worker._records`); payloads over the inline bound go to ``store``.

Leaving the ``with`` block (or :meth:`Worker.stop`) stops renewing; the operator then sees
the attempt end by the pod's exit. A :class:`keeper.LeaseLost` means exit now: a
successor may be running. A :class:`keeper.LeaseLapsed` means wait
(:meth:`keeper.Keeper.wait_live`) and retry the effect; renewal goes on meanwhile.
"""

from __future__ import annotations

import atexit
import logging
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType, TracebackType
from typing import Any, Literal, TypeVar

from agentrun import rest
from agentrun.worker import _artifacts as artifacts
from agentrun.worker import _effects as effects
from agentrun.worker import _journal as journals
from agentrun.worker import _journalcommits as journalcommits
from agentrun.worker import _keeper as keeper
from agentrun.worker import _prefix as prefix
from agentrun.worker import _questions as questions
from agentrun.worker import _records as records
from agentrun.worker import _renewer as renewer
from agentrun.worker import _spans as spans
from agentrun.worker import _usage as usages
from agentrun.worker._context import Context
from agentrun.worker._renewals import Verdict

# Every connection and read of the keeper's requests times out after this (urllib3's own
# retries are off): a hung request must not keep the keeper from renewing again for long.
REQUEST_TIMEOUT_SECONDS = 5.0
START_TIMEOUT_SECONDS = 60.0
log = logging.getLogger(__name__)
TERMINATED_EXIT = 128 + signal.SIGTERM  # 143, the shell's code for "ended by SIGTERM"
T = TypeVar("T")  # the caller's result type: what a step's ``do`` or an effect's ``call`` returns


def _terminated(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(TERMINATED_EXIT)


def exit_on_sigterm() -> bool:
    """Make SIGTERM end the process (``SystemExit(143)``, so ``with`` blocks unwind and the
    keeper stops) where nothing else handles it. Why: a worker is often its container's
    PID 1, for which the kernel ignores a signal left at its default action; the kubelet's
    SIGTERM (the operator fencing the pod, or the pod deleted) would then be ignored
    until the grace period's SIGKILL. Only from the main thread, and only over the
    default action (a worker's own handler stands). True if installed."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return False
    signal.signal(signal.SIGTERM, _terminated)
    return True


def pod_api() -> rest.Rest:
    """The API as this pod: ``$KUBECONFIG`` if set, else its service account (in-cluster)."""
    return rest.Rest(rest.connect(), timeout=rest.Timeout(
        connect=REQUEST_TIMEOUT_SECONDS, read=REQUEST_TIMEOUT_SECONDS))


@dataclass(kw_only=True)
class Worker:
    """One attempt's worker. ``api`` is the pod's own client (every read and write here is
    the pod's service account's, which admission checks against the Lease's holder)."""

    context: Context
    keeper: keeper.Keeper
    api: rest.Rest
    store: records.PayloadStore | None = None
    journal: journals.Location | None = None  # None: the pinned one (AGENTRUN_JOURNAL_*), if any
    # Group commit (a run with a journal): a step is durable within this many seconds of
    # its return, or at the next flush; 0: every step durable on return.
    commit_delay: float = journalcommits.DEFAULT_DELAY_SECONDS
    _steps: prefix.Steps | None = field(default=None, init=False, repr=False)
    _meter: usages.Meter | None = field(default=None, init=False, repr=False)
    _tracing: spans.AttemptSpans | None = field(default=None, init=False, repr=False)
    _reading: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @classmethod
    def from_env(cls, *, api: rest.Rest | None = None,
                 store: records.PayloadStore | None = None,
                 should_renew: Callable[[], str | None] | None = None,
                 commit_delay: float = journalcommits.DEFAULT_DELAY_SECONDS) -> Worker:
        """The worker of this pod (raises :class:`context.WorkerContextError` outside one).
        Nothing is written until :meth:`start`. ``store`` keeps payloads too large to go
        inline (for example ``records.FsspecStore("file:///mnt/records")``);
        ``should_renew`` is the keeper's renew gate (the sidecar's check-in window);
        ``commit_delay`` the group commit's (0..10 s; :meth:`step`)."""
        context = Context.from_env()
        api = api or pod_api()
        return cls(context=context, api=api, store=store,
                   commit_delay=journalcommits.check_delay(commit_delay), keeper=keeper.Keeper(
            renewer=renewer.Renewer(api=api, namespace=context.namespace,
                                    lease=context.lease, identity=context.identity),
            should_renew=should_renew))

    @property
    def steps(self) -> prefix.Steps:
        """The recoverable prefix and this attempt's steps over it (read on first use)."""
        with self._reading:  # one view per attempt, however many threads ask first
            if self._steps is None:
                self._steps = self._read_steps()
            return self._steps

    def _read_steps(self) -> prefix.Steps:
        """Read the prefix once: from the Leases, and the journal when the run has one."""
        c = self.context
        leases = prefix.list_leases(api=self.api, namespace=c.namespace, slot=c.slot,
                                    run=c.run)
        on_lease = records.LeaseRecords(api=self.api, namespace=c.namespace, lease=c.lease,
                                        attempt=c.attempt)
        location = self.journal if self.journal is not None else journals.Location.from_env()
        if location is None:  # a run pinned without a journal: records on the Lease
            return prefix.Steps(prefix=prefix.prefix(leases=leases, attempt=c.attempt),
                                store=self.store, ledger=on_lease)
        own = [lease for lease in leases if (lease.get("metadata") or {}).get("name") == c.lease]
        # An error left on the Lease (a restarted sidecar's predecessor's) is cleared by the
        # first answer: the journal starts out failing if the Lease says so.
        left = bool(own and ((own[0].get("metadata") or {}).get("annotations") or {}).get(
            journals.ERROR))
        slot_journal = journals.Journal(objects=location.objects(), prefix=location.prefix,
                                        slot=c.slot, report=journals.ErrorReport(lease=on_lease),
                                        failing=left)
        try:
            found = prefix.prefix(leases=leases, attempt=c.attempt, journal=slot_journal)
        except journals.JournalDamaged as damaged:
            # Never a silent restart from step one: the slot shows it (JournalLost).
            journals.ErrorReport(lease=on_lease, annotation=journals.LOST)(str(damaged))
            raise
        head = journals.Head.on_lease(own[0]) if own else None
        return prefix.Steps(
            prefix=found,
            store=self.store or slot_journal.payloads(attempt=c.attempt),
            ledger=journalcommits.JournalRecords(
                journal=slot_journal, lease=on_lease, head=head, delay=self.commit_delay,
                usage=journals.Usage() if head is None else journals.Usage.on_lease(own[0])))

    def step(self, key: str, *, do: Callable[[], T],
             kind: records.Kind = records.Kind.STEP_RESULT, durable: bool = False) -> T:
        """Skip if committed (its result returned), else ``do()`` and commit its result.
        Typed as ``do``'s result; a skipped step's is read back as JSON (see
        :meth:`prefix.Steps.step`).

        With a journal the commit is grouped: the result is in this attempt's view at once
        and durable within :attr:`commit_delay` seconds (one head advance for every step
        staged meanwhile), at the next :meth:`flush`, effect or the attempt's end, whichever
        is first; a crash before that repeats the step in the successor. ``durable=True``
        returns only once it is durable. Without a journal every step is durable on
        return (a record on the Lease)."""
        with self.tracing.step(key) as mark:
            def done_in_step() -> T:
                mark.ran = True
                with usages.in_step(key):
                    return do()

            return self.steps.step(key, do=done_in_step, kind=kind, durable=durable)

    @property
    def tracing(self) -> spans.AttemptSpans:
        """This attempt's spans (``agentrun.worker._spans``: off unless the pod names an
        OTLP endpoint), made on first use."""
        with self._reading:
            if self._tracing is None:
                c = self.context
                self._tracing = spans.AttemptSpans.from_env(where={
                    "k8s.namespace.name": c.namespace, "agentrun.run": c.run,
                    "agentrun.slot": c.slot, "agentrun.node": c.node,
                    "agentrun.attempt": c.attempt})
            return self._tracing

    def check_budget(self) -> None:
        """Before a model call: raise :class:`usages.BudgetExceeded` when the run's usage
        (all its slots': :meth:`usages.Meter.check`) reached its budget; the attempt must
        then end, as after a question. :meth:`effect` checks first by itself, and so does
        the LangGraph integration before each model call."""
        self._usage_meter().check()

    def usage(self, model: str, *, input_tokens: int, output_tokens: int,
              cost: usages.Cost | None = None, currency: str | None = None
              ) -> usages.ModelUsage:
        """Report one model call's usage, after it returned: ``model`` as the provider names
        it, its input and output tokens, and its ``cost`` (a decimal amount in the run's
        currency; None: priced by the run's pinned price table, the bindings' ``prices``).
        Journaled durably with the step it was made in, before this returns; the attempt's
        sum goes on its Lease and the operator adds it up per attempt, slot and run. Raises
        :class:`usages.UsageError` for a report out of its bounds or a model the table
        does not price (nothing recorded), and needs the run's journal."""
        reported = self._usage_meter().report(model, input_tokens=input_tokens,
                                              output_tokens=output_tokens, cost=cost,
                                              currency=currency)
        self.tracing.model_call(model=model, attributes={
            "agentrun.model.input_tokens": input_tokens,
            "agentrun.model.output_tokens": output_tokens})
        return reported

    def _usage_meter(self) -> usages.Meter:
        steps = self.steps  # first: it takes the lock below itself
        with self._reading:
            if self._meter is None:
                self._meter = usages.Meter(steps=steps, context=self.context,
                                           prices=usages.price_table(self.context))
            return self._meter

    @property
    def usage_total(self) -> usages.ModelUsage | None:
        """This attempt's usage as committed (what its Lease says); None before any."""
        return None if self._meter is None else self._meter.total()

    def artifact(self, key: str, source: artifacts.Source) -> artifacts.Artifact:
        """Skip if committed, else stream ``source`` (a file's path, or a binary stream's
        ``read(n)``) into the run's journal and commit it, durably: the
        :class:`artifacts.Artifact` (``open()`` a stream of its bytes, checked against its
        sha256; ``download(path)``, resumable). Never holds more than one 8 MiB part of it
        in memory. Needs a journal (the run pinned one): else :class:`records.RecordError`."""
        return self._artifacts(key).artifact(key, source)

    def committed_artifact(self, key: str) -> artifacts.Artifact | None:
        """The artifact committed under ``key`` (by this attempt or in the recoverable
        prefix) and still stored, else None; nothing is streamed."""
        return self._artifacts(key).committed(key)

    def _artifacts(self, key: str) -> artifacts.Artifacts:
        ledger = self.steps.ledger
        if not isinstance(ledger, journalcommits.JournalRecords):
            raise records.RecordError(f"artifact {key}: artifacts go into the run's journal, "
                                      "and this run was pinned without one (the operator has "
                                      "no journal store configured)")
        return artifacts.Artifacts(steps=self.steps, journal=ledger.journal)

    def flush(self) -> None:
        """Return once every step this attempt committed is durable (raises if it cannot
        be: ``LeaseLost``-like :class:`records.RecordRefused`, or the store's outage)."""
        if self._steps is not None:
            self._steps.ledger.flush()

    def effect(self, name: str, *, key: str, call: effects.Call[T],
               reconcile: effects.Reconcile | None = None,
               owner: str | None = None, payload: records.JSON = None, approvers: int = 0,
               redact: Sequence[str] = ()) -> T:
        """Perform the external effect ``name`` under the ledger (see
        :meth:`effects.Ledger.effect`; ``owner`` names the service that owns it, shown
        to a person if it is ever unresolved); raises :class:`effects.EffectStopped` when
        the attempt must stop, and ``LeaseLapsed`` when the lease may have lapsed. Typed
        as ``call``'s result (what that promises: :meth:`effects.Ledger.effect`). An effect
        that requires approval (``approvers``, or the LaunchSpec's floor) needs ``payload``,
        the exact JSON it sends, and is sent only once people approved it
        (``agentrun.worker._approvals``). An attempt past its run's budget starts none
        (:meth:`check_budget`)."""
        self.check_budget()  # no effect starts past the run's budget
        ledger = effects.Ledger(steps=self.steps, keeper=self.keeper,
                                run_uid=self.context.run_uid, slot=self.context.slot,
                                floors=self.context.approvals)
        with self.tracing.effect(name, key=key):
            return ledger.effect(name, key=key, call=call, reconcile=reconcile, owner=owner,
                                 payload=payload, approvers=approvers, redact=redact)

    def ask(self, key: str, question: str, *, schema: Mapping[str, Any] | None = None,
            deadline_seconds: int | None = None,
            on_expiry: Literal["fail", "default"] = "fail",
            default: records.JSON = None) -> records.JSON:
        """A person's answer to ``question`` (JSON, satisfying ``schema``, a JSON Schema):
        returned once answered; until then it is asked and :class:`questions.QuestionAsked`
        is raised, which should end the attempt (leave the ``with`` block): no pod waits
        while a person thinks, and the next attempt's ``ask`` returns the answer. A question
        out of its bounds raises :class:`questions.QuestionError` (see
        :meth:`questions.Questions.ask`)."""
        return questions.Questions(steps=self.steps).ask(
            key, question, schema=schema, deadline_seconds=deadline_seconds,
            on_expiry=on_expiry, default=default)

    def start(self, *, timeout: float = START_TIMEOUT_SECONDS,
              on_lapse: Callable[[str], None] | None = None,
              on_resume: Callable[[str], None] | None = None,
              on_lost: Callable[[str], None] | None = None) -> None:
        """Renew once (telling the operator the worker started), then in the background;
        SIGTERM ends the process from now on (:func:`exit_on_sigterm`).
        Raises :class:`keeper.LeaseLost` if the lease is not this pod's, or
        :class:`keeper.LeaseLapsed` if no renewal succeeded within ``timeout`` seconds."""
        exit_on_sigterm()
        decision = self.keeper.first_renewal(timeout=timeout)
        if decision.verdict is Verdict.STOP:
            raise keeper.LeaseLost(decision.reason)
        if decision.verdict is Verdict.RETRY:
            raise keeper.LeaseLapsed(f"no renewal within {timeout:.0f}s: {decision.reason}")
        self.keeper.start(on_lapse=on_lapse, on_resume=on_resume, on_lost=on_lost)
        atexit.register(self._stop_at_exit)

    def stop(self, *, release: bool = True) -> None:
        """The attempt's end: flush what is staged and send the batched spans (at most
        ``telemetry.SHUTDOWN_SECONDS``) while the lease is still renewed, then stop
        renewing and (``release``) release the lease, so the operator ends the attempt as
        soon as the pod has finished instead of a lease duration later. After it, no
        worker of this attempt writes again (admission refuses): start no second
        :class:`Worker` in the same attempt. ``release=False`` only stops renewing (the
        sidecar, unless SIGTERM ended it: the kubelet may start it again)."""
        atexit.unregister(self._stop_at_exit)
        try:
            if self._steps is not None:
                self._steps.ledger.close()
        finally:
            try:
                if self._tracing is not None:  # while the lease is renewed, briefly
                    self._tracing.close()
            finally:
                if release:
                    self.keeper.release()
                else:
                    self.keeper.stop()

    def _stop_at_exit(self) -> None:
        """A worker started and never stopped (no ``with``, no :meth:`stop`): its staged
        steps made durable as the interpreter exits, before the process ends (a step
        returned is then durable however the script ends, short of a kill or
        ``os._exit``). Logged, never raised: the exit goes on."""
        try:
            self.stop()
        except Exception as failed:
            log.warning("steps staged by this attempt could not be made durable at exit: %s",
                        failed)

    def __enter__(self) -> Worker:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        """Stop (flushing); a flush that fails while another error unwinds is logged, so
        the error that ended the block is the one raised."""
        if error is None:
            self.stop()
            return
        try:
            self.stop()
        except Exception as failed:
            log.warning("steps staged by this attempt could not be made durable: %s", failed)
