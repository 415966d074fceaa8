"""A run owns its journal: the finalizer that deletes it with the run.

A run's journal lives in an object store, not in the cluster, so the garbage collector
cannot delete it with the run. A run pinned with a journal therefore carries the
finalizer ``agentrun.dev/journal`` (:data:`~agentrun.api.names.JOURNAL_FINALIZER`), put on
before its first slot is created (so before any worker could write), and the operator
removes it only once the journal is gone:

1. the run is being deleted and carries the finalizer;
2. its slots wind down (``core.slots.steps.wind_down``: an Active attempt is followed to
   its end and fenced, no new claim): the journal is deleted only once none of the run's
   slots is Claiming or Active and no attempt of it is live (``live``: a Lease not
   tombstoned, a claim under way included, or a Pod not finished, read from the API, not
   a cache), so no worker of it is still writing;
3. :class:`~agentrun.core.base.actions.DeleteJournal` deletes every object under the run's
   prefix (the controller, with the run's credentials), repeated until a listing finds
   none left (``left``: what the operator's last listing found);
4. the finalizer is removed; the API server then deletes the run, and the garbage
   collector its slots, snapshots and Leases.

A journal whose Secret is gone (``orphaned``: deleted with the namespace, say) can never
be deleted by the operator: it says so once (``JournalDeleted`` False, ``SecretGone``,
naming the prefix left in the store, a Warning Event) and removes the finalizer, rather
than keep the run, and its namespace, from going.

A store that does not answer (``error``) is shown on the run as ``JournalDeleted`` False
(``StoreNotAnswering``, naming the store, with a Warning Event) and tried again every
:data:`RECHECK`: the run waits, it neither leaks its journal nor hangs silently. Someone
who gives up on the store removes the finalizer themselves (the condition says how).

*Retention* (``retention_seconds`` pinned on the run, from the operator's
``--journal-retention-seconds``): a finished run (``Succeeded`` or ``Failed`` True) keeps
its journal that long after it finished (the condition's transition time), then the
operator deletes it the same way, once no attempt of the run is live, and the run stays:
``JournalDeleted`` True (:data:`EXPIRED`, a Normal Event) says when and why, and the
finalizer comes off (and stays off), since nothing is left to delete; a journal whose
Secret is gone is said left in the store (``SecretGone``), and retention is done with it
too. A run that is not finished is never touched, whatever its age: retention is for what
is done.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from agentrun.api import conditions, names
from agentrun.api.runs import AgentRun, JournalPin
from agentrun.api.slots import Slot, SlotState
from agentrun.core.base import actions, events
from agentrun.core.runs import rollup

FINALIZER = names.JOURNAL_FINALIZER
CONDITION = names.JOURNAL_DELETED_CONDITION
RECHECK = timedelta(seconds=10)
BUSY = frozenset({SlotState.CLAIMING, SlotState.ACTIVE})
SECRET_GONE = "SecretGone"
EXPIRED = names.JOURNAL_RETENTION_EXPIRED

JournalStep = actions.SetFinalizers | actions.DeleteJournal | actions.WriteRun | actions.Wait


def owning_step(run: AgentRun) -> actions.SetFinalizers | None:
    """The finalizer put on a live run pinned with a journal that lacks it, else None."""
    pins = run.status.pinned
    if (pins is None or pins.journal is None or FINALIZER in run.metadata.finalizers
            or settled(run)):  # retention took the journal: nothing left to own
        return None
    return actions.SetFinalizers(finalizers=(*run.metadata.finalizers, FINALIZER),
                                 point="journal-owned")


def _failing(run: AgentRun, *, reason: str, message: str, now: datetime,
             until: datetime) -> actions.WriteRun | actions.Wait:
    """``JournalDeleted`` False for ``reason``, with a Warning Event, unless shown so."""
    status = run.status.model_copy(update={"conditions": conditions.set_condition(
        run.status.conditions, type_=CONDITION, status="False", reason=reason,
        message=message, now=now, observed_generation=run.metadata.generation)})
    if status == run.status:
        return actions.Wait(message=message, until=until)
    return actions.WriteRun(status=status, point="run-status", until=until,
                            event=events.Event(type="Warning", reason=CONDITION,
                                               message=message))


def deleting_step(*, run: AgentRun, slots: Sequence[Slot], now: datetime,
                  left: int | None, error: str | None, live: Sequence[str] = (),
                  orphaned: str | None = None) -> JournalStep:
    """The next step for a run being deleted that carries the finalizer (see the module).

    ``left``: objects the last listing found under the run's prefix (None: not listed);
    ``error``: why the store could not be listed or emptied (None: it answered);
    ``live``: the run's attempts still live (Leases not tombstoned, Pods not finished);
    ``orphaned``: why the journal can never be deleted (its Secret gone)."""
    pins = run.status.pinned
    journal = pins.journal if pins is not None else None
    kept = tuple(f for f in run.metadata.finalizers if f != FINALIZER)
    if journal is None:
        return actions.SetFinalizers(finalizers=kept, point="journal-released")
    busy = sorted({*live, *(s.metadata.name for s in rollup.own_slots(
        run=run, slots=slots).values() if s.status.state in BUSY)})
    if busy:
        return actions.Wait(message=f"the run's journal is deleted once the attempts of "
                                    f"{', '.join(busy[:5])} have ended", until=now + RECHECK)
    where = f"{journal.endpoint} (bucket {journal.bucket}, under {journal.prefix})"
    if orphaned is not None:
        message = (f"the run's journal in {where} is left in the store: {orphaned}; delete "
                   "it there by hand if it must go")
        shown = conditions.find(run.status.conditions, CONDITION)
        if shown is None or shown.reason != SECRET_GONE:
            return _failing(run, reason=SECRET_GONE, message=message, now=now, until=now)
        return actions.SetFinalizers(finalizers=kept, point="journal-released")
    if error is not None:
        message = (f"the run's journal in {where} cannot be deleted yet: {error}. Tried "
                   f"again every {RECHECK.seconds} s; to give up on it, remove {FINALIZER} "
                   "from the run's metadata.finalizers (kubectl edit; its objects then stay "
                   "in the store)")
        return _failing(run, reason=names.JOURNAL_STORE_FAILING, message=message, now=now,
                        until=now + RECHECK)
    if left is None or left > 0:
        return actions.DeleteJournal(journal=journal)
    return actions.SetFinalizers(finalizers=kept, point="journal-released")


def _finished_at(run: AgentRun) -> datetime | None:
    """When the run reached its verdict (Succeeded or Failed True), or None."""
    for type_ in (rollup.SUCCEEDED, rollup.FAILED):
        found = conditions.find(run.status.conditions, type_)
        if found is not None and found.status == "True":
            return found.last_transition_time
    return None


def settled(run: AgentRun) -> bool:
    """Whether retention is done with the run's journal: deleted (``JournalDeleted`` True,
    :data:`EXPIRED`) or never deletable (False, :data:`SECRET_GONE`)."""
    shown = conditions.find(run.status.conditions, CONDITION)
    return shown is not None and (shown.status, shown.reason) in (
        ("True", EXPIRED), ("False", SECRET_GONE))


def retention_due(run: AgentRun, *, now: datetime) -> JournalPin | None:
    """The run's journal pin when its retention is over and it is not yet deleted (the
    operator then reads what the store holds and the run's live attempts), else None."""
    pins = run.status.pinned
    journal = pins.journal if pins is not None else None
    finished = _finished_at(run)
    if (journal is None or journal.retention_seconds is None or finished is None
            or settled(run)):
        return None
    return journal if now >= finished + timedelta(seconds=journal.retention_seconds) else None


def retention_step(*, run: AgentRun, now: datetime, left: int | None, error: str | None,
                   live: Sequence[str] = (), orphaned: str | None = None,
                   ) -> JournalStep | None:
    """The next step of a live run's journal retention (see the module), None when
    retention has nothing to do for it (no retention, not finished, already done).
    ``orphaned``: why the journal can never be deleted (its Secret gone): said once, as
    for a run being deleted, and retention is done with it."""
    pins = run.status.pinned
    journal = pins.journal if pins is not None else None
    finished = _finished_at(run)
    if journal is None or journal.retention_seconds is None or finished is None:
        return None
    if settled(run):
        if FINALIZER in run.metadata.finalizers:  # nothing left to delete with the run
            return actions.SetFinalizers(
                finalizers=tuple(f for f in run.metadata.finalizers if f != FINALIZER),
                point="journal-released")
        return None
    due = finished + timedelta(seconds=journal.retention_seconds)
    if now < due:
        return actions.Wait(message=f"the run's journal is kept until {due.isoformat()} "
                                    f"({journal.retention_seconds} s after the run finished)",
                            until=due)
    if live:
        return actions.Wait(message=f"the run's journal is deleted once the attempts of "
                                    f"{', '.join(sorted(live)[:5])} have ended",
                            until=now + RECHECK)
    where = f"{journal.endpoint} (bucket {journal.bucket}, under {journal.prefix})"
    if orphaned is not None:
        return _failing(run, reason=SECRET_GONE, now=now, until=now,
                        message=f"the run's journal in {where} is past its retention and left "
                                f"in the store: {orphaned}; delete it there by hand")
    if error is not None:
        return _failing(run, reason=names.JOURNAL_STORE_FAILING, until=now + RECHECK, now=now,
                        message=f"the run's journal in {where} is past its retention and "
                                f"cannot be deleted yet: {error}. Tried again every "
                                f"{RECHECK.seconds} s")
    if left is None or left > 0:
        return actions.DeleteJournal(journal=journal)
    message = (f"the run's journal in {where} was deleted {journal.retention_seconds} s after "
               f"the run finished (its retention); the run, its slots and their attempts "
               "stay")
    status = run.status.model_copy(update={"conditions": conditions.set_condition(
        run.status.conditions, type_=CONDITION, status="True", reason=EXPIRED,
        message=message, now=now, observed_generation=run.metadata.generation)})
    return actions.WriteRun(status=status, point="run-status", until=now,
                            event=events.Event(type="Normal", reason=CONDITION,
                                               message=message))
