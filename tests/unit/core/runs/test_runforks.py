"""A fork's steps (``core.runs.runforks`` through ``runsteps``): pinned from its source by
digest, its journal copied before any slot, and every reason it waits, each said once.

Covers: the source's snapshots pinned for the fork (the namespace's ConfigMaps not read),
each source that cannot be used (gone, another uid, unpinned, no journal, its journal
deleted, a snapshot altered) and an ``at`` node the workflow lacks, shown on ``Pinned``
and looked at again; the copy planned before the slots (the nodes after ``at`` left out,
the source's cuts carried, the attempt-0 Lease's body); a source slot that may still
write, that waits for a person, or an ``at`` node that never ran; the copy's outcome
written once (``status.fork``, ``Forked``), then the slots laid out.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentrun.api import conditions, names
from agentrun.api.configs import WorkflowDocument
from agentrun.api.runs import AgentRun, ForkStatus, Inherited, JournalSettings
from agentrun.api.slots import EffectEntry, Slot, SlotState
from agentrun.core.base import actions, naming
from agentrun.core.runs import resolution, rollup, runforks, runobjects, runsteps
from tests.unit.core import launchfakes as lf
from tests.unit.core.runs.test_runsteps import NOW, resolved, snapshots, workflow

STORE = JournalSettings(endpoint="http://store:8333", bucket="journal")
FORK, FORK_UID = "fork-1", "uid-fork-1"


def source(*, journal: JournalSettings | None = STORE, deleted: bool = False) -> AgentRun:
    run = lf.run()
    pins = runobjects.pins(run=run, resolution=resolved(run), journal=journal)
    status = rollup.record_pins(run=run, pins=pins, now=lf.T0)
    if deleted:
        status = status.model_copy(update={"conditions": conditions.set_condition(
            status.conditions, type_=names.JOURNAL_DELETED_CONDITION, status="True",
            reason="RetentionOver", message="kept 0 s", now=lf.T0)})
    return run.model_copy(update={"status": status})


def fork(*, at: str | None = "research:draft", uid: str | None = lf.RUN_UID) -> AgentRun:
    spec: dict[str, Any] = {kind: {"name": lf.CONFIG_NAMES[kind]} for kind in names.CONFIG_KINDS}
    spec["fork"] = {"run": lf.RUN, "reason": "try another draft",
                    **({"uid": uid} if uid else {}), **({"at": at} if at else {})}
    return AgentRun.model_validate({
        "metadata": {"name": FORK, "namespace": lf.NS, "uid": FORK_UID, "generation": 1,
                     "finalizers": [names.JOURNAL_FINALIZER]},
        "spec": spec, "status": {"creator": "alice"}})


def unpinned(run: AgentRun, **changes: Any) -> runsteps.RunWorld:
    found = source()
    fields: dict[str, Any] = {"run": run, "tenant": lf.TENANT, "now": NOW, "journal": STORE,
                              "fork_source": found, "fork_snapshots": snapshots(found)}
    return runsteps.RunWorld(**{**fields, **changes})


def pinned_fork(run: AgentRun | None = None) -> AgentRun:
    base = run or fork()
    step = runsteps.next_step(unpinned(base, snapshots=own_snapshots(base)))
    assert isinstance(step, actions.WriteRun) and step.status.pinned is not None
    return base.model_copy(update={"status": step.status})


def own_snapshots(run: AgentRun) -> dict[str, Any]:
    step = runsteps.next_step(unpinned(run))
    assert isinstance(step, actions.Creates)
    return {c.body["metadata"]["name"]: {**c.body, "metadata": {
        **c.body["metadata"], "uid": "x"}} for c in step.creates}


def source_slot(node: str, state: SlotState = SlotState.SUCCEEDED, *, attempts: int = 1,
                **status: Any) -> Slot:
    found = lf.slot(node, state)
    return found.model_copy(update={"status": found.status.model_copy(update={
        "attempt_count": attempts, **status})})


def laid_out(run: AgentRun, **changes: Any) -> runsteps.RunWorld:
    fields: dict[str, Any] = {"run": run, "tenant": lf.TENANT, "now": NOW,
                              "workflow": workflow(), "fork_source": source(),
                              "fork_slots": [source_slot("research"), source_slot("report")]}
    return runsteps.RunWorld(**{**fields, **changes})


def condition(step: object, type_: str) -> tuple[str, str]:
    assert isinstance(step, actions.WriteRun)
    found = conditions.find(step.status.conditions, type_)
    assert found is not None
    return found.status, found.reason


def test_a_fork_pins_its_sources_snapshots_by_digest_not_by_revision() -> None:
    run = fork()
    step = runsteps.next_step(unpinned(run, config_maps={}))  # no source ConfigMap read
    assert isinstance(step, actions.Creates) and len(step.creates) == 3
    texts = {c.body["metadata"]["labels"][names.CONFIG_KIND_LABEL]: c.body["data"]
             for c in step.creates}
    assert texts == {kind: {names.CONFIG_DATA_KEYS[kind]: lf.TEXTS[kind]}
                     for kind in names.CONFIG_KINDS}
    assert all(c.body["metadata"]["ownerReferences"][0]["uid"] == FORK_UID
               for c in step.creates)  # its own copies: the source may go
    done = pinned_fork(run)
    mine, theirs = done.status.pinned, source().status.pinned
    assert mine is not None and theirs is not None
    for kind in ("package", "workflow", "bindings"):
        a, b = getattr(mine, kind), getattr(theirs, kind)
        assert (a.sha256, a.revision, a.source) == (b.sha256, b.revision, b.source)
        assert a.snapshot != b.snapshot
    assert mine.journal is not None and mine.journal.prefix.endswith(FORK_UID)


def altered() -> dict[str, Any]:
    found = source()
    shots = snapshots(found)
    name = next(n for n, cm in shots.items() if "workflow.yaml" in cm["data"])
    shots[name] = {**shots[name], "data": {"workflow.yaml": "nodes: []\n"}}
    return shots


@pytest.mark.parametrize(("changes", "run", "reason", "words"), [
    ({"fork_source": None}, fork(), resolution.FORK_SOURCE_UNUSABLE, "is not in namespace"),
    ({}, fork(uid="uid-other"), resolution.FORK_SOURCE_UNUSABLE, "(uid uid-other)"),
    ({"fork_source": lf.run()}, fork(), resolution.FORK_SOURCE_UNUSABLE, "is not pinned"),
    ({"fork_source": source(journal=None)}, fork(), resolution.FORK_SOURCE_UNUSABLE,
     "has no journal"),
    ({"fork_source": source(deleted=True)}, fork(), resolution.FORK_SOURCE_UNUSABLE,
     "journal was deleted"),
    ({"fork_snapshots": altered()}, fork(), resolution.FORK_SOURCE_UNUSABLE,
     "missing or altered"),
    ({}, fork(at="nosuch:draft"), runforks.STEP_NOT_COMMITTED, "node nosuch"),
])
def test_a_source_that_cannot_be_forked_is_said_on_pinned_and_looked_at_again(
        changes: dict[str, Any], run: AgentRun, reason: str, words: str) -> None:
    step = runsteps.next_step(unpinned(run, **changes))
    assert isinstance(step, actions.WriteRun) and step.status.pinned is None
    assert condition(step, rollup.PINNED) == ("False", reason)
    assert step.event is not None and words in step.event.message, step.event.message
    assert step.until == NOW + runforks.RECHECK  # the source may come, or get pinned


def test_the_journal_is_copied_before_any_slot_and_the_nodes_after_at_are_left_out() -> None:
    run = pinned_fork()
    cut = "1.2.0-1"
    step = runsteps.next_step(laid_out(run, fork_slots=[
        source_slot("research", cuts=[cut], resends=["publish=2@1"]), source_slot("report")]))
    assert isinstance(step, actions.ForkJournal)
    (only,) = step.slots  # report depends on research: it runs from its start
    slot = naming.slot_name(run=FORK, node="research")
    assert (only.node, only.step, only.slot, only.attempts, only.cuts, only.resends) == (
        "research", "draft", slot, 1, (cut,), ("publish=2@1",))
    assert only.source_slot == naming.slot_name(run=lf.RUN, node="research")
    lease = only.lease["metadata"]
    assert (lease["name"], lease["labels"][names.ATTEMPT_LABEL],
            lease["labels"][names.RUN_LABEL], lease["ownerReferences"][0]["uid"]) == (
        f"{slot}-0", "0", FORK, FORK_UID)
    assert lease["annotations"][names.FORKED_FROM_ANNOTATION] == (
        f"{lf.RUN} {lf.RUN_UID} at research:draft")
    assert step.source.prefix.endswith(lf.RUN_UID) and step.journal.prefix.endswith(FORK_UID)
    whole = runsteps.next_step(laid_out(pinned_fork(fork(at=None))))
    assert isinstance(whole, actions.ForkJournal)
    assert [(s.node, s.step) for s in whole.slots] == [("research", None), ("report", None)]


def test_a_node_that_never_ran_is_not_copied() -> None:
    step = runsteps.next_step(laid_out(pinned_fork(fork(at=None)), fork_slots=[
        source_slot("research"), source_slot("report", SlotState.PENDING, attempts=0)]))
    assert isinstance(step, actions.ForkJournal)
    assert [s.node for s in step.slots] == ["research"]


OPEN = [EffectEntry(key="publish", attempt=1, observed_at=lf.T0)]


@pytest.mark.parametrize(("slots", "at", "reason"), [
    ([source_slot("research", SlotState.ACTIVE)], "research:draft", runforks.SLOT_LIVE),
    ([source_slot("research", SlotState.CLAIMING)], "research:draft", runforks.SLOT_LIVE),
    ([source_slot("research", SlotState.RETRY_WAIT, effects=OPEN)], None, runforks.WAITING),
    ([source_slot("research", SlotState.RETRY_WAIT, effects=OPEN)], "research:draft",
     None),  # the at node's: cut with its step, or a split the copier says
    ([], "research:draft", runforks.SOURCE_NOT_READY),  # not laid out, or not seen yet
    ([source_slot("research", SlotState.PENDING, attempts=0)], "research:draft",
     runforks.STEP_NOT_COMMITTED),
])
def test_a_slot_that_cannot_be_copied_now_says_why_unless_it_was_copied_before(
        slots: list[Slot], at: str | None, reason: str | None) -> None:
    """The problem rides on the slot: the copier raises it only for a slot whose copy it
    has not committed (one copied at an earlier look stands as it was)."""
    step = runsteps.next_step(laid_out(pinned_fork(fork(at=at)), fork_slots=slots))
    assert isinstance(step, actions.ForkJournal)
    assert step.slots[0].node == "research"
    assert (step.slots[0].problem or (None,))[0] == reason


@pytest.mark.parametrize("reason", [runforks.SLOT_LIVE, runforks.WAITING,
                                    runforks.SOURCE_NOT_READY, runforks.COPY_FAILED])
def test_a_copy_that_cannot_be_made_now_is_said_once_and_tried_again(reason: str) -> None:
    run = pinned_fork()
    problem = resolution.Problem(reason=reason, message="why")
    step = runsteps.next_step(laid_out(run, fork_copied=problem))
    assert condition(step, runforks.FORKED) == ("False", reason)
    assert isinstance(step, actions.WriteRun) and step.until == NOW + runforks.RECHECK
    assert step.status.fork is None and step.event is not None
    again = runsteps.next_step(laid_out(run.model_copy(update={"status": step.status}),
                                        fork_copied=problem))
    assert isinstance(again, actions.Wait)  # said once
    assert again.until == NOW + runforks.RECHECK
    later = runsteps.next_step(laid_out(run.model_copy(update={"status": step.status})))
    assert isinstance(later, actions.ForkJournal)  # tried again


@pytest.mark.parametrize("reason", sorted(runforks.FINAL))
def test_a_reason_the_source_will_not_change_is_said_once_and_not_looked_at_again(
        reason: str) -> None:
    run = pinned_fork()
    step = runsteps.next_step(laid_out(run, fork_copied=resolution.Problem(
        reason=reason, message="delete this run")))
    assert condition(step, runforks.FORKED) == ("False", reason)
    assert isinstance(step, actions.WriteRun) and step.until is None
    done = run.model_copy(update={"status": step.status})
    assert runsteps.next_step(laid_out(done)) == actions.Wait(message="delete this run")
    copied = ForkStatus(run=lf.RUN, uid=lf.RUN_UID, reason="r", copied=NOW)
    late = runsteps.next_step(laid_out(done, fork_copied=copied))  # a copy done stands
    assert isinstance(late, actions.WriteRun) and late.status.fork == copied
    copying = runsteps.next_step(laid_out(run, fork_copied=resolution.Problem(
        reason=runforks.COPYING, message="copied 1 of 2 nodes")))
    assert condition(copying, runforks.FORKED) == ("False", runforks.COPYING)
    assert isinstance(copying, actions.WriteRun) and copying.until == NOW  # goes on at once
    assert copying.event is not None and copying.event.type == "Normal"


def test_a_fork_of_a_fork_waits_for_its_sources_copy_then_copies_what_it_inherited() -> None:
    parent = source()
    parent = parent.model_copy(update={"spec": parent.spec.model_copy(update={
        "fork": fork().spec.fork})})
    step = runsteps.next_step(laid_out(pinned_fork(fork(at=None)), fork_source=parent))
    assert condition(step, runforks.FORKED) == ("False", runforks.SOURCE_NOT_READY)
    copied = ForkStatus(run="older", uid="uid-older", reason="r", copied=NOW, inherited=[
        Inherited(node="research", records=2, bytes=9, commits=1),
        Inherited(node="report", records=0, bytes=0, commits=0)])
    parent = parent.model_copy(update={"status": parent.status.model_copy(update={
        "fork": copied})})
    step = runsteps.next_step(laid_out(pinned_fork(fork(at=None)), fork_source=parent,
                                       fork_slots=[source_slot("research", attempts=0),
                                                   source_slot("report", attempts=0)]))
    assert isinstance(step, actions.ForkJournal)
    assert [(s.node, s.attempts) for s in step.slots] == [("research", 0)]  # its attempt 0


def test_the_at_node_is_copied_first_and_the_source_slots_leases_named_by_owner() -> None:
    flow = resolution.parse(kind="workflow", text="nodes:\n  - name: report\n    workerClass: "
                            "cpu\n  - name: research\n    workerClass: cpu\n", origin="t")
    assert isinstance(flow, WorkflowDocument)
    step = runsteps.next_step(laid_out(pinned_fork(), workflow=flow))
    assert isinstance(step, actions.ForkJournal)
    assert [s.node for s in step.slots] == ["research", "report"]
    assert step.slots[0].owners == ("uid-research", lf.RUN_UID)
    assert step.source_uid == lf.RUN_UID


def test_the_copy_is_written_once_then_the_slots_are_laid_out() -> None:
    run = pinned_fork()
    copied = ForkStatus(run=lf.RUN, uid=lf.RUN_UID, node="research", step="draft",
                        actor="alice", reason="try another draft", copied=NOW,
                        inherited=[Inherited(node="research", records=3, bytes=90, commits=1)])
    step = runsteps.next_step(laid_out(run, fork_copied=copied))
    assert condition(step, runforks.FORKED) == ("True", "Copied")
    assert isinstance(step, actions.WriteRun) and step.status.fork == copied
    assert step.event is not None and step.event.reason == runforks.FORKED
    assert "by alice: try another draft; 3 records of 1 nodes" in step.event.message
    done = run.model_copy(update={"status": step.status})
    slots = runsteps.next_step(laid_out(done, fork_source=None))  # the source may be gone
    assert isinstance(slots, actions.Creates)
    assert {c.body["spec"]["node"] for c in slots.creates} == {"research", "report"}
    failed = runsteps.next_step(laid_out(run, fork_copied=resolution.Problem(
        reason=runforks.COPY_FAILED, message="the store did not answer")))
    assert condition(failed, runforks.FORKED) == ("False", runforks.COPY_FAILED)


def test_after_is_every_node_that_depends_on_one_directly_or_not() -> None:
    text = ("nodes:\n" + "".join(f"  - name: {n}\n    workerClass: cpu\n"
                                  + (f"    dependsOn: [{d}]\n" if d else "")
                                  for n, d in (("a", ""), ("b", "a"), ("c", "b"),
                                               ("d", ""), ("e", "d, c"))))
    flow = resolution.parse(kind="workflow", text=text, origin="test")
    assert isinstance(flow, WorkflowDocument)
    assert runforks.after(flow, "a") == {"b", "c", "e"}
    assert runforks.after(flow, "d") == {"e"}
    assert runforks.after(flow, "e") == set()
