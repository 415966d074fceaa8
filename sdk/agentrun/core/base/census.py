"""How many slots and runs are in each state, and what waits for a person: a census of
the objects the operator's stores hold, for its gauges (read at each scrape).

Pure, over the objects' wire form (the stores hold dicts). Terms: a slot *waits for a
person* when an effect of it is unresolved (condition ``EffectUnresolved``), a question
or a request for approval of it is pending (``status.questions``, state ``Pending``: a
question when it names no ``approvers``, an approval when it does), or it stopped at its
run's budget (``BudgetExceeded``). A slot's *claim waits* when a ResourceQuota or its
LaunchSpec's Pod being refused holds it (condition ``QuotaExceeded`` or ``LaunchSpecRefused``
True). A wait's *age* is how long ago it began (the condition's ``lastTransitionTime``, the
question's ``askedAt``) at the census's ``now``; the census keeps the oldest of each kind,
so an alert can say "a slot has waited an hour", which a count over time cannot (a steady
flow of brief waits keeps a count above 0 for ever). A run's state is ``Succeeded`` or
``Failed`` once that condition is True, ``Pending`` until it is pinned, else ``Running``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from agentrun.api import names

SLOT_STATES: Final = ("Pending", "Ready", "Claiming", "Active", "RetryWait", "Succeeded",
                      "Failed")
RUN_STATES: Final = ("Pending", "Running", "Succeeded", "Failed")
WAITS: Final = ("effect", "question", "approval", "budget")  # what waits for a person
AGES: Final = (*WAITS, "claim")  # the waits whose oldest age is kept
# The conditions under which a claim waits (core.machine.transitions' QUOTA_EXCEEDED and
# LAUNCH_SPEC_REFUSED; the base cannot import them).
CLAIM_WAITS: Final = ("QuotaExceeded", "LaunchSpecRefused")

Object = Mapping[str, Any]


@dataclass(frozen=True)
class Census:
    slots: Counter[str] = field(default_factory=Counter)
    runs: Counter[str] = field(default_factory=Counter)
    waiting: Counter[str] = field(default_factory=Counter)
    oldest: dict[str, float] = field(default_factory=dict)  # seconds, by what of AGES


def _since(status: Object, kind: str) -> datetime | None:
    """When condition ``kind`` turned True (None: it is not True); a time that does not
    parse counts from now (the wait is there, its start unknown)."""
    for c in status.get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True":
            return _time(c.get("lastTransitionTime"))
    return None


def _time(value: object) -> datetime:
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return datetime.max.replace(tzinfo=UTC)


def _true(status: Object, kind: str) -> bool:
    return _since(status, kind) is not None


def began(status: Object) -> dict[str, datetime]:
    """When each wait of :data:`AGES` this slot has began (the earliest of its kind)."""
    found: dict[str, datetime] = {}
    for what, kinds in (("effect", (names.EFFECT_UNRESOLVED_CONDITION,)),
                        ("budget", (names.BUDGET_EXCEEDED_CONDITION,)), ("claim", CLAIM_WAITS)):
        times = [t for kind in kinds if (t := _since(status, kind)) is not None]
        if times:
            found[what] = min(times)
    for entry in status.get("questions") or []:
        if isinstance(entry, Mapping) and entry.get("state") == "Pending":
            what = "approval" if entry.get("approvers") else "question"
            at = _time(entry.get("askedAt"))
            found[what] = min(at, found.get(what, at))
    return found


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


def count(*, slots: Iterable[Object], runs: Iterable[Object], now: datetime) -> Census:
    """The census of ``slots`` and ``runs`` at ``now`` (every state and wait named, at 0
    when none)."""
    census = Census(slots=Counter(dict.fromkeys(SLOT_STATES, 0)),
                    runs=Counter(dict.fromkeys(RUN_STATES, 0)),
                    waiting=Counter(dict.fromkeys(WAITS, 0)),
                    oldest=dict.fromkeys(AGES, 0.0))
    for slot in slots:
        status = slot.get("status") or {}
        state = status.get("state") or "Pending"
        if state in census.slots:
            census.slots[state] += 1
        for wait in waits(status):
            census.waiting[wait] += 1
        for what, at in began(status).items():
            age = max(0.0, (now - at).total_seconds()) if at.tzinfo else 0.0
            census.oldest[what] = max(census.oldest[what], age)
    for run in runs:
        census.runs[run_state(run.get("status") or {})] += 1
    return census
