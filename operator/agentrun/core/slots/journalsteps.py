"""The slot step of a journal's store not answering: the condition ``JournalUnavailable``.

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


def store_error(world: inputs.World) -> str | None:
    """The store error on the latest attempt's Lease, or None (none there, no Lease)."""
    objects = world.attempt
    lease = objects.lease if objects is not None else None
    if lease is None:
        return None
    annotations = (lease.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(names.JOURNAL_ERROR_ANNOTATION)
    return bounds.clip_bytes(value, limit=bounds.JOURNAL_ERROR_BYTES) if isinstance(
        value, str) and value else None


def _store(world: inputs.World) -> str:
    pinned = world.run.status.pinned if world.run is not None else None
    journal = pinned.journal if pinned is not None else None
    if journal is None:
        return "the journal's store"
    return f"the journal's store {journal.endpoint} (bucket {journal.bucket})"


def observe_step(world: inputs.World) -> actions.WriteStatus | None:
    """Set or clear ``JournalUnavailable`` from the latest attempt's Lease, or None."""
    status = world.slot.status
    if status.state in TERMINAL_STATES or world.attempt is None:
        return None
    current = conditions.find(status.conditions, CONDITION)
    error = store_error(world)
    if error is None:
        if current is None or current.status != "True":
            return None
        message = f"{_store(world)} answers again"
        return actions.WriteStatus(
            status=slotconditions.set_condition(status, CONDITION, "False",
                                                names.JOURNAL_STORE_ANSWERS, message, world.now),
            point="journal-answers",
            event=events.Event(type="Normal", reason=names.JOURNAL_STORE_ANSWERS,
                               message=message))
    ended = status.state is not SlotState.ACTIVE or world.attempt.name != status.active_worker
    message = bounds.clip(
        f"{world.attempt.name}'s worker " + ("ended while it could not reach " if ended
                                              else "cannot reach ")
        + f"{_store(world)}: {error}. "
        + ("Nothing it did not commit is reported committed; the next attempt resumes from "
           "what its head reached" if ended else
           "It retries while it holds its lease; nothing is reported committed until the "
           "store took it"))
    if current is not None and current.status == "True" and current.message == message:
        return None
    return actions.WriteStatus(
        status=slotconditions.set_condition(status, CONDITION, "True",
                                            names.JOURNAL_STORE_FAILING, message, world.now),
        point="journal-unavailable",
        event=events.Event(type="Warning", reason=CONDITION, message=message))
