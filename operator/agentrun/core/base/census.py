"""How many slots and runs are in each state, and what waits for a person: a census of
the objects the operator's stores hold, for its gauges (read at each scrape).

Pure, over the objects' wire form (the stores hold dicts). Terms: a slot *waits for a
person* when an effect of it is unresolved (condition ``EffectUnresolved``), a question
or a request for approval of it is pending (``status.questions``, state ``Pending``: a
question when it names no ``approvers``, an approval when it does), or it stopped at its
run's budget (``BudgetExceeded``). A run's state is ``Succeeded`` or ``Failed`` once that
condition is True, ``Pending`` until it is pinned, else ``Running``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from agentrun.api import names

SLOT_STATES: Final = ("Pending", "Ready", "Claiming", "Active", "RetryWait", "Succeeded",
                      "Failed")
RUN_STATES: Final = ("Pending", "Running", "Succeeded", "Failed")
WAITS: Final = ("effect", "question", "approval", "budget")  # what waits for a person

Object = Mapping[str, Any]


@dataclass(frozen=True)
class Census:
    slots: Counter[str] = field(default_factory=Counter)
    runs: Counter[str] = field(default_factory=Counter)
    waiting: Counter[str] = field(default_factory=Counter)


def _true(status: Object, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in status.get("conditions") or [] if isinstance(c, Mapping))


def waits(status: Object) -> set[str]:
    """What of :data:`WAITS` this slot's status waits on a person for."""
    found = set()
    if _true(status, names.EFFECT_UNRESOLVED_CONDITION):
        found.add("effect")
    if _true(status, names.BUDGET_EXCEEDED_CONDITION):
        found.add("budget")
    for entry in status.get("questions") or []:
        if isinstance(entry, Mapping) and entry.get("state") == "Pending":
            found.add("approval" if entry.get("approvers") else "question")
    return found


def run_state(status: Object) -> str:
    if _true(status, "Succeeded"):
        return "Succeeded"
    if _true(status, "Failed"):
        return "Failed"
    return "Running" if status.get("pinned") else "Pending"


def count(*, slots: Iterable[Object], runs: Iterable[Object]) -> Census:
    """The census of ``slots`` and ``runs`` (every state named, at 0 when none)."""
    census = Census(slots=Counter(dict.fromkeys(SLOT_STATES, 0)),
                    runs=Counter(dict.fromkeys(RUN_STATES, 0)),
                    waiting=Counter(dict.fromkeys(WAITS, 0)))
    for slot in slots:
        status = slot.get("status") or {}
        state = status.get("state") or "Pending"
        if state in census.slots:
            census.slots[state] += 1
        for wait in waits(status):
            census.waiting[wait] += 1
    for run in runs:
        census.runs[run_state(run.get("status") or {})] += 1
    return census
