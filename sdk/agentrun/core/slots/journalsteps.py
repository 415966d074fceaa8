"""A journal in trouble, on its slot: the conditions ``JournalUnavailable`` and ``JournalLost``.

A worker that cannot reach its run's journal store puts the store's error on its own
Lease (``journal.agentrun.dev/error``, at most ``bounds.JOURNAL_ERROR_BYTES``) at the
first failed try and removes it once the store answers (``agentrun.worker._journal``).
The operator holds no store credentials and never calls the store for this: it reads the
annotation of the slot's latest attempt (``World.attempt``) and mirrors it in the slot's
condition ``JournalUnavailable``: True (``StoreNotAnswering``, naming the pinned store
and the error) while it is there, False (``StoreAnswering``) once it is gone, with a
Warning Event when it turns True and a Normal one when it clears. An attempt that ended
while its store did not answer keeps the condition True (its Lease keeps the error) until
a later attempt's Lease is the latest: that worker reports for itself.

The same for a journal that lost committed work: a worker whose prefix cannot be read
intact (an object a sealed head reaches is missing or altered: a lost store volume, say)
puts why on its Lease (``journal.agentrun.dev/lost``) and ends; the slot shows
``JournalLost`` True (``CommittedWorkMissing``) with a Warning Event, never a silent
restart from step one, until a later attempt's Lease carries a head and no loss (it read
its prefix and committed): then False (``JournalRead``).

Why a mirror and not a decision: what a store outage means for the attempt is the
worker's (it retries while it holds its lease; a commit is durable only once its head
advanced, so nothing is reported committed that was not). The operator only shows it.
"""

from __future__ import annotations

from agentrun.api import bounds, conditions, names
from agentrun.api.slots import TERMINAL_STATES, SlotState
from agentrun.core.base import actions, events, slotconditions
from agentrun.core.slots import inputs

CONDITION = names.JOURNAL_UNAVAILABLE_CONDITION
LOST = names.JOURNAL_LOST_CONDITION


def _annotation(world: inputs.World, key: str) -> str | None:
    objects = world.attempt
    lease = objects.lease if objects is not None else None
    value = ((lease or {}).get("metadata") or {}).get("annotations", {}).get(key)
    return bounds.clip_bytes(value, limit=bounds.JOURNAL_ERROR_BYTES) if isinstance(
        value, str) and value else None


def _store(world: inputs.World) -> str:
    pinned = world.run.status.pinned if world.run is not None else None
    journal = pinned.journal if pinned is not None else None
    if journal is None:
        return "the journal's store"
    return f"the journal's store {journal.endpoint} (bucket {journal.bucket})"


def observe_step(world: inputs.World) -> actions.WriteStatus | None:
    """Set or clear ``JournalLost``, then ``JournalUnavailable``, from the latest attempt's
    Lease, or None."""
    status = world.slot.status
    if status.state in TERMINAL_STATES or world.attempt is None:
        return None
    return _lost_step(world) or _unavailable_step(world)


def _shown(world: inputs.World, type_: str, *, true: bool, reason: str, message: str,
           point: str) -> actions.WriteStatus | None:
    """``type_`` set to ``true`` with ``reason`` and ``message`` in one status write, with its
    Event (Warning when True, Normal when cleared, named by the reason); None when the
    slot shows exactly that already."""
    status = world.slot.status
    current = conditions.find(status.conditions, type_)
    value: conditions.ConditionStatus = "True" if true else "False"
    if current is not None and (current.status, current.message) == (value, message):
        return None
    return actions.WriteStatus(
        status=slotconditions.set_condition(status, type_, value, reason, message, world.now),
        point=point, event=events.Event(type="Warning" if true else "Normal",
                                        reason=type_ if true else reason, message=message))


def _lost_step(world: inputs.World) -> actions.WriteStatus | None:
    assert world.attempt is not None
    current = conditions.find(world.slot.status.conditions, LOST)
    lost = _annotation(world, names.JOURNAL_LOST_ANNOTATION)
    if lost is None:
        if (current is None or current.status != "True"
                or _annotation(world, names.JOURNAL_HEAD_ANNOTATION) is None):
            return None
        return _shown(world, LOST, true=False, reason=names.JOURNAL_READ, point="journal-answers",
                      message=f"{world.attempt.name} read the slot's journal whole and committed")
    return _shown(world, LOST, true=True, reason=names.JOURNAL_WORK_MISSING, point="journal-lost",
                  message=bounds.clip(
                      f"{world.attempt.name}'s worker could not read what the slot committed "
                      f"from {_store(world)}: {lost}. The store lost or altered objects a "
                      "sealed head reaches; no attempt starts from less than was committed. "
                      "Restore the store's data, or give the slot up"))


def _unavailable_step(world: inputs.World) -> actions.WriteStatus | None:
    status = world.slot.status
    assert world.attempt is not None
    current = conditions.find(status.conditions, CONDITION)
    error = _annotation(world, names.JOURNAL_ERROR_ANNOTATION)
    if error is None:
        if current is None or current.status != "True":
            return None
        return _shown(world, CONDITION, true=False, reason=names.JOURNAL_STORE_ANSWERS,
                      point="journal-answers", message=f"{_store(world)} answers again")
    ended = status.state is not SlotState.ACTIVE or world.attempt.name != status.active_worker
    return _shown(world, CONDITION, true=True, reason=names.JOURNAL_STORE_FAILING,
                  point="journal-unavailable", message=bounds.clip(
                      f"{world.attempt.name}'s worker " + (
                          "ended while it could not reach " if ended else "cannot reach ")
                      + f"{_store(world)}: {error}. "
                      + ("Nothing it did not commit is reported committed; the next attempt "
                         "resumes from what its head reached" if ended else
                         "It retries while it holds its lease; nothing is reported committed "
                         "until the store took it")))
