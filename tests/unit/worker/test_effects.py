"""The effect ledger: every branch of the state machine (exhaustively for :func:`decide`),
and the ledger against a fake owner that counts what it is sent: intent before the call,
outcome after, ``ensure_live`` before each, never a call before ``reconcile`` answers
"not applied", "in progress" waited out on a fake clock without re-sending, "unknown" or
no reconcile recorded as unresolved."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from agentrun.worker import _effects as effects
from agentrun.worker import _prefix as prefix
from agentrun.worker import _records as records
from tests.support.ledgers import DurableOnReturn

Answer, Step = effects.Answer, effects.Step


class LeaseLapsedError(Exception):
    pass


class Keeper:
    def __init__(self, *, lapse_after: int | None = None) -> None:
        self.checks, self.lapse_after = 0, lapse_after

    def ensure_live(self) -> None:
        if self.lapse_after is not None and self.checks >= self.lapse_after:
            raise LeaseLapsedError("lease may have lapsed")
        self.checks += 1


class Owner:
    """An effect owner: deduplicates by key, rejects lower fencing tokens."""

    def __init__(self, answers: list[Answer] | None = None) -> None:
        self.answers = list(answers or [])
        self.applied: dict[str, Any] = {}
        self.log: list[tuple[str, str, int | None]] = []
        self.highest = 0

    def call(self, key: str, token: int) -> Any:
        self.log.append(("call", key, token))
        if token < self.highest:
            raise PermissionError("stale fencing token")
        self.highest = token
        return self.applied.setdefault(key, {"published": len(self.applied) + 1})

    def reconcile(self, key: str) -> effects.Reconciled:
        self.log.append(("reconcile", key, None))
        answer = self.answers.pop(0)
        return effects.Reconciled(answer=answer, result=self.applied.get(key, {"published": 1})
                                  if answer is Answer.APPLIED else None)


class Memory(DurableOnReturn):
    def __init__(self, log: list[tuple[str, str, int | None]]) -> None:
        self.committed: list[records.Record] = []
        self.log = log

    def commit(self, record: records.Record) -> records.Record:
        self.log.append(("commit", record.key, record.attempt))
        self.committed.append(record)
        return record


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def ledger(*, attempt: int, committed: dict[str, records.Record] | None = None,
           owner: Owner, keeper: Keeper | None = None,
           wait_seconds: float = 60.0) -> tuple[effects.Ledger, Memory, Clock]:
    memory, clock = Memory(owner.log), Clock()
    steps = prefix.Steps(prefix=prefix.Prefix(attempt=attempt, committed=committed or {}),
                         ledger=memory)
    found = effects.Ledger(steps=steps, keeper=keeper or Keeper(), run_uid="uid-1",
                           slot="s", wait_seconds=wait_seconds, poll_seconds=5.0,
                           sleep=clock.sleep, monotonic=lambda: clock.now)
    return found, memory, clock


IDEM = effects.idempotency_key(run_uid="uid-1", slot="s", key="publish")


def intent(attempt: int = 1) -> dict[str, records.Record]:
    return {"publish.intent": records.make(
        key="publish.intent", kind=records.Kind.EFFECT_INTENT, attempt=attempt,
        payload={"effect": "publish", "idempotencyKey": IDEM, "fencingToken": attempt})}


def test_the_key_is_stable_and_distinct() -> None:
    assert effects.idempotency_key(run_uid="u", slot="s", key="k") == \
        effects.idempotency_key(run_uid="u", slot="s", key="k")
    assert len({effects.idempotency_key(run_uid=u, slot=s, key=k)
                for u, s, k in itertools.product(["u", "v"], ["s", "t"], ["k", "l"])}) == 8
    assert effects.idempotency_key(run_uid="a", slot="b\0c", key="d") != \
        effects.idempotency_key(run_uid="a", slot="b", key="c\0d")
    with pytest.raises(ValueError, match="uid"):
        effects.idempotency_key(run_uid="", slot="s", key="k")


def test_a_fresh_effect_commits_intent_then_calls_then_commits_outcome() -> None:
    owner, keeper = Owner(), Keeper()
    found, memory, _ = ledger(attempt=1, owner=owner, keeper=keeper)
    assert found.effect("publish", key="publish", call=owner.call) == {"published": 1}
    assert owner.log == [("commit", "publish.intent", 1), ("call", IDEM, 1),
                         ("commit", "publish.outcome", 1)]
    assert keeper.checks == 2
    assert memory.committed[0].inline == {"effect": "publish", "idempotencyKey": IDEM,
                                          "fencingToken": 1, "owner": "publish"}
    assert memory.committed[1].inline == {"answer": "applied", "result": {"published": 1},
                                          "via": "call"}


@pytest.mark.parametrize(("lapse_after", "log"), [
    (0, []), (1, [("commit", "publish.intent", 1)])])
def test_a_lapsed_lease_starts_no_effect(lapse_after: int, log: list[Any]) -> None:
    owner = Owner()
    found, _, _ = ledger(attempt=1, owner=owner, keeper=Keeper(lapse_after=lapse_after))
    with pytest.raises(LeaseLapsedError):
        found.effect("publish", key="publish", call=owner.call)
    assert owner.log == log and owner.applied == {}


def test_a_failed_call_leaves_the_intent_alone() -> None:
    owner = Owner()
    found, memory, _ = ledger(attempt=1, owner=owner)

    def broken(key: str, token: int) -> Any:
        raise ConnectionError("reset")
    with pytest.raises(ConnectionError):
        found.effect("publish", key="publish", call=broken)
    assert [r.key for r in memory.committed] == ["publish.intent"]


class Flaky(Owner):
    """An owner whose first ``fail`` calls raise after it got them (an answer lost in
    transit: ``applied`` says whether the owner had applied it)."""

    def __init__(self, answers: list[Answer] | None = None, *, fail: int = 1,
                 applied: bool = False) -> None:
        super().__init__(answers)
        self.fail, self.apply_failed = fail, applied

    def call(self, key: str, token: int) -> Any:
        if self.fail <= 0:
            return super().call(key, token)
        self.fail -= 1
        self.log.append(("call", key, token))
        if self.apply_failed:
            self.applied.setdefault(key, {"published": 1})
        raise TimeoutError("the owner's answer was lost")


def calls(owner: Owner) -> list[str]:
    return [what for what, _, _ in owner.log if what in ("call", "reconcile")]


@pytest.mark.parametrize(("answers", "applied", "then"), [
    ([Answer.APPLIED], True, ["call", "reconcile"]),
    ([Answer.NOT_APPLIED], False, ["call", "reconcile", "call"]),
    ([Answer.IN_PROGRESS, Answer.APPLIED], True, ["call", "reconcile", "reconcile"])])
def test_a_call_that_raised_is_asked_about_before_anything_else(
        answers: list[Answer], applied: bool, then: list[str]) -> None:
    owner = Flaky(answers, applied=applied)
    found, memory, _ = ledger(attempt=1, owner=owner)
    with pytest.raises(TimeoutError):
        found.effect("publish", key="publish", call=owner.call, reconcile=owner.reconcile)
    assert found.effect("publish", key="publish", call=owner.call,
                        reconcile=owner.reconcile) == {"published": 1}
    assert calls(owner) == then and len(owner.applied) == 1
    assert [r.key for r in memory.committed][-1] == "publish.outcome"
    # Settled: a third call in this attempt returns the outcome, asking no one.
    asked = len(owner.log)
    assert found.effect("publish", key="publish", call=owner.call,
                        reconcile=owner.reconcile) == {"published": 1}
    assert len(owner.log) == asked


@pytest.mark.parametrize(("answers", "cause"), [
    ([Answer.UNKNOWN], "owner-answered-unknown"), (None, "no-reconcile")])
def test_a_call_that_raised_with_nobody_to_answer_stops_and_stays_stopped(
        answers: list[Answer] | None, cause: str) -> None:
    owner = Flaky(answers)
    found, memory, _ = ledger(attempt=1, owner=owner)
    reconcile = None if answers is None else owner.reconcile
    with pytest.raises(TimeoutError):
        found.effect("publish", key="publish", call=owner.call, reconcile=reconcile)
    for _ in range(2):  # the second time it is already recorded: it stops at once
        with pytest.raises(effects.AmbiguousEffect):
            found.effect("publish", key="publish", call=owner.call, reconcile=reconcile)
    assert calls(owner) == ["call"] + (["reconcile"] if answers else [])
    assert [r.key for r in memory.committed] == ["publish.intent", "publish.unresolved"]
    assert memory.committed[1].inline["cause"] == cause


def test_a_lapse_before_the_call_sent_nothing_so_a_retry_sends_without_asking() -> None:
    owner, keeper = Owner(), Keeper(lapse_after=1)
    found, _, _ = ledger(attempt=1, owner=owner, keeper=keeper)
    with pytest.raises(LeaseLapsedError):
        found.effect("publish", key="publish", call=owner.call)
    keeper.lapse_after = None
    assert found.effect("publish", key="publish", call=owner.call) == {"published": 1}
    assert owner.log == [("commit", "publish.intent", 1), ("commit", "publish.intent", 1),
                         ("call", IDEM, 1), ("commit", "publish.outcome", 1)]


def test_a_committed_outcome_is_returned_without_asking_anyone() -> None:
    owner = Owner()
    outcome = records.make(key="publish.outcome", kind=records.Kind.EFFECT_OUTCOME,
                           attempt=1, payload={"answer": "applied", "result": "r"})
    found, memory, _ = ledger(attempt=2, owner=owner,
                              committed={**intent(), "publish.outcome": outcome})
    assert found.effect("publish", key="publish", call=owner.call,
                        reconcile=owner.reconcile) == "r"
    assert owner.log == [] and memory.committed == []


def test_an_unreadable_outcome_stops() -> None:
    owner = Owner()
    outcome = records.Record(attempt=1, digest="0" * 64, key="publish.outcome",
                             kind=records.Kind.EFFECT_OUTCOME, ref="file:///gone", size=9)
    found, _, _ = ledger(attempt=2, owner=owner, committed={"publish.outcome": outcome})
    with pytest.raises(effects.AmbiguousEffect, match="cannot be read"):
        found.effect("publish", key="publish", call=owner.call, reconcile=owner.reconcile)
    assert owner.log == []


def test_a_recorded_unresolved_effect_stops_at_once() -> None:
    owner = Owner()
    unresolved = records.make(key="publish.unresolved", kind=records.Kind.DECISION,
                              attempt=1, payload={"reason": "unknown"})
    found, memory, _ = ledger(attempt=2, owner=owner,
                              committed={**intent(), "publish.unresolved": unresolved})
    with pytest.raises(effects.AmbiguousEffect, match="resolve-effect"):
        found.effect("publish", key="publish", call=owner.call, reconcile=owner.reconcile)
    assert calls(owner) == []  # neither sent nor asked: recorded again, for a person
    assert [(r.key, r.attempt, r.inline["cause"]) for r in memory.committed] == [
        ("publish.unresolved", 2, "owner-answered-unknown")]


def test_an_intent_without_reconcile_is_recorded_unresolved() -> None:
    owner = Owner()
    found, memory, _ = ledger(attempt=2, owner=owner, committed=intent())
    with pytest.raises(effects.AmbiguousEffect, match="no reconcile") as raised:
        found.effect("publish", key="publish", call=owner.call)
    assert raised.value.idempotency_key == IDEM and raised.value.key == "publish"
    assert owner.log == [("commit", "publish.unresolved", 2)]
    assert memory.committed[0].inline["idempotencyKey"] == IDEM


def test_applied_is_recorded_and_never_re_sent() -> None:
    owner = Owner([Answer.APPLIED])
    owner.applied[IDEM] = {"published": 1}
    found, memory, _ = ledger(attempt=2, owner=owner, committed=intent())
    assert found.effect("publish", key="publish", call=owner.call,
                        reconcile=owner.reconcile) == {"published": 1}
    assert owner.log == [("reconcile", IDEM, None), ("commit", "publish.outcome", 2)]
    assert memory.committed[0].inline["via"] == "reconcile"


def test_not_applied_re_sends_the_same_key_under_its_own_intent() -> None:
    owner = Owner([Answer.NOT_APPLIED])
    keeper = Keeper()
    found, _, _ = ledger(attempt=2, owner=owner, committed=intent(), keeper=keeper)
    assert found.effect("publish", key="publish", call=owner.call,
                        reconcile=owner.reconcile) == {"published": 1}
    assert owner.log == [("reconcile", IDEM, None), ("commit", "publish.intent", 2),
                         ("call", IDEM, 2), ("commit", "publish.outcome", 2)]
    assert keeper.checks == 2 and len(owner.applied) == 1


def test_in_progress_waits_without_re_sending_then_records_applied() -> None:
    owner = Owner([Answer.IN_PROGRESS, Answer.IN_PROGRESS, Answer.APPLIED])
    found, _, clock = ledger(attempt=2, owner=owner, committed=intent())
    found.effect("publish", key="publish", call=owner.call, reconcile=owner.reconcile)
    assert [entry[0] for entry in owner.log] == ["reconcile"] * 3 + ["commit"]
    assert clock.slept == [5.0, 5.0]


def test_in_progress_past_the_limit_stops_without_recording_unresolved() -> None:
    owner = Owner([Answer.IN_PROGRESS] * 20)
    found, memory, clock = ledger(attempt=2, owner=owner, committed=intent(),
                                  wait_seconds=12.0)
    with pytest.raises(effects.EffectStillInProgress, match="nothing re-sent"):
        found.effect("publish", key="publish", call=owner.call, reconcile=owner.reconcile)
    assert clock.now >= 12.0 and clock.slept == [5.0, 5.0, 5.0]
    assert {entry[0] for entry in owner.log} == {"reconcile"} and memory.committed == []


def test_unknown_stops_and_is_recorded_for_the_operator() -> None:
    owner = Owner([Answer.UNKNOWN])
    found, memory, _ = ledger(attempt=2, owner=owner, committed=intent())
    with pytest.raises(effects.AmbiguousEffect, match="answered unknown"):
        found.effect("publish", key="publish", call=owner.call, reconcile=owner.reconcile)
    assert [r.key for r in memory.committed] == ["publish.unresolved"]
    assert all(entry[0] != "call" for entry in owner.log)


def test_a_key_too_long_for_its_records_is_refused_before_anything() -> None:
    owner = Owner()
    found, _, _ = ledger(attempt=1, owner=owner)
    with pytest.raises(records.RecordError, match="step key"):
        found.effect("publish", key="x" * 60, call=owner.call)
    assert owner.log == []


@pytest.mark.parametrize(("intent_", "outcome", "unresolved", "can", "answer", "waited"),
                         list(itertools.product([False, True], [False, True], [False, True],
                                                [False, True], [None, *Answer], [0.0, 99.0])))
def test_decide_never_calls_over_an_unanswered_intent(
        intent_: bool, outcome: bool, unresolved: bool, can: bool, answer: Answer | None,
        waited: float) -> None:
    step = effects.decide(intent=intent_, outcome=outcome, unresolved=unresolved,
                          can_reconcile=can, answer=answer, waited_seconds=waited,
                          wait_seconds=60.0)
    if outcome:
        assert step is Step.RETURN_OUTCOME
    elif unresolved:
        assert step is Step.STOP_UNRESOLVED
    elif not intent_:
        assert step is Step.CALL
    elif not can:
        assert step is Step.STOP_AMBIGUOUS
    else:
        assert step is {None: Step.RECONCILE, Answer.APPLIED: Step.RECORD_APPLIED,
                        Answer.NOT_APPLIED: Step.RESEND, Answer.UNKNOWN: Step.STOP_AMBIGUOUS,
                        Answer.IN_PROGRESS: Step.WAIT if waited < 60 else
                        Step.STOP_IN_PROGRESS}[answer]
