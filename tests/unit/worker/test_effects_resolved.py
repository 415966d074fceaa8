"""The ledger and a person's answer: ``owner`` in the intent and the
unresolved record; :func:`effects.decide` with ``resolved`` over every input; a
``.resolved`` record for the unresolved one → applied is committed as the outcome with
the recorded result and never called, not applied is re-sent under this attempt's own
intent with the same key; an answer for another unresolved record, a later intent, a
malformed answer, or none at all still stops without calling; an owner name too long is
refused before anything."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from agentrun.api import bounds, slots
from agentrun.core.attempts import effectrecords
from agentrun.worker import _effects as effects
from agentrun.worker import _records as records

from .test_effects import IDEM, Owner, intent, ledger

Answer, Step = effects.Answer, effects.Step


def unresolved(attempt: int = 1) -> dict[str, records.Record]:
    return {"publish.unresolved": records.make(
        key="publish.unresolved", kind=records.Kind.DECISION, attempt=attempt,
        payload={"effect": "publish", "idempotencyKey": IDEM, "reason": "unknown"})}


def resolved(attempt: int, answer: Any, *, result: Any = None,
             unresolved_attempt: int = 1) -> dict[str, records.Record]:
    payload = {"answer": answer, "result": result, "reason": "asked them", "actor": "alice",
               "unresolvedAttempt": unresolved_attempt}
    return {"publish.resolved": records.make(key="publish.resolved",
                                             kind=records.Kind.DECISION, attempt=attempt,
                                             payload=payload)}


def test_the_owner_goes_into_intent_and_unresolved_records() -> None:
    owner = Owner()
    found, memory, _ = ledger(attempt=1, owner=owner)
    found.effect("publish", key="publish", call=owner.call, owner="publisher-svc")
    assert memory.committed[0].inline["owner"] == "publisher-svc"
    stopped, memory, _ = ledger(attempt=2, owner=Owner(), committed=intent())
    with pytest.raises(effects.AmbiguousEffect):
        stopped.effect("publish", key="publish", call=owner.call, owner="publisher-svc")
    assert memory.committed[0].inline == {
        "effect": "publish", "idempotencyKey": IDEM, "owner": "publisher-svc",
        "cause": "no-reconcile",
        "reason": "an intent without an outcome, and no reconcile to ask the owner"}


@pytest.mark.parametrize("bad", ["", "   ", "x" * 64])
def test_a_bad_owner_name_is_refused_before_anything(bad: str) -> None:
    owner = Owner()
    found, memory, _ = ledger(attempt=1, owner=owner)
    with pytest.raises(ValueError, match="owner"):
        found.effect("publish", key="publish", call=owner.call, owner=bad)
    assert owner.log == [] and memory.committed == []


def test_applied_answer_is_committed_with_its_result_and_never_called() -> None:
    owner = Owner()
    found, memory, _ = ledger(attempt=2, owner=owner, committed={
        **intent(), **unresolved(), **resolved(2, "applied", result={"url": "r/1"})})
    assert found.effect("publish", key="publish", call=owner.call,
                        reconcile=owner.reconcile) == {"url": "r/1"}
    assert owner.log == [("commit", "publish.outcome", 2)]  # neither call nor reconcile
    assert memory.committed[0].inline == {"answer": "applied", "result": {"url": "r/1"},
                                          "via": "resolve-effect"}


def test_not_applied_answer_re_sends_under_this_attempts_intent() -> None:
    owner = Owner()
    found, _, _ = ledger(attempt=2, owner=owner, committed={
        **intent(), **unresolved(), **resolved(2, "not-applied")})
    assert found.effect("publish", key="publish", call=owner.call) == {"published": 1}
    assert owner.log == [("commit", "publish.intent", 2), ("call", IDEM, 2),
                         ("commit", "publish.outcome", 2)]


@pytest.mark.parametrize("committed", [
    {**intent(), **unresolved()},  # no answer yet
    {**intent(), **unresolved(), **resolved(2, "applied", unresolved_attempt=3)},  # another
    {**intent(), **unresolved(), **resolved(2, "maybe")},  # not an answer
    {**intent(), **unresolved(), **resolved(2, "unknown")},
], ids=["none", "for-another-record", "malformed", "unknown"])
def test_without_a_usable_answer_unresolved_still_stops(
        committed: dict[str, records.Record]) -> None:
    """... and is recorded again on this attempt's Lease, so the slot shows it (the
    operator would not have let this attempt start had it been shown and open)."""
    owner = Owner()
    found, memory, _ = ledger(attempt=2, owner=owner, committed=committed)
    with pytest.raises(effects.AmbiguousEffect, match="resolve-effect"):
        found.effect("publish", key="publish", call=owner.call, reconcile=owner.reconcile)
    assert [entry[0] for entry in owner.log] == ["commit"]  # neither called nor asked
    [again] = memory.committed
    assert (again.key, again.attempt) == ("publish.unresolved", 2)
    assert again.inline["idempotencyKey"] == IDEM
    assert "attempt 1 recorded it unresolved" in again.inline["reason"]
    with pytest.raises(effects.AmbiguousEffect, match="resolve-effect"):  # once only
        found.effect("publish", key="publish", call=owner.call, reconcile=owner.reconcile)
    assert len(memory.committed) == 1


def test_an_answer_is_stale_once_a_later_intent_was_committed() -> None:
    """Attempt 2 re-sent (its own intent) and died: the not-applied answer was about
    attempt 1's intent; attempt 3 must ask the owner again, never re-send on it."""
    owner = Owner([Answer.UNKNOWN])
    found, memory, _ = ledger(attempt=3, owner=owner, committed={
        **unresolved(), **resolved(3, "not-applied"), **intent(2)})
    with pytest.raises(effects.AmbiguousEffect, match="answered unknown"):
        found.effect("publish", key="publish", call=owner.call, reconcile=owner.reconcile)
    assert owner.log == [("reconcile", IDEM, None), ("commit", "publish.unresolved", 3)]
    assert memory.committed[0].inline["cause"] == "owner-answered-unknown"


def test_the_operators_record_is_what_the_ledger_reads() -> None:
    """The ``.resolved`` record exactly as the operator builds it for a successor Lease,
    decoded by the SDK's own decoder, drives the ledger."""
    entry = slots.EffectEntry(key="publish", attempt=1, observed_at="2026-01-01T00:00:00Z",
                              state=slots.EffectState.RESOLVED, outcome="applied",
                              result='{"url": "r/1"}', resolution="the owner has it",
                              actor="alice")
    status = slots.SlotStatus(effects=[entry])
    annotations = effectrecords.resolved_annotations(status, attempt=2)
    lease = {"metadata": {"labels": {"agentrun.dev/attempt": "2"},
                          "annotations": annotations}}
    found_records, problems = records.on_lease(lease)
    assert problems == [] and set(found_records) == {"publish.resolved"}
    owner = Owner()
    found, _, _ = ledger(attempt=2, owner=owner,
                         committed={**intent(), **unresolved(), **found_records})
    assert found.effect("publish", key="publish", call=owner.call) == {"url": "r/1"}
    assert [e[0] for e in owner.log] == ["commit"]


@pytest.mark.parametrize(("intent_", "outcome", "unresolved_", "can", "resolved_"),
                         list(itertools.product([False, True], [False, True], [False, True],
                                                [False, True], [None, *Answer])))
def test_decide_follows_a_recorded_answer_only_for_an_unresolved_effect(
        intent_: bool, outcome: bool, unresolved_: bool, can: bool,
        resolved_: Answer | None) -> None:
    step = effects.decide(intent=intent_, outcome=outcome, unresolved=unresolved_,
                          can_reconcile=can, resolved=resolved_)
    without = effects.decide(intent=intent_, outcome=outcome, unresolved=unresolved_,
                             can_reconcile=can)
    if outcome or not unresolved_:
        assert step is without  # the answer changes nothing else
    elif resolved_ is Answer.APPLIED:
        assert step is Step.RECORD_APPLIED
    elif resolved_ is Answer.NOT_APPLIED:
        assert step is Step.RESEND
    else:
        assert step is Step.STOP_UNRESOLVED


def intents(attempt: int, count: int) -> dict[str, records.Record]:
    return {f"k{n}.intent": records.make(
        key=f"k{n}.intent", kind=records.Kind.EFFECT_INTENT, attempt=attempt,
        payload={"effect": f"k{n}", "fencingToken": attempt}) for n in range(count)}


@pytest.mark.parametrize("own", [0, 3, bounds.EFFECTS_KEPT])
def test_an_attempt_records_no_more_unresolved_effects_than_a_slot_shows(own: int) -> None:
    """``own`` of them already on this attempt's Lease when its prefix was read (a
    restarted sidecar); past EFFECTS_KEPT an effect stops unrecorded, its intent left for
    a later attempt to ask about."""
    count = bounds.EFFECTS_KEPT + 2
    earlier = {f"k{n}.unresolved": records.make(
        key=f"k{n}.unresolved", kind=records.Kind.DECISION, attempt=2, payload={})
        for n in range(count, count + own)}
    owner = Owner()
    found, memory, _ = ledger(attempt=2, owner=owner, committed={**intents(1, count),
                                                                 **earlier})
    told = []
    for n in range(count):
        with pytest.raises(effects.AmbiguousEffect) as raised:
            found.effect(f"k{n}", key=f"k{n}", call=owner.call)
        told.append(str(raised.value))
    recorded = bounds.EFFECTS_KEPT - own
    assert [r.key for r in memory.committed] == [f"k{n}.unresolved" for n in range(recorded)]
    assert all("not recorded" not in text for text in told[:recorded])
    assert all(f"already recorded {bounds.EFFECTS_KEPT}" in text for text in told[recorded:])
    assert owner.log[recorded:] == [] and all(e[0] == "commit" for e in owner.log)
