"""The effect ledger: intent before the external call, outcome after.

An *effect* is a call to a service outside the run (its *owner*) that changes something
there: publishing a report, charging a card. Terms:

- *idempotency key*: :func:`idempotency_key`, the sha256 of the JSON list [the run's uid,
  the slot, the effect's key]; the same in every attempt, so the owner can deduplicate a re-send.
  An effect a person chose to send again (a rerun's ``--resend``) is a new effect: its
  generation (2, 3, ...) joins the list, so its key is new (``api.cuts.Resend``).
- *fencing token*: the attempt number; owners reject tokens lower than the highest seen,
  so a stale attempt cannot slip an effect in after its successor spoke.
- *owner*: a short name of the service that owns the effect (default: the effect's name),
  recorded in the intent and the unresolved record so a person knows whom to ask.
- *intent* / *outcome*: records ``<key>.intent`` (committed BEFORE the call) and
  ``<key>.outcome`` (after it) on the attempt's Lease; ``<key>.unresolved`` says the
  attempt stopped on an effect nobody could answer for (the operator shows it as the
  slot condition ``EffectUnresolved`` and starts no attempt until a person records the
  owner's answer with the resolve-effect command); ``<key>.resolved``, written by the
  operator on a later attempt's Lease, is that answer: *applied* (its result is committed
  as the outcome, never called) or *not applied* (re-sent with the same key under this
  attempt's own intent). Without it, ``.unresolved`` still stops the attempt, and one an
  earlier attempt recorded is recorded again on this attempt's Lease (the operator did
  not show it, or no longer keeps its answer: now it is shown, to be answered). An answer
  counts only for the unresolved record it names, and only while no later intent was
  committed (a successor that re-sent and stopped again needs a new answer). One attempt
  records at most :data:`~agentrun.api.bounds.EFFECTS_KEPT` unresolved effects, as many
  as a slot shows: past that an effect stops unrecorded (its intent stays without an
  outcome, or the earlier record stays), and a later attempt meets it again.
- *ambiguous*: an intent without an outcome. The call may or may not have reached the
  owner; only the owner knows. The successor must ask it (``reconcile(key)``) before
  anything else touches the effect: *applied* (with the result: recorded, never re-sent),
  *not applied* (re-sent with the same key, under this attempt's own intent), *in
  progress* (asked again, within a stated limit, never re-sent) or *unknown* (the attempt
  stops). No reconcile means stop too: the ledger never assumes and never re-sends on
  its own. This is at-least-once made visible, not exactly-once: the owner's deduplication
  by key is what keeps a re-send harmless. Within one attempt the same holds: each record
  the ledger commits counts at once in the attempt's own view (``prefix.Steps.commit``),
  the intent from the moment the call may start, so a call that raised is asked about by
  the next ``effect`` of its key, exactly as a successor would ask.
- *unstorable*: an applied effect whose result no record can hold (see
  :class:`ResultNotStored`): its outcome is committed all the same, with ``result`` null
  and ``unstorable`` saying why, so the effect is never sent or asked about again.

Before committing an intent and again before the call, the keeper's ``ensure_live()``
(it raises ``LeaseLapsed`` once the lease may have lapsed) keeps a worker whose lease may
be gone from starting an effect. :func:`decide` is the pure state machine; :class:`Ledger`
performs it.
"""

from __future__ import annotations

import enum
import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, cast

from agentrun.api import bounds, names
from agentrun.worker import _approvals as approvals
from agentrun.worker import _prefix as prefix
from agentrun.worker import _records as records

JSON = records.JSON
T = TypeVar("T")  # the caller's result type: what ``call`` returns
INTENT, OUTCOME, UNRESOLVED = "intent", "outcome", "unresolved"
DEFAULT_WAIT_SECONDS = 300.0  # how long "in progress" is waited out before stopping
DEFAULT_POLL_SECONDS = 5.0
RESOLVED = names.RESOLVED_SUFFIX.lstrip(".")
OWNER_ANSWERED_UNKNOWN, NO_RECONCILE = "owner-answered-unknown", "no-reconcile"  # causes


class Live(Protocol):
    """The lease keeper's side the ledger needs (``agentrun.worker._keeper``)."""

    def ensure_live(self) -> None:
        """Return while effects may start; raise (``LeaseLapsed``) once they may not."""


class Answer(enum.StrEnum):
    APPLIED = "applied"
    NOT_APPLIED = "not-applied"
    IN_PROGRESS = "in-progress"
    UNKNOWN = "unknown"


@dataclass(frozen=True, kw_only=True)
class Reconciled:
    """The owner's answer about one idempotency key (``result`` when applied)."""

    answer: Answer
    result: JSON = None


class EffectStopped(Exception):
    """The attempt must stop: this effect cannot be settled by the worker alone."""

    def __init__(self, message: str, *, key: str, idempotency_key: str) -> None:
        super().__init__(message)
        self.key, self.idempotency_key = key, idempotency_key


class AmbiguousEffect(EffectStopped):
    """An intent without an outcome and no ``reconcile`` to ask the owner, or its answer
    was "unknown": recorded as ``<key>.unresolved`` for the operator and a person."""


class EffectStillInProgress(EffectStopped):
    """The owner kept answering "in progress" past the wait limit; nothing was re-sent.
    Not recorded as unresolved: a later attempt asks again."""


class ResultNotStored(records.RecordError):
    """The owner applied the effect and that is recorded (it is never sent again), but its
    result could not be stored (not plain JSON, nested too deep, too large for the record
    or its store: the message says which), so the outcome holds ``unstorable`` instead of
    the result. Raised in place of the result by this attempt and every later one; a
    worker that does not need the result may catch it and go on."""

    def __init__(self, message: str, *, key: str, idempotency_key: str) -> None:
        super().__init__(message)
        self.key, self.idempotency_key = key, idempotency_key


class Step(enum.Enum):
    """What the ledger does next for one effect (see :func:`decide`)."""

    RETURN_OUTCOME = "return the committed outcome; never call"
    STOP_UNRESOLVED = "stop: it is recorded unresolved and not answered"
    CALL = "commit an intent, then call the owner"
    STOP_AMBIGUOUS = "stop: an intent without an outcome and nobody to ask"
    RECONCILE = "ask the owner (reconcile) before anything else"
    RECORD_APPLIED = "commit the owner's result as the outcome; never re-send"
    RESEND = "commit this attempt's intent, then re-send with the same key"
    WAIT = "wait, then ask the owner again; never re-send"
    STOP_IN_PROGRESS = "stop: still in progress past the wait limit"


def idempotency_key(*, run_uid: str, slot: str, key: str, generation: int = 1) -> str:
    """The stable key the owner deduplicates by (same in every attempt of the slot); an
    effect a rerun sends again on purpose (``generation`` 2, 3, ...) is a new effect, with
    a key of its own."""
    if not run_uid:
        raise ValueError("an idempotency key needs the run's uid (metadata.uid)")
    parts: list[JSON] = [run_uid, slot, key, *((generation,) if generation > 1 else ())]
    return hashlib.sha256(records.canonical(parts)).hexdigest()  # unambiguous


def decide(*, intent: bool, outcome: bool, unresolved: bool, can_reconcile: bool,
           answer: Answer | None = None, waited_seconds: float = 0.0,
           wait_seconds: float = DEFAULT_WAIT_SECONDS, resolved: Answer | None = None) -> Step:
    """The next step for one effect, from what the trusted prefix holds and, once asked,
    the owner's ``answer`` (``waited_seconds`` since the first "in progress");
    ``resolved``: the answer a person recorded for its unresolved record (resolve-effect),
    applied or not applied; any other value is no answer."""
    if outcome:
        return Step.RETURN_OUTCOME
    if unresolved:
        if resolved is Answer.APPLIED:
            return Step.RECORD_APPLIED
        if resolved is Answer.NOT_APPLIED:
            return Step.RESEND
        return Step.STOP_UNRESOLVED
    if not intent:
        return Step.CALL
    if not can_reconcile:
        return Step.STOP_AMBIGUOUS
    if answer is None:
        return Step.RECONCILE
    if answer is Answer.APPLIED:
        return Step.RECORD_APPLIED
    if answer is Answer.NOT_APPLIED:
        return Step.RESEND
    if answer is Answer.IN_PROGRESS:
        return Step.WAIT if waited_seconds < wait_seconds else Step.STOP_IN_PROGRESS
    return Step.STOP_AMBIGUOUS


def _not_stored(*, name: str, key: str, idem: str, why: str) -> ResultNotStored:
    return ResultNotStored(f"effect {name} ({key}, idempotency key {idem}) was applied and "
                           f"is recorded so (never sent again), but its result was not "
                           f"stored: {why}", key=key, idempotency_key=idem)


# (idempotency key, fencing token) -> the owner's result; ``Call[T]``: a result of type T
Call = Callable[[str, int], T]
Reconcile = Callable[[str], Reconciled]  # idempotency key -> the owner's answer


@dataclass(kw_only=True)
class Ledger:
    """The effects of one attempt: ``steps`` holds its prefix and commits its records."""

    steps: prefix.Steps
    keeper: Live
    run_uid: str
    slot: str
    floors: Mapping[str, int] = field(default_factory=dict)  # the LaunchSpec's approvals
    wait_seconds: float = DEFAULT_WAIT_SECONDS
    poll_seconds: float = DEFAULT_POLL_SECONDS
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic

    @property
    def token(self) -> int:
        return self.steps.prefix.attempt

    def _record(self, key: str, suffix: str, kind: records.Kind,
                payload: JSON) -> records.Record:
        return records.make(key=f"{key}.{suffix}", kind=kind, attempt=self.token,
                            payload=payload, store=self.steps.store)

    def _commit(self, key: str, suffix: str, kind: records.Kind, payload: JSON) -> None:
        """Commit a record and count it in this attempt's own view at once (a later
        ``effect`` of the key in this attempt sees it as a successor would)."""
        self.steps.commit(self._record(key, suffix, kind, payload))

    def _call(self, *, key: str, name: str, idem: str, call: Call[T], owner: str,
              approval: dict[str, JSON] | None = None) -> T:
        self.keeper.ensure_live()
        intent = self.steps.ledger.commit(self._record(
            key, INTENT, records.Kind.EFFECT_INTENT,
            {"effect": name, "idempotencyKey": idem, "fencingToken": self.token,
             "owner": owner, **({"approval": approval} if approval else {})}))
        # A lapse here stops the effect before anything was sent: a retry in this attempt
        # may send it without asking (a successor, which cannot know that, asks).
        self.keeper.ensure_live()
        # From here on the call may reach the owner: if it raises, its fate is unknown,
        # and the next ``effect`` of this key must ask, as a successor would.
        self.steps.remember(intent)
        return self._applied(key=key, name=name, idem=idem, result=call(idem, self.token),
                             via="call")

    def _applied(self, *, key: str, name: str, idem: str, result: T, via: str) -> T:
        """Commit the outcome of an effect the owner applied; ``result``, or
        :class:`ResultNotStored` when the fact can be kept but the result cannot (the call
        already happened: losing the fact would send it again, or ask the owner again)."""
        outcome = {"answer": str(Answer.APPLIED), "result": result, "via": via}
        try:
            records.storable(key=f"{key}.{OUTCOME}", payload=outcome, store=self.steps.store)
        except records.RecordError as error:
            why = bounds.clip_bytes(str(error), limit=bounds.RECORD_MESSAGE_CHARS)
            self._commit(key, OUTCOME, records.Kind.EFFECT_OUTCOME,
                         {**outcome, "result": None, "unstorable": why})
            raise _not_stored(name=name, key=key, idem=idem, why=why) from None
        self._commit(key, OUTCOME, records.Kind.EFFECT_OUTCOME, outcome)
        return result

    def _recorded_here(self) -> int:
        """How many unresolved records this attempt has committed."""
        return sum(1 for found, record in self.steps.prefix.committed.items()
                   if found.endswith(f".{UNRESOLVED}") and record.attempt == self.token)

    def _stop(self, *, key: str, name: str, idem: str, why: str, cause: str,
              owner: str) -> AmbiguousEffect:
        """Record ``<key>.unresolved`` (within the bound) and the exception to raise."""
        told = f"effect {name} ({key}, idempotency key {idem}): {why}"
        with self.steps.lock:  # counted and committed as one (the sidecar's sessions share)
            if self._recorded_here() >= bounds.EFFECTS_KEPT:
                return AmbiguousEffect(
                    f"{told}; not recorded unresolved: this attempt already recorded "
                    f"{bounds.EFFECTS_KEPT}, as many as a slot shows; a later attempt meets "
                    "it again", key=key, idempotency_key=idem)
            self._commit(key, UNRESOLVED, records.Kind.DECISION,
                         {"effect": name, "idempotencyKey": idem, "owner": owner,
                          "cause": cause,
                          "reason": bounds.clip(why, limit=bounds.RECORD_MESSAGE_CHARS)})
        return AmbiguousEffect(told, key=key, idempotency_key=idem)

    def _unanswered(self, *, key: str, name: str, idem: str, owner: str) -> AmbiguousEffect:
        """Stop on an unresolved record nobody answered: one of an earlier attempt is
        recorded again on this attempt's Lease (with its cause), so the slot shows it."""
        stopped = self.steps.prefix.get(f"{key}.{UNRESOLVED}")
        if stopped is None or stopped.attempt >= self.token:
            return AmbiguousEffect(f"effect {name} ({key}, idempotency key {idem}) is "
                                   "recorded unresolved; it waits for the owner's answer "
                                   "(resolve-effect)", key=key, idempotency_key=idem)
        _, earlier = self.steps.committed(f"{key}.{UNRESOLVED}")
        cause = earlier.get("cause") if isinstance(earlier, dict) else None
        return self._stop(key=key, name=name, idem=idem, owner=owner,
                          cause=NO_RECONCILE if cause == NO_RECONCILE else OWNER_ANSWERED_UNKNOWN,
                          why=f"attempt {stopped.attempt} recorded it unresolved and no "
                              "answer reached this attempt; it waits for the owner's answer "
                              "(resolve-effect)")

    def resolution(self, key: str) -> tuple[bool, Reconciled | None]:
        """(whether ``key`` is unresolved for this attempt, the person's answer if any).

        Unresolved: a ``.unresolved`` record and no intent committed after it. The answer
        is the ``.resolved`` record naming that very unresolved record's attempt.
        """
        found = self.steps.prefix
        stopped, intent = found.get(f"{key}.{UNRESOLVED}"), found.get(f"{key}.{INTENT}")
        if stopped is None or (intent is not None and intent.attempt > stopped.attempt):
            return False, None
        done, payload = self.steps.committed(f"{key}.{RESOLVED}")
        if not done or not isinstance(payload, dict) or payload.get(
                "unresolvedAttempt") != stopped.attempt:
            return True, None
        answer = payload.get("answer")
        if answer not in (Answer.APPLIED, Answer.NOT_APPLIED):
            return True, None
        return True, Reconciled(answer=Answer(answer), result=payload.get("result"))

    def effect(self, name: str, *, key: str, call: Call[T],
               reconcile: Reconcile | None = None, owner: str | None = None,
               payload: JSON = None, approvers: int = 0, redact: Sequence[str] = ()) -> T:
        """Perform the effect ``name`` once per slot, or return its recorded result.

        ``call(idempotency_key, fencing_token)`` sends it to the owner; ``reconcile
        (idempotency_key)`` asks the owner what became of it; ``owner`` names the service
        that owns the effect (at most 63 characters; default ``name``), for the person
        who may have to ask it. Raises :class:`EffectStopped` when the attempt must stop
        (see the module docstring).

        ``payload``, ``approvers``, ``redact``: an effect that requires approval (the
        worker's ``approvers``, never below the LaunchSpec's floor) is sent only once that
        many people approved ``payload`` (the exact JSON it sends); see
        :mod:`agentrun.worker._approvals`, which raises ``ApprovalRequested`` (end the
        attempt), ``EffectDenied`` or, without a ``payload``, ``ApprovalError``.

        The result is typed as ``call``'s. Unless ``call`` ran now, it is the recorded
        outcome read back as JSON, or the owner's ``Reconciled.result``: the same type
        only if ``call`` returns plain JSON and ``reconcile`` answers in its shape.
        """
        records.check_step_key(key)
        owner = name if owner is None else owner
        if not owner.strip() or len(owner) > bounds.EFFECT_NAME_CHARS:
            raise ValueError(f"effect {name}: owner {owner[:80]!r} must be a non-blank name "
                             f"of at most {bounds.EFFECT_NAME_CHARS} characters")
        idem = idempotency_key(run_uid=self.run_uid, slot=self.slot, key=key,
                               generation=self.steps.prefix.leave.generation(key))
        needed = approvals.required(name=name, approvers=approvers, floor=self.floors)
        found = self.steps.prefix
        unresolved, reconciled = self.resolution(key)
        has = {INTENT: found.get(f"{key}.{INTENT}") is not None,
               OUTCOME: found.get(f"{key}.{OUTCOME}") is not None, UNRESOLVED: unresolved}
        resolved = None if reconciled is None else reconciled.answer
        via = "resolve-effect" if reconciled is not None else "reconcile"
        answer: Answer | None = None
        first_wait: float | None = None
        while True:
            waited = 0.0 if first_wait is None else self.monotonic() - first_wait
            step = decide(intent=has[INTENT], outcome=has[OUTCOME],
                          unresolved=has[UNRESOLVED], can_reconcile=reconcile is not None,
                          answer=answer, waited_seconds=waited,
                          wait_seconds=self.wait_seconds, resolved=resolved)
            if step is Step.RETURN_OUTCOME:
                done, outcome = self.steps.committed(f"{key}.{OUTCOME}")
                if not done or not isinstance(outcome, dict):
                    raise AmbiguousEffect(f"effect {name} ({key}): its outcome record "
                                          "cannot be read intact", key=key,
                                          idempotency_key=idem)
                if "unstorable" in outcome:
                    raise _not_stored(name=name, key=key, idem=idem,
                                      why=str(outcome["unstorable"]))
                return cast(T, outcome.get("result"))  # recorded: see the docstring
            if step is Step.STOP_UNRESOLVED:
                raise self._unanswered(key=key, name=name, idem=idem, owner=owner)
            if step in (Step.CALL, Step.RESEND) and needed and payload is None:
                raise approvals.ApprovalError(
                    f"effect {name} requires approval by {needed} people (the worker's "
                    "approvers or the LaunchSpec's spec.approvals) before it is sent: give "
                    "payload=, the exact JSON it sends")
            if step in (Step.CALL, Step.RESEND):
                approval = approvals.Approvals(steps=self.steps).require(
                    key=key, name=name, owner=owner, payload=payload, approvers=needed,
                    redact=redact) if needed else None
                return self._call(key=key, name=name, idem=idem, call=call, owner=owner,
                                  approval=approval)
            if step is Step.STOP_AMBIGUOUS:
                unknown = answer is Answer.UNKNOWN
                why = ("the owner answered unknown" if unknown else
                       "an intent without an outcome, and no reconcile to ask the owner")
                raise self._stop(key=key, name=name, idem=idem, why=why, owner=owner,
                                 cause=OWNER_ANSWERED_UNKNOWN if unknown else NO_RECONCILE)
            if step is Step.RECORD_APPLIED:
                assert reconciled is not None
                return self._applied(key=key, name=name, idem=idem,
                                     result=cast(T, reconciled.result), via=via)
            if step is Step.STOP_IN_PROGRESS:
                raise EffectStillInProgress(
                    f"effect {name} ({key}, idempotency key {idem}): the owner still "
                    f"answers in progress after {self.wait_seconds:.0f}s; nothing re-sent",
                    key=key, idempotency_key=idem)
            if step is Step.WAIT:
                first_wait = self.monotonic() if first_wait is None else first_wait
                self.sleep(self.poll_seconds)
            assert reconcile is not None
            reconciled = reconcile(idem)
            answer = reconciled.answer
            if answer is Answer.IN_PROGRESS and first_wait is None:
                first_wait = self.monotonic()
