"""A run owns its journal: the finalizer put on before any slot, the journal deleted with
the run once no attempt of it runs, a silent store shown on the run and tried again.

Covers, each by the exact step: a pinned run with a journal and no finalizer gets it
(kept with any other finalizer) before its slots are laid out; one without a journal
gets none; a run being deleted waits while a slot of it is Claiming or Active (another
run's busy slot does not count), deletes while objects are left (or none were listed),
removes only its own finalizer once none are left; a store error is JournalDeleted False
(StoreNotAnswering, naming store, prefix and the way out) with a Warning Event, written
once, looked at again after RECHECK; a run being deleted with no journal pin just
releases the finalizer. Retention: a finished run's journal is kept until its retention
is over (a Wait until then), deleted once no attempt is live, then JournalDeleted True
(RetentionExpired, Normal Event) and the finalizer off, the run kept; runs not finished,
or without retention, are never touched; 0 deletes at once; a silent store is shown once.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from agentrun.api import conditions, names
from agentrun.api.runs import AgentRun, JournalSettings
from agentrun.api.slots import SlotState
from agentrun.core.base import actions
from agentrun.core.runs import runjournals, runobjects, runsteps
from tests.unit.core import launchfakes as lf

from .test_runsteps import NOW, laid_out_world, pinned, resolved

FINALIZER = names.JOURNAL_FINALIZER
SETTINGS = JournalSettings(endpoint="http://store:8333", bucket="journal")


def journaled(*, finalizers: list[str] | None = None, deleting: bool = False) -> AgentRun:
    base = pinned()
    pins = runobjects.pins(run=base, resolution=resolved(base), journal=SETTINGS)
    run = base.model_copy(update={"status": base.status.model_copy(update={"pinned": pins})})
    update: dict[str, object] = {"finalizers": finalizers or []}
    if deleting:
        update["deletion_timestamp"] = NOW - timedelta(seconds=5)
    return run.model_copy(update={"metadata": run.metadata.model_copy(update=update)})


def test_the_finalizer_goes_on_before_any_slot() -> None:
    step = runsteps.next_step(laid_out_world(journaled(finalizers=["other/keep"])))
    assert step == actions.SetFinalizers(finalizers=("other/keep", FINALIZER),
                                         point="journal-owned")
    laid = runsteps.next_step(laid_out_world(journaled(finalizers=[FINALIZER])))
    assert isinstance(laid, actions.Creates)
    assert runjournals.owning_step(pinned()) is None  # no journal, no finalizer


def deleting(*, slots: list[object] | None = None, left: int | None = None,
             error: str | None = None, run: AgentRun | None = None) -> object:
    return runsteps.next_step(runsteps.RunWorld(
        run=run or journaled(finalizers=["other/keep", FINALIZER], deleting=True),
        tenant=lf.TENANT, now=NOW, slots=slots or [], journal_left=left,  # type: ignore[arg-type]
        journal_error=error))


def test_a_busy_slot_holds_the_deletion() -> None:
    for state in (SlotState.CLAIMING, SlotState.ACTIVE):
        step = deleting(slots=[lf.slot("research", state)], left=1)
        assert isinstance(step, actions.Wait) and step.until == NOW + runjournals.RECHECK
        assert "once the attempts of" in step.message
    other = lf.slot("research", SlotState.ACTIVE, run_uid="uid-another-run")
    assert isinstance(deleting(slots=[other], left=1), actions.DeleteJournal)


def test_objects_left_are_deleted_then_only_our_finalizer_goes() -> None:
    run = journaled(finalizers=["other/keep", FINALIZER], deleting=True)
    assert run.status.pinned is not None
    for left in (None, 1):
        step = deleting(slots=[lf.slot("research", SlotState.FAILED)], left=left)
        assert step == actions.DeleteJournal(journal=run.status.pinned.journal)
    assert deleting(left=0) == actions.SetFinalizers(finalizers=("other/keep",),
                                                     point="journal-released")


def test_a_silent_store_is_shown_once_and_tried_again() -> None:
    step = deleting(left=None, error="S3 0 -: connection refused")
    assert isinstance(step, actions.WriteRun) and step.until == NOW + runjournals.RECHECK
    found = conditions.find(step.status.conditions, names.JOURNAL_DELETED_CONDITION)
    assert found is not None and (found.status, found.reason) == (
        "False", names.JOURNAL_STORE_FAILING)
    for part in ("http://store:8333", "bucket journal", "connection refused",
                 f"remove {FINALIZER}"):
        assert part in found.message
    assert step.event is not None and step.event.type == "Warning"
    run = journaled(finalizers=[FINALIZER], deleting=True)
    shown = run.model_copy(update={"status": step.status})
    again = deleting(run=shown, left=None, error="S3 0 -: connection refused")
    assert isinstance(again, actions.Wait) and again.until == NOW + runjournals.RECHECK


def test_a_run_without_a_journal_pin_releases_the_finalizer() -> None:
    run = pinned().model_copy(update={"metadata": pinned().metadata.model_copy(update={
        "finalizers": [FINALIZER], "deletion_timestamp": NOW})})
    assert deleting(run=run) == actions.SetFinalizers(finalizers=(),
                                                      point="journal-released")


def test_a_live_attempt_holds_the_deletion_whatever_its_slot_says() -> None:
    """A claim under way (its Lease, the slot still Ready) or a fenced attempt's pod not
    finished yet: no deletion until it is over."""
    step = deleting(slots=[lf.slot("research", SlotState.READY)], left=1)
    assert isinstance(step, actions.DeleteJournal)
    held = runsteps.next_step(runsteps.RunWorld(
        run=journaled(finalizers=[FINALIZER], deleting=True), tenant=lf.TENANT, now=NOW,
        journal_left=1, journal_live=["study-research-1"]))
    assert isinstance(held, actions.Wait) and "study-research-1" in held.message


def test_a_journal_whose_secret_is_gone_is_said_left_then_released() -> None:
    run = journaled(finalizers=[FINALIZER], deleting=True)
    why = "its Secret team-a/agentrun-journal is gone"

    def world(of: AgentRun) -> runsteps.RunWorld:
        return runsteps.RunWorld(run=of, tenant=lf.TENANT, now=NOW, journal_orphaned=why)

    said = runsteps.next_step(world(run))
    assert isinstance(said, actions.WriteRun) and said.event is not None
    found = conditions.find(said.status.conditions, names.JOURNAL_DELETED_CONDITION)
    assert found is not None and found.reason == runjournals.SECRET_GONE
    assert why in found.message and "is left in the store" in found.message
    released = runsteps.next_step(world(run.model_copy(update={"status": said.status})))
    assert released == actions.SetFinalizers(finalizers=(), point="journal-released")


RETAINED = SETTINGS.model_copy(update={"retention_seconds": 3600})


def finished(*, at: datetime, verdict: str = "Succeeded",
             settings: JournalSettings = RETAINED) -> AgentRun:
    """A run pinned with ``settings``, holding the finalizer, its verdict True since ``at``."""
    base = pinned()
    pins = runobjects.pins(run=base, resolution=resolved(base), journal=settings)
    status = base.status.model_copy(update={"pinned": pins, "conditions": conditions.set_condition(
        base.status.conditions, type_=verdict, status="True", reason="Done", message="done",
        now=at, observed_generation=base.metadata.generation)})
    return base.model_copy(update={
        "status": status, "metadata": base.metadata.model_copy(update={
            "finalizers": ["other/keep", FINALIZER]})})


def test_retention_waits_until_it_is_over_then_deletes_the_journal_and_keeps_the_run() -> None:
    done = NOW - timedelta(seconds=600)
    run = finished(at=done)
    waiting = runjournals.retention_step(run=run, now=NOW, left=None, error=None)
    assert isinstance(waiting, actions.Wait)
    assert waiting.until == done + timedelta(seconds=3600) and "kept until" in waiting.message
    assert runjournals.retention_due(run, now=NOW) is None  # nothing read from the store yet
    later = done + timedelta(seconds=3600)
    assert runjournals.retention_due(run, now=later) == run.status.pinned.journal  # type: ignore[union-attr]
    for verdict in ("Succeeded", "Failed"):
        step = runjournals.retention_step(run=finished(at=done, verdict=verdict), now=later,
                                          left=2, error=None)
        assert isinstance(step, actions.DeleteJournal)
    held = runjournals.retention_step(run=run, now=later, left=2, error=None,
                                      live=["study-research-1"])
    assert isinstance(held, actions.Wait) and "study-research-1" in held.message
    said = runjournals.retention_step(run=run, now=later, left=0, error=None)
    assert isinstance(said, actions.WriteRun) and said.event is not None
    assert said.event.type == "Normal"
    found = conditions.find(said.status.conditions, names.JOURNAL_DELETED_CONDITION)
    assert found is not None and (found.status, found.reason) == ("True", runjournals.EXPIRED)
    assert "3600 s after the run finished" in found.message and "stay" in found.message
    gone = run.model_copy(update={"status": said.status})
    assert runjournals.settled(gone) and runjournals.retention_due(gone, now=later) is None
    released = runjournals.retention_step(run=gone, now=later, left=None, error=None)
    assert released == actions.SetFinalizers(finalizers=("other/keep",),
                                             point="journal-released")
    kept = gone.model_copy(update={"metadata": gone.metadata.model_copy(update={
        "finalizers": ["other/keep"]})})
    assert runjournals.retention_step(run=kept, now=later, left=None, error=None) is None
    # and it stays off: the run's next steps put nothing back (it owns no journal now)
    assert runjournals.owning_step(kept) is None


def test_a_journal_whose_secret_is_gone_past_retention_is_said_left_once() -> None:
    done = NOW - timedelta(seconds=3600)
    run = finished(at=done)
    why = "its Secret team-a/agentrun-journal is gone"
    said = runjournals.retention_step(run=run, now=NOW, left=None, error=None, orphaned=why)
    assert isinstance(said, actions.WriteRun) and said.event is not None
    found = conditions.find(said.status.conditions, names.JOURNAL_DELETED_CONDITION)
    assert found is not None and (found.status, found.reason) == ("False", "SecretGone")
    assert why in found.message and "left in the store" in found.message
    shown = run.model_copy(update={"status": said.status})
    assert runjournals.retention_due(shown, now=NOW) is None  # no more reads of the store
    released = runjournals.retention_step(run=shown, now=NOW, left=None, error=None)
    assert released == actions.SetFinalizers(finalizers=("other/keep",),
                                             point="journal-released")
    assert runjournals.owning_step(shown.model_copy(update={
        "metadata": shown.metadata.model_copy(update={"finalizers": []})})) is None


def test_after_retention_the_runs_steps_settle_with_no_finalizer_flapping() -> None:
    """Through runsteps, every step applied in turn: the status, the deletion, the
    condition, the finalizer off; then nothing more to do, however often it is asked."""
    run = finished(at=NOW - timedelta(seconds=7200))
    slots = [lf.slot("research", SlotState.SUCCEEDED), lf.slot("report", SlotState.SUCCEEDED)]
    left: int | None = 1
    taken: list[str] = []
    for _ in range(12):
        step = runsteps.next_step(laid_out_world(run, slots=slots, journal_left=left))
        taken.append(type(step).__name__)
        if isinstance(step, actions.WriteRun):
            run = run.model_copy(update={"status": step.status})
        elif isinstance(step, actions.DeleteJournal):
            left = 0
        elif isinstance(step, actions.SetFinalizers):
            run = run.model_copy(update={"metadata": run.metadata.model_copy(update={
                "finalizers": list(step.finalizers)})})
        else:
            assert isinstance(step, actions.Wait)
    assert taken[:4] == ["WriteRun", "DeleteJournal", "WriteRun", "SetFinalizers"], taken
    assert set(taken[4:]) == {"Wait"}, taken
    assert FINALIZER not in run.metadata.finalizers


def test_retention_touches_only_finished_runs_with_retention() -> None:
    unfinished = finished(at=NOW).model_copy(update={"status": pinned().status.model_copy(
        update={"pinned": finished(at=NOW).status.pinned})})
    far = NOW + timedelta(days=3650)
    assert runjournals.retention_step(run=unfinished, now=far, left=1, error=None) is None
    assert runjournals.retention_due(unfinished, now=far) is None
    forever = finished(at=NOW, settings=SETTINGS)  # no retention: kept with the run
    assert runjournals.retention_step(run=forever, now=far, left=1, error=None) is None
    at_once = finished(at=NOW, settings=SETTINGS.model_copy(update={"retention_seconds": 0}))
    assert isinstance(runjournals.retention_step(run=at_once, now=NOW, left=1, error=None),
                      actions.DeleteJournal)
    assert runjournals.retention_step(run=pinned(), now=far, left=1, error=None) is None


def test_a_silent_store_past_retention_is_shown_and_tried_again() -> None:
    run = finished(at=NOW - timedelta(seconds=3600))
    step = runjournals.retention_step(run=run, now=NOW, left=None, error="S3 0 -: refused")
    assert isinstance(step, actions.WriteRun) and step.until == NOW + runjournals.RECHECK
    found = conditions.find(step.status.conditions, names.JOURNAL_DELETED_CONDITION)
    assert found is not None and (found.status, found.reason) == (
        "False", names.JOURNAL_STORE_FAILING)
    assert "past its retention" in found.message and "refused" in found.message
    again = runjournals.retention_step(run=run.model_copy(update={"status": step.status}),
                                       now=NOW, left=None, error="S3 0 -: refused")
    assert isinstance(again, actions.Wait)  # shown once


def test_retention_comes_after_the_runs_own_status_in_its_step() -> None:
    """Through runsteps: a finished run's status is written first; then, its journal's
    retention over, the deletion."""
    done = NOW - timedelta(seconds=7200)
    run = finished(at=done)
    slots = [lf.slot("research", SlotState.SUCCEEDED), lf.slot("report", SlotState.SUCCEEDED)]
    step = runsteps.next_step(laid_out_world(run, slots=slots, journal_left=1))
    assert isinstance(step, actions.WriteRun)  # the rollup of the run's own status first
    run = run.model_copy(update={"status": step.status})
    step = runsteps.next_step(laid_out_world(run, slots=slots, journal_left=1))
    assert isinstance(step, actions.DeleteJournal)
