"""A run owns its journal: the finalizer that deletes it with the run.

A run's journal lives in an object store, not in the cluster, so the garbage collector
cannot delete it with the run. A run pinned with a journal therefore carries the
finalizer ``agentrun.dev/journal`` (:data:`~agentrun.api.names.JOURNAL_FINALIZER`), put on
before its first slot is created (so before any worker could write), and the operator
removes it only once the journal is gone:

1. the run is being deleted and carries the finalizer;
2. its slots wind down (``core.slots.steps.wind_down``: an Active attempt is followed to
   its end and fenced, no new claim): the journal is deleted only once none of the run's
   slots is Claiming or Active, so no worker of it is still committing;
3. :class:`~agentrun.core.base.actions.DeleteJournal` deletes every object under the run's
   prefix (the controller, with the run's credentials), repeated until a listing finds
   none left (``left``: what the operator's last listing found);
4. the finalizer is removed; the API server then deletes the run, and the garbage
   collector its slots, snapshots and Leases.

A store that does not answer (``error``) is shown on the run as ``JournalDeleted`` False
(``StoreNotAnswering``, naming the store, with a Warning Event) and tried again every
:data:`RECHECK`: the run waits, it neither leaks its journal nor hangs silently. Someone
who gives up on the store removes the finalizer themselves (the condition says how).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from agentrun.api import conditions, names
from agentrun.api.runs import AgentRun
from agentrun.api.slots import Slot, SlotState
from agentrun.core.base import actions, events
from agentrun.core.runs import rollup

FINALIZER = names.JOURNAL_FINALIZER
CONDITION = names.JOURNAL_DELETED_CONDITION
RECHECK = timedelta(seconds=10)
BUSY = frozenset({SlotState.CLAIMING, SlotState.ACTIVE})

JournalStep = actions.SetFinalizers | actions.DeleteJournal | actions.WriteRun | actions.Wait


def owning_step(run: AgentRun) -> actions.SetFinalizers | None:
    """The finalizer put on a live run pinned with a journal that lacks it, else None."""
    pins = run.status.pinned
    if pins is None or pins.journal is None or FINALIZER in run.metadata.finalizers:
        return None
    return actions.SetFinalizers(finalizers=(*run.metadata.finalizers, FINALIZER),
                                 point="journal-owned")


def deleting_step(*, run: AgentRun, slots: Sequence[Slot], now: datetime,
                  left: int | None, error: str | None) -> JournalStep:
    """The next step for a run being deleted that carries the finalizer (see the module).

    ``left``: objects the last listing found under the run's prefix (None: not listed);
    ``error``: why the store could not be listed or emptied (None: it answered)."""
    pins = run.status.pinned
    journal = pins.journal if pins is not None else None
    kept = tuple(f for f in run.metadata.finalizers if f != FINALIZER)
    if journal is None:
        return actions.SetFinalizers(finalizers=kept, point="journal-released")
    busy = sorted(s.metadata.name for s in rollup.own_slots(run=run, slots=slots).values()
                  if s.status.state in BUSY)
    if busy:
        return actions.Wait(message=f"the run's journal is deleted once the attempts of "
                                    f"{', '.join(busy[:5])} have ended", until=now + RECHECK)
    if error is not None:
        message = (f"the run's journal in {journal.endpoint} (bucket {journal.bucket}, under "
                   f"{journal.prefix}) cannot be deleted yet: {error}. Tried again every "
                   f"{RECHECK.seconds} s; to give up on it, remove the finalizer {FINALIZER} "
                   "from the run (its objects then stay in the store)")
        status = run.status.model_copy(update={"conditions": conditions.set_condition(
            run.status.conditions, type_=CONDITION, status="False",
            reason=names.JOURNAL_STORE_FAILING, message=message, now=now,
            observed_generation=run.metadata.generation)})
        if status == run.status:
            return actions.Wait(message=message, until=now + RECHECK)
        return actions.WriteRun(status=status, point="run-status", until=now + RECHECK,
                                event=events.Event(type="Warning", reason=CONDITION,
                                                   message=message))
    if left is None or left > 0:
        return actions.DeleteJournal(journal=journal)
    return actions.SetFinalizers(finalizers=kept, point="journal-released")
