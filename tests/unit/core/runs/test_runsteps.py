"""A run's next step from its world (``core.runs.runsteps``): every branch of the sequence.

Covers: tenancy and resolution problems (one write, then waiting without a write), the
snapshot batch, a snapshot found ours or squatted, the pinned write, the pinned workflow
read back (missing, altered, unparseable), every missing slot created in one batch
whatever the width, a slot found ours or squatted, the derived status written once and
then never again while nothing changes, the deadline as the next look, and a finished
run's no next look.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from agentrun.api import conditions, names
from agentrun.api.configs import WorkflowDocument
from agentrun.api.runs import AgentRun, JournalPin, JournalSettings
from agentrun.api.slots import Slot, SlotState
from agentrun.core.base import actions
from agentrun.core.runs import resolution, rollup, runobjects, runsteps
from agentrun.core.runs.resolution import Resolution
from agentrun.core.slots import squats
from tests.unit.core import launchfakes as lf

NOW = lf.T0 + timedelta(seconds=5)


def resolved(run: AgentRun) -> Resolution:
    found = resolution.resolve(run=run, config_maps=lf.config_maps())
    assert isinstance(found, Resolution)
    return found


def snapshots(run: AgentRun) -> dict[str, dict[str, Any]]:
    """The run's three snapshots as the API would return them (controlled by the run)."""
    bodies = [runobjects.snapshot_body(run=run, resolved=r, tenant=lf.TENANT)
              for r in resolved(run).all()]
    return {b["metadata"]["name"]: {**b, "metadata": {
        **b["metadata"], "ownerReferences": [{**runobjects.owner_reference(run)}]}}
        for b in bodies}


def unpinned_world(run: AgentRun | None = None, **changes: Any) -> runsteps.RunWorld:
    fields: dict[str, Any] = {"run": run or lf.run(), "tenant": lf.TENANT, "now": NOW,
                              "config_maps": lf.config_maps()}
    fields.update(changes)
    return runsteps.RunWorld(**fields)


def pinned(run: AgentRun | None = None) -> AgentRun:
    base = run or lf.run()
    pins = runobjects.pins(run=base, resolution=resolved(base), journal=None)
    status = rollup.record_pins(run=base, pins=pins, now=lf.T0)
    return base.model_copy(update={"status": status})


def workflow(width: int | None = None) -> WorkflowDocument:
    if width is None:
        found = resolution.parse(kind="workflow", text=lf.WORKFLOW, origin="test")
    else:
        text = "nodes:\n" + "".join(f"  - name: n{i}\n    workerClass: cpu\n"
                                    for i in range(width))
        found = resolution.parse(kind="workflow", text=text, origin="test")
    assert isinstance(found, WorkflowDocument)
    return found


def laid_out_world(run: AgentRun, *, slots: list[Slot] | None = None,
                   flow: WorkflowDocument | resolution.Problem | None = None,
                   **changes: Any) -> runsteps.RunWorld:
    return runsteps.RunWorld(run=run, tenant=lf.TENANT, now=NOW,
                             workflow=flow if flow is not None else workflow(),
                             slots=slots or [], **changes)


def cond(run_status: Any, type_: str) -> tuple[str, str]:
    found = conditions.find(run_status.conditions, type_)
    assert found is not None
    return found.status, found.reason


def written(run: AgentRun, step: runsteps.RunStep) -> AgentRun:
    """The run as it reads after ``step`` (a status write) was applied."""
    assert isinstance(step, actions.WriteRun)
    return run.model_copy(update={"status": step.status})


# --- pinning ------------------------------------------------------------------------------

def test_a_namespace_without_a_tenant_is_said_once_then_waited_on() -> None:
    world = unpinned_world(tenant=None, config_maps={})
    step = runsteps.next_step(world)
    assert isinstance(step, actions.WriteRun) and step.point == "run-status"
    assert cond(step.status, rollup.PINNED) == ("False", resolution.NOT_A_TENANT)
    assert step.event is not None and step.event.reason == resolution.NOT_A_TENANT
    again = runsteps.next_step(unpinned_world(written(world.run, step), tenant=None))
    assert isinstance(again, actions.Wait) and again.until is None


def test_a_missing_configuration_is_shown_with_its_reason() -> None:
    step = runsteps.next_step(unpinned_world(config_maps=lf.config_maps(workflow=[])))
    assert isinstance(step, actions.WriteRun) and step.event is not None
    assert cond(step.status, rollup.PINNED) == ("False", resolution.CONFIG_NOT_FOUND)
    assert step.status.pinned is None


def test_missing_snapshots_are_created_in_one_batch() -> None:
    world = unpinned_world()
    step = runsteps.next_step(world)
    assert isinstance(step, actions.Creates)
    assert [c.point for c in step.creates] == ["pin-snapshots"] * 3
    assert {c.body["metadata"]["name"] for c in step.creates} == set(snapshots(world.run))


def test_only_the_snapshots_not_found_are_created() -> None:
    run = lf.run()
    found = snapshots(run)
    first = sorted(found)[0]
    step = runsteps.next_step(unpinned_world(run, snapshots={first: found[first]}))
    assert isinstance(step, actions.Creates)
    assert first not in {c.body["metadata"]["name"] for c in step.creates}
    assert len(step.creates) == 2


@pytest.mark.parametrize("where", ["snapshots", "taken"])
def test_snapshots_found_ours_lead_to_the_pinned_write(where: str) -> None:
    run = lf.run()
    step = runsteps.next_step(unpinned_world(run, **{where: snapshots(run)}))
    assert isinstance(step, actions.WriteRun) and step.point == "pinned"
    assert step.status.pinned == runobjects.pins(run=run, resolution=resolved(run), journal=None)
    assert step.event is not None and step.event.reason == "Pinned"
    assert step.until == NOW  # the slots are laid out at once, in the next reconcile


def test_the_operators_journal_is_pinned_with_the_configuration() -> None:
    run = lf.run()
    settings = JournalSettings(endpoint="http://minio:9000", bucket="journal", prefix="base",
                               secret="journal-keys")
    step = runsteps.next_step(unpinned_world(run, snapshots=snapshots(run), journal=settings))
    assert isinstance(step, actions.WriteRun) and step.status.pinned is not None
    assert step.status.pinned.journal == JournalPin(
        endpoint="http://minio:9000", bucket="journal", prefix=f"base/{lf.NS}/{lf.RUN_UID}",
        secret="journal-keys")
    assert step.event is not None
    assert f"journal in bucket journal under base/{lf.NS}/{lf.RUN_UID}" in step.event.message


def test_a_journal_setting_that_cannot_work_yet_leaves_the_run_unpinned() -> None:
    """Checked before any snapshot is created: the run says why, creates nothing, and is
    looked at again soon (a Secret created or a store started is no event on the run)."""
    run = lf.run()
    settings = JournalSettings(endpoint="http://minio:9000", bucket="journal",
                               secret="agentrun-journal")
    problem = resolution.Problem(reason="JournalSecretMissing", message="create it")
    for found in ({}, snapshots(run)):
        step = runsteps.next_step(unpinned_world(run, snapshots=found, journal=settings,
                                                 journal_problem=problem))
        assert isinstance(step, actions.WriteRun) and step.status.pinned is None
        assert step.until == NOW + runsteps.JOURNAL_RECHECK
        pinned = conditions.find(step.status.conditions, "Pinned")
        assert pinned is not None and (pinned.status, pinned.reason) == (
            "False", "JournalSecretMissing")
        assert step.event is not None and step.event.type == "Warning"
    # without a journal setting a problem cannot be the journal's: pinned as usual
    plain = runsteps.next_step(unpinned_world(run, snapshots=snapshots(run),
                                              journal_problem=problem))
    assert isinstance(plain, actions.WriteRun) and plain.status.pinned is not None
    fixed = runsteps.next_step(unpinned_world(run, snapshots=snapshots(run), journal=settings))
    assert isinstance(fixed, actions.WriteRun) and fixed.status.pinned is not None


def test_a_pinned_run_keeps_its_journal_whatever_the_operator_says_now() -> None:
    """Settings changed (or removed) after launch reach new runs only."""
    run = lf.run()
    first = JournalSettings(endpoint="http://minio:9000", bucket="journal")
    step = runsteps.next_step(unpinned_world(run, snapshots=snapshots(run), journal=first))
    assert isinstance(step, actions.WriteRun)
    launched = run.model_copy(update={"status": step.status})
    owned = runsteps.next_step(laid_out_world(launched, journal=first))
    assert owned == actions.SetFinalizers(finalizers=(names.JOURNAL_FINALIZER,),
                                          point="journal-owned")  # before any slot
    launched = launched.model_copy(update={"metadata": launched.metadata.model_copy(
        update={"finalizers": [names.JOURNAL_FINALIZER]})})
    later = JournalSettings(endpoint="https://s3.example", bucket="elsewhere")
    assert launched.status.pinned is not None and launched.status.pinned.journal is not None
    missing = resolution.Problem(reason="SnapshotMissing", message="gone")
    for settings in (later, None):
        step = runsteps.next_step(laid_out_world(launched, journal=settings))
        assert isinstance(step, actions.Creates)  # lays out the slots; never pins again
        step = runsteps.next_step(laid_out_world(launched, flow=missing, journal=settings))
        assert isinstance(step, actions.WriteRun)  # a status write keeps the pins as they are
        assert step.status.pinned == launched.status.pinned
    assert launched.status.pinned.journal.bucket == "journal"


def test_no_journal_configured_pins_none() -> None:
    run = lf.run()
    step = runsteps.next_step(unpinned_world(run, snapshots=snapshots(run)))
    assert isinstance(step, actions.WriteRun) and step.status.pinned is not None
    assert step.status.pinned.journal is None
    assert "journal" not in (step.status.pinned.wire())
    assert step.event is not None and "journal" not in step.event.message


def test_a_squatted_snapshot_is_said_once_and_never_used() -> None:
    run = lf.run()
    found = snapshots(run)
    name = sorted(found)[0]
    stranger = {**found[name], "metadata": {**found[name]["metadata"], "ownerReferences": []}}
    world = unpinned_world(run, taken={name: stranger})
    step = runsteps.next_step(world)
    assert isinstance(step, actions.WriteRun) and step.point == "run-status"
    assert step.status.pinned is None
    assert cond(step.status, squats.NAME_SQUATTED) == ("True", "NameSquatted")
    assert cond(step.status, rollup.PINNED) == ("False", "NameSquatted")
    assert step.event is not None and name in step.event.message
    assert step.until == NOW + squats.SQUAT_WAIT
    again = runsteps.next_step(unpinned_world(written(run, step), taken={name: stranger}))
    assert isinstance(again, actions.Wait) and again.until == NOW + squats.SQUAT_WAIT


# --- the pinned workflow ------------------------------------------------------------------

def test_the_pinned_workflow_is_read_back_from_its_snapshot() -> None:
    run = pinned()
    assert run.status.pinned is not None
    snapshot = snapshots(run)[run.status.pinned.workflow.snapshot]
    found = runsteps.pinned_workflow(run=run, snapshot=snapshot)
    assert isinstance(found, WorkflowDocument)
    assert [n.name for n in found.nodes] == ["research", "report"]


@pytest.mark.parametrize("text", [None, lf.WORKFLOW + "# edited\n"])
def test_a_missing_or_altered_workflow_snapshot_is_a_problem(text: str | None) -> None:
    run = pinned()
    assert run.status.pinned is not None
    snapshot = None if text is None else {"data": {names.CONFIG_DATA_KEYS["workflow"]: text}}
    found = runsteps.pinned_workflow(run=run, snapshot=snapshot)
    assert isinstance(found, resolution.Problem) and found.reason == "SnapshotMissing"
    step = runsteps.next_step(laid_out_world(run, flow=found))
    assert isinstance(step, actions.WriteRun) and step.event is not None
    assert step.event.reason == "SnapshotMissing"


def test_an_unparseable_pinned_workflow_is_a_problem() -> None:
    base = lf.run()
    text = "nodes: [\n"
    maps = lf.config_maps(workflow=[lf.config_map("workflow", 1, text=text)])
    found = resolution.resolve(run=base, config_maps=maps)
    assert isinstance(found, resolution.Problem)  # resolution refuses it in the first place
    run = pinned()
    assert run.status.pinned is not None
    forged = run.status.pinned.model_copy(update={"workflow": run.status.pinned.workflow
                                                  .model_copy(update={
                                                      "sha256": resolution.sha256_of(text)})})
    run = run.model_copy(update={"status": run.status.model_copy(update={"pinned": forged})})
    problem = runsteps.pinned_workflow(
        run=run, snapshot={"data": {names.CONFIG_DATA_KEYS["workflow"]: text}})
    assert isinstance(problem, resolution.Problem)
    assert problem.reason == resolution.CONFIG_INVALID


def test_a_pinned_world_without_its_workflow_waits() -> None:
    world = runsteps.RunWorld(run=pinned(), tenant=lf.TENANT, now=NOW)
    assert isinstance(runsteps.next_step(world), actions.Wait)


# --- laying out the slots -----------------------------------------------------------------

@pytest.mark.parametrize("width", [1, 20, 256])
def test_every_missing_slot_is_created_in_one_batch(width: int) -> None:
    step = runsteps.next_step(laid_out_world(pinned(), flow=workflow(width)))
    assert isinstance(step, actions.Creates)
    assert len(step.creates) == width
    assert {c.point for c in step.creates} == {"slots"}
    assert len({c.body["metadata"]["name"] for c in step.creates}) == width


def test_only_the_missing_slots_are_created() -> None:
    run = pinned()
    step = runsteps.next_step(laid_out_world(run, slots=[lf.slot("research")]))
    assert isinstance(step, actions.Creates)
    assert [c.body["spec"]["node"] for c in step.creates] == ["report"]


def test_a_slot_found_ours_on_create_is_not_created_again() -> None:
    run = pinned()
    report = runobjects.slot_body(run=run, node=workflow().nodes[1], tenant=lf.TENANT)
    step = runsteps.next_step(laid_out_world(
        run, slots=[lf.slot("research")], taken={report["metadata"]["name"]: report}))
    assert isinstance(step, actions.WriteRun)  # the status, the slot not yet listed
    assert cond(step.status, rollup.READY) == ("False", "SlotsMissing")


def test_a_squatted_slot_is_said_after_the_others_are_created() -> None:
    run = pinned()
    report = runobjects.slot_body(run=run, node=workflow().nodes[1], tenant=lf.TENANT)
    name = report["metadata"]["name"]
    stranger = {**report, "metadata": {**report["metadata"], "ownerReferences": []}}
    first = runsteps.next_step(laid_out_world(run, taken={name: stranger}))
    assert isinstance(first, actions.Creates)
    assert [c.body["spec"]["node"] for c in first.creates] == ["research"]
    step = runsteps.next_step(laid_out_world(run, slots=[lf.slot("research")],
                                             taken={name: stranger}))
    assert isinstance(step, actions.WriteRun) and step.event is not None
    assert step.event.reason == "NameSquatted" and name in step.event.message
    assert cond(step.status, squats.NAME_SQUATTED) == ("True", "NameSquatted")
    assert step.until == NOW + squats.SQUAT_WAIT


def test_the_squat_is_cleared_once_the_slot_is_ours() -> None:
    run = pinned()
    squatted = squats.on_run(run.status, message="taken", now=lf.T0)
    run = run.model_copy(update={"status": squatted})
    step = runsteps.next_step(laid_out_world(
        run, slots=[lf.slot("research"), lf.slot("report")]))
    assert isinstance(step, actions.WriteRun)
    assert conditions.find(step.status.conditions, squats.NAME_SQUATTED) is None
    assert cond(step.status, rollup.READY) == ("True", "SlotsCreated")


def test_the_status_is_written_once_then_never_while_nothing_changes() -> None:
    run = pinned()
    slots = [lf.slot("research"), lf.slot("report")]
    step = runsteps.next_step(laid_out_world(run, slots=slots))
    assert isinstance(step, actions.WriteRun) and step.event is None
    assert step.status.slots.pending == 2 and step.until is None
    again = runsteps.next_step(laid_out_world(written(run, step), slots=slots))
    assert isinstance(again, actions.Wait) and again.until is None


def test_the_deadline_is_the_next_look_with_or_without_a_write() -> None:
    run = pinned(lf.run(deadline=600))
    slots = [lf.slot("research"), lf.slot("report")]
    step = runsteps.next_step(laid_out_world(run, slots=slots))
    assert isinstance(step, actions.WriteRun)
    assert step.until == lf.T0 + timedelta(seconds=600)
    again = runsteps.next_step(laid_out_world(written(run, step), slots=slots))
    assert isinstance(again, actions.Wait) and again.until == lf.T0 + timedelta(seconds=600)


def test_a_finished_run_has_no_next_look() -> None:
    run = pinned(lf.run(deadline=600))
    slots = [lf.slot("research", SlotState.SUCCEEDED), lf.slot("report", SlotState.SUCCEEDED)]
    step = runsteps.next_step(laid_out_world(run, slots=slots))
    assert isinstance(step, actions.WriteRun) and step.until is None
    assert cond(step.status, rollup.SUCCEEDED) == ("True", "AllSlotsSucceeded")


def test_a_rerun_reopens_a_succeeded_run_with_an_event_until_its_dependents_caught_up(
        ) -> None:
    run = pinned()
    done = [lf.slot("research", SlotState.SUCCEEDED), lf.slot("report", SlotState.SUCCEEDED)]
    finished = written(run, runsteps.next_step(laid_out_world(run, slots=done)))
    assert cond(finished.status, "Succeeded") == ("True", "AllSlotsSucceeded")
    rerun = done[1].model_copy(update={"status": done[1].status.model_copy(update={
        "state": SlotState.RETRY_WAIT, "reruns": 1, "conditions": conditions.set_condition(
            [], type_="Reopened", status="True", reason="Rerun", message="by alice",
            now=lf.T0)})})
    step = runsteps.next_step(laid_out_world(finished, slots=[done[0], rerun]))
    assert isinstance(step, actions.WriteRun) and step.event is not None
    assert (step.event.reason, step.status.reruns) == ("Rerun", 1)
    assert "the run is open again: nodes report are rerun" in step.event.message
    assert cond(step.status, "Succeeded") == ("False", "Rerun")
    # Its dependent, held (superseded once released), is not done: the run stays open.
    held = lf.slot("review", SlotState.SUCCEEDED, depends_on=["report"])
    again = [done[0], rerun.model_copy(update={"status": rerun.status.model_copy(update={
        "state": SlotState.SUCCEEDED, "conditions": []})}), held]
    flow = resolution.parse(kind="workflow", origin="test", text=(
        "nodes:\n  - {name: research, workerClass: cpu}\n"
        "  - {name: report, workerClass: cpu, dependsOn: [research]}\n"
        "  - {name: review, workerClass: cpu, dependsOn: [report]}\n"))
    assert isinstance(flow, WorkflowDocument)
    waiting = runsteps.next_step(laid_out_world(written(finished, step), slots=again,
                                                flow=flow))
    assert isinstance(waiting, actions.WriteRun)
    assert cond(waiting.status, "Succeeded") == ("False", "Rerun")
    caught_up = held.model_copy(update={"status": held.status.model_copy(update={
        "dependency_reruns": 1})})
    closed = runsteps.next_step(laid_out_world(written(finished, step), flow=flow,
                                               slots=[*again[:2], caught_up]))
    assert isinstance(closed, actions.WriteRun)
    assert cond(closed.status, "Succeeded") == ("True", "AllSlotsSucceeded")
