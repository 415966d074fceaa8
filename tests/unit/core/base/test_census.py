"""The census of slots and runs the operator's gauges show: every state named (0 when
none), what waits for a person counted once per slot per kind of wait."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from agentrun.api import names
from agentrun.core.base import census
from agentrun.core.machine import transitions

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)


def condition(kind: str, status: str = "True", *, at: str | None = None) -> dict[str, str]:
    return {"type": kind, "status": status, **({"lastTransitionTime": at} if at else {})}


def slot(state: str | None, *conditions: dict[str, str], **status: Any) -> dict[str, Any]:
    return {"status": {**({"state": state} if state else {}), "conditions": list(conditions),
                       **status}}


def test_slots_runs_and_what_waits_for_a_person() -> None:
    pending_question = {"key": "q", "state": "Pending"}
    found = census.count(slots=[
        slot(None), slot("Active"), slot("Active"),
        slot("RetryWait", condition(names.EFFECT_UNRESOLVED_CONDITION),
             condition(names.BUDGET_EXCEEDED_CONDITION)),
        slot("RetryWait", questions=[pending_question, {"key": "q2", "state": "Pending"},
                                     {"key": "a", "state": "Pending", "approvers": 2}]),
        slot("RetryWait", condition(names.BUDGET_EXCEEDED_CONDITION, "False"),
             questions=[{"key": "q", "state": "Answered"}]),
        slot("Weird"),
    ], runs=[
        {"status": {}}, {"status": {"pinned": {"x": 1}}},
        {"status": {"pinned": {}, "conditions": [condition("Succeeded")]}},
        {"status": {"conditions": [condition("Failed")]}}, {},
    ], now=NOW)
    assert found.slots == {"Pending": 1, "Ready": 0, "Claiming": 0, "Active": 2,
                           "RetryWait": 3, "Succeeded": 0, "Failed": 0}
    assert found.waiting == {"effect": 1, "question": 1, "approval": 1, "budget": 1}
    assert found.runs == {"Pending": 2, "Running": 1, "Succeeded": 1, "Failed": 1}


def test_nothing_is_every_state_at_zero() -> None:
    empty = census.count(slots=(), runs=(), now=NOW)
    assert set(empty.slots) == set(census.SLOT_STATES) and not any(empty.slots.values())
    assert set(empty.runs) == set(census.RUN_STATES)
    assert set(empty.waiting) == set(census.WAITS)
    assert empty.oldest == dict.fromkeys(census.AGES, 0.0)


def test_the_oldest_wait_of_each_kind_is_its_age_now() -> None:
    """How long ago each wait began: an alert then says "waited an hour", which a count
    kept above 0 by a flow of brief waits cannot."""
    def at(minutes: int) -> str:
        return (NOW - timedelta(minutes=minutes)).isoformat()

    found = census.count(slots=[
        slot("RetryWait", condition(names.EFFECT_UNRESOLVED_CONDITION, at=at(20))),
        slot("RetryWait", condition(names.EFFECT_UNRESOLVED_CONDITION, at=at(5)),
             questions=[{"key": "q", "state": "Pending", "askedAt": at(90)},
                        {"key": "r", "state": "Answered", "askedAt": at(300)},
                        {"key": "a", "state": "Pending", "approvers": 1, "askedAt": at(7)}]),
        slot("Claiming", condition(transitions.QUOTA_EXCEEDED, at=at(16))),
        slot("Claiming", condition(transitions.LAUNCH_SPEC_REFUSED, at=at(3)),
             condition(names.BUDGET_EXCEEDED_CONDITION, "False", at=at(99))),
        slot("RetryWait", condition(names.BUDGET_EXCEEDED_CONDITION, at="not a time")),
    ], runs=(), now=NOW)
    assert found.oldest == {"effect": 1200.0, "question": 5400.0, "approval": 420.0,
                            "budget": 0.0, "claim": 960.0}
    assert census.CLAIM_WAITS == (transitions.QUOTA_EXCEEDED, transitions.LAUNCH_SPEC_REFUSED)
