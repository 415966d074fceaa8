"""The census of slots and runs the operator's gauges show: every state named (0 when
none), what waits for a person counted once per slot per kind of wait."""

from __future__ import annotations

from typing import Any

from agentrun.api import names
from agentrun.core.base import census


def condition(kind: str, status: str = "True") -> dict[str, str]:
    return {"type": kind, "status": status}


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
    ])
    assert found.slots == {"Pending": 1, "Ready": 0, "Claiming": 0, "Active": 2,
                           "RetryWait": 3, "Succeeded": 0, "Failed": 0}
    assert found.waiting == {"effect": 1, "question": 1, "approval": 1, "budget": 1}
    assert found.runs == {"Pending": 2, "Running": 1, "Succeeded": 1, "Failed": 1}


def test_nothing_is_every_state_at_zero() -> None:
    empty = census.count(slots=(), runs=())
    assert set(empty.slots) == set(census.SLOT_STATES) and not any(empty.slots.values())
    assert set(empty.runs) == set(census.RUN_STATES)
    assert set(empty.waiting) == set(census.WAITS)
