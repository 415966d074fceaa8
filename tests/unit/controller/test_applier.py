"""``controller.applier``: each kind's step mapped to its ``Writer`` call (no cluster).

Covers: every step kind is the one Writer call it names, with its ``point`` and the
object read as its precondition; a create that met AlreadyExists is reported as what was
found (gone meanwhile: a conflict), one rejected as :class:`applier.Refused`; a batch of
creates is made in order and reports what it found under the names taken, a rejection
stopping it; the slot reconciler decides what follows a failed claim create in the
claiming world the create was decided in, and applies it in turn. The real API server's
side of each write is the integration suite's.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentrun.api import names
from agentrun.api.launchspecs import LaunchSpecStatus
from agentrun.api.runs import AgentRunStatus
from agentrun.controller import applier, slots
from agentrun.core.base import actions
from agentrun.core.slots import decisions, steps
from agentrun.kube import writes
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect

Call = tuple[str, dict[str, Any]]


class Writer:
    """Records every call; ``creates`` answers creates in turn (None: created)."""

    def __init__(self, *, creates: list[Exception | None] | None = None) -> None:
        self.calls: list[Call] = []
        self.creates = list(creates or [])

    def slot_status(self, slot: Any, status: Any, *, point: str) -> None:
        self.calls.append(("slot_status", {"slot": slot.metadata.name, "status": status,
                                           "point": point}))

    def custom_status(self, body: dict[str, Any], *, point: str) -> None:
        self.calls.append(("custom_status", {"body": body, "point": point}))

    def remove_annotations(self, **kw: Any) -> None:
        self.calls.append(("remove_annotations", kw))

    def create(self, body: dict[str, Any], *, point: str) -> None:
        self.calls.append(("create", {"name": body["metadata"]["name"], "point": point}))
        answer = self.creates.pop(0) if self.creates else None
        if answer is not None:
            raise answer

    def delete_pod(self, **kw: Any) -> None:
        self.calls.append(("delete_pod", kw))

    def tombstone(self, **kw: Any) -> None:
        self.calls.append(("tombstone", kw))

    def annotate_lease(self, **kw: Any) -> None:
        self.calls.append(("annotate_lease", kw))

    def stamping_secret(self, body: dict[str, Any]) -> None:
        self.calls.append(("stamping_secret", {"body": body}))


def apply(step: actions.Write, writer: Writer | None = None, **target: Any) -> Call:
    writer = writer or Writer()
    outcome = applier.Applier(writer=writer).apply(  # type: ignore[arg-type]
        step, target=applier.Target(**target))
    assert outcome == applier.Applied()
    [call] = writer.calls
    return call


SLOT = f.slot(f.active())
LEASE = f.lease(1)


def test_a_slot_status_is_written_on_the_slot_read() -> None:
    name, kw = apply(actions.WriteStatus(status=f.ready(), point="observed"), slot=SLOT)
    assert (name, kw) == ("slot_status", {"slot": SLOT.metadata.name, "status": f.ready(),
                                          "point": "observed"})


def test_a_pod_is_deleted_in_the_slots_namespace_under_its_uid() -> None:
    name, kw = apply(actions.DeletePod(name=f.worker(1), uid="u-1", message="m"), slot=SLOT)
    assert (name, kw) == ("delete_pod", {"namespace": f.NS, "name": f.worker(1), "uid": "u-1",
                                         "point": "delete-pod"})


def test_a_tombstone_replaces_the_attempts_lease_as_read() -> None:
    name, kw = apply(actions.Tombstone(name=f.worker(1), annotations={"a": "b"}),
                     slot=SLOT, lease=LEASE)
    assert (name, kw) == ("tombstone", {"lease": LEASE, "annotations": {"a": "b"},
                                        "point": "tombstone"})


def test_a_lease_is_annotated_as_the_step_read_it() -> None:
    name, kw = apply(actions.AnnotateLease(lease=LEASE, annotations={"a": "b"}), slot=SLOT)
    assert (name, kw) == ("annotate_lease", {"lease": LEASE, "annotations": {"a": "b"},
                                             "point": "annotate-lease"})


def test_a_command_is_removed_by_a_patch_of_the_slot_under_its_version() -> None:
    name, kw = apply(actions.RemoveCommand(keys=("k",), labels={"l": "v"}, point="label"),
                     slot=SLOT)
    assert (name, kw) == ("remove_annotations", {
        "kind": "Slot", "namespace": f.NS, "name": SLOT.metadata.name,
        "resource_version": SLOT.metadata.resource_version, "keys": ("k",),
        "point": "label", "labels": {"l": "v"}})


def test_a_run_status_is_written_under_the_runs_version() -> None:
    run = f.agent_run()
    name, kw = apply(actions.WriteRun(status=AgentRunStatus(), point="pinned"), run=run)
    assert name == "custom_status" and kw["point"] == "pinned"
    assert kw["body"]["kind"] == "AgentRun"
    assert kw["body"]["metadata"] == {"name": f.RUN, "namespace": f.NS,
                                      "resourceVersion": run.metadata.resource_version}


def test_a_launch_spec_status_is_written_under_the_specs_version() -> None:
    spec = f.CPU_SPEC
    name, kw = apply(actions.WriteLaunchSpec(spec=spec, status=LaunchSpecStatus()))
    assert name == "custom_status" and kw["point"] == "launch-spec-status"
    assert kw["body"]["kind"] == "LaunchSpec"
    assert kw["body"]["metadata"] == {"name": "cpu-spec", "namespace": f.NS,
                                      "resourceVersion": spec.metadata.resource_version}
    assert kw["body"]["status"] == LaunchSpecStatus().wire()


def test_the_stamping_epoch_is_the_secret_as_minted() -> None:
    body = {"kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}}
    assert apply(actions.MintEpoch(body=body)) == ("stamping_secret", {"body": body})


def create(name: str, point: str = "slots") -> actions.Create:
    return actions.Create(body={"kind": "Slot", "metadata": {"name": name, "namespace": f.NS}},
                          point=point)


def test_a_create_made_is_applied() -> None:
    assert apply(create("a", "claim-lease")) == ("create", {"name": "a",
                                                            "point": "claim-lease"})


def test_a_create_that_met_an_object_reports_it_and_one_gone_meanwhile_conflicts() -> None:
    found = {"metadata": {"name": "a"}}
    writer = Writer(creates=[writes.Exists(found), writes.Exists(None)])
    apply_ = applier.Applier(writer=writer)  # type: ignore[arg-type]
    assert apply_.apply(create("a")) == applier.Found(found=found)
    with pytest.raises(writes.Conflict):
        apply_.apply(create("a"))


def test_a_rejected_create_is_reported_with_the_servers_answer() -> None:
    rejected = writes.Rejected(403, "exceeded quota")
    writer = Writer(creates=[rejected])
    outcome = applier.Applier(writer=writer).apply(create("a"))  # type: ignore[arg-type]
    assert isinstance(outcome, applier.Refused) and outcome.error is rejected
    assert (outcome.status, outcome.message) == (403, "exceeded quota")


def test_a_batch_is_created_in_order_and_reports_the_names_taken() -> None:
    found = {"metadata": {"name": "b"}}
    writer = Writer(creates=[None, writes.Exists(found), None])
    outcome = applier.Applier(writer=writer).apply(  # type: ignore[arg-type]
        actions.Creates(creates=(create("a"), create("b"), create("c"))))
    assert outcome == applier.Taken(found={"b": found})
    assert [kw["name"] for _, kw in writer.calls] == ["a", "b", "c"]


def test_what_a_batch_found_before_a_conflict_is_kept_in_the_reconciles_record() -> None:
    found = {"metadata": {"name": "a"}}
    writer = Writer(creates=[writes.Exists(found), writes.Exists(None)])
    taken: dict[str, Any] = {}
    with pytest.raises(writes.Conflict):
        applier.Applier(writer=writer).apply(  # type: ignore[arg-type]
            actions.Creates(creates=(create("a"), create("b"))),
            target=applier.Target(taken=taken))
    assert taken == {"a": found}


def test_a_rejection_stops_a_batch() -> None:
    writer = Writer(creates=[writes.Rejected(422, "invalid")])
    with pytest.raises(writes.Rejected):
        applier.Applier(writer=writer).apply(  # type: ignore[arg-type]
            actions.Creates(creates=(create("a"), create("b"))))
    assert [kw["name"] for _, kw in writer.calls] == ["a"]


# --- the slot reconciler: what follows a failed create is the core's ------------------------


def test_a_claims_lease_found_then_its_pod_refused_by_a_quota_is_decided_in_the_claim() -> None:
    """The Lease met AlreadyExists (ours): the core goes on to the Pod; the Pod refused by
    a quota is decided in the claiming world (Claiming, attempt 1 pending), not the Ready
    slot read: the QuotaExceeded status written names the pending attempt."""
    world = f.world(f.ready(), next_attempt=f.objects(1))
    decision = steps.decide(world)
    lease = f.lease(1)
    lease["metadata"]["annotations"][names.LAUNCH_SPEC_ANNOTATION] = "cpu-spec@1"
    writer = Writer(creates=[writes.Exists(lease), writes.Rejected(403, "exceeded quota")])
    reconciler = slots.SlotReconciler(reader=None, writer=writer)  # type: ignore[arg-type]
    result = slots.Result()
    assert reconciler.apply(world, decision, result) is False
    assert [(name, kw["point"]) for name, kw in writer.calls] == [
        ("create", "claim-lease"), ("create", "claim-pod"), ("slot_status", "quota-exceeded")]
    written = writer.calls[-1][1]["status"]
    assert written.pending_worker == f.worker(1) and written.attempts == []
    assert len(result.tallies) == 1 and [e.reason for _, e in result.events] == [
        "QuotaExceeded"]


def test_a_refused_snapshot_posts_its_event_and_the_error_stands() -> None:
    world = f.world(launch_specs=(f.CPU_SPEC,))
    decision = steps.decide(world)
    assert expect(decision.step, actions.Create).shared
    writer = Writer(creates=[writes.Rejected(403, "no")])
    reconciler = slots.SlotReconciler(reader=None, writer=writer)  # type: ignore[arg-type]
    result = slots.Result()
    with pytest.raises(writes.Rejected):
        reconciler.apply(world, decision, result)
    assert [e.reason for _, e in result.events] == ["CreateFailed"]
    assert result.tallies == []


def test_a_wait_decided_is_the_reconciles_answer_and_writes_nothing() -> None:
    world = f.world(f.ready())
    writer = Writer()
    reconciler = slots.SlotReconciler(reader=None, writer=writer)  # type: ignore[arg-type]
    result = slots.Result()
    wait = actions.Wait(message="m")
    assert reconciler.apply(world, decisions.Decision(step=wait, world=world), result)
    assert result.wait == wait and writer.calls == []
