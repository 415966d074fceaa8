"""A lost node explained: the slot says why its attempt cannot end, and what to do.

Covers, in the core:
- ``node_view`` over every shape of Node read: missing, Ready True/False/Unknown, no
  Ready condition, the out-of-service taint;
- ``explain``: the reason per case; the message names the pod, the node and since when,
  and the two ways out with their risks, within a condition's bound;
- the slot step, exhaustively over the pod's phase x the node read: ``NodeLost`` True
  (with a Warning Event) only for a stuck pod (being deleted, or Unknown) on a lost node;
  written once (the same world again writes nothing); turned False, ``PodGone`` once the
  pod is gone and ``NodeReady`` when the node came back; never set on a Ready node;
- the attempt still ends only when its pod is gone: the condition decides nothing else.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from agentrun.api import bounds, names
from agentrun.api.slots import SlotState, SlotStatus
from agentrun.core.attempts import lostnodes
from agentrun.core.attempts.observations import PodPhase
from agentrun.core.base import slotconditions
from agentrun.core.base.actions import Wait, WriteStatus
from agentrun.core.slots import steps
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect

NODE = "worker-node-7"
SINCE = "2026-12-05T21:00:00Z"


def node(ready: str | None, *, taints: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    conditions = [] if ready is None else [
        {"type": "MemoryPressure", "status": "False"},
        {"type": "Ready", "status": ready, "lastTransitionTime": SINCE}]
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
            "spec": {"taints": [{"key": key, "effect": "NoExecute"} for key in taints]},
            "status": {"conditions": conditions}}


def on_node(found: dict[str, Any]) -> dict[str, Any]:
    found["spec"]["nodeName"] = NODE
    return found


READS = {
    "not read": None,
    "ready": lostnodes.node_view(NODE, node("True")),
    "not ready": lostnodes.node_view(NODE, node("Unknown")),
    "no Ready condition": lostnodes.node_view(NODE, node(None)),
    "out of service": lostnodes.node_view(NODE, node("False", taints=[
        lostnodes.OUT_OF_SERVICE])),
    "missing": lostnodes.node_view(NODE, None),
}
PODS = {  # phase as the API says it, and whether a deletion is under way
    "Running": ("Running", False), "Pending": ("Pending", False),
    "Succeeded": ("Succeeded", False), "Failed": ("Failed", False),
    "Terminating": ("Running", True), "Unknown": ("Unknown", False), "gone": (None, False),
}


def test_node_view_reads_every_shape_of_node() -> None:
    assert READS["missing"] == lostnodes.NodeView(name=NODE, exists=False)
    assert READS["missing"].lost
    assert not READS["ready"].lost and READS["ready"].since == SINCE
    assert READS["not ready"].lost and READS["not ready"].ready == "Unknown"
    assert READS["no Ready condition"].lost and READS["no Ready condition"].ready is None
    found = READS["out of service"]
    assert found.lost and found.out_of_service and found.ready == "False"
    assert not lostnodes.node_view(NODE, node("True", taints=["other"])).out_of_service


@pytest.mark.parametrize(("read", "reason"), [
    ("not ready", "NodeNotReady"), ("no Ready condition", "NodeNotReady"),
    ("out of service", "NodeOutOfService"), ("missing", "NodeMissing")])
def test_the_explanation_names_pod_node_since_and_the_ways_out(read: str, reason: str) -> None:
    view = READS[read]
    assert view is not None
    said = lostnodes.explain(pod=f.worker(1), namespace=f.NS, phase=PodPhase.TERMINATING,
                             node=view)
    assert said.reason == reason
    assert f.worker(1) in said.message and NODE in said.message
    assert len(said.message) <= bounds.MESSAGE_CHARS  # shown whole, never clipped
    force = f"kubectl delete pod {f.worker(1)} -n {f.NS} --force --grace-period=0"
    assert force in said.message
    assert "replacement proceeds by itself" in said.message
    if read != "missing":
        assert ("since " + SINCE in said.message) is (view.since is not None)
    if reason == "NodeNotReady":
        assert (f"kubectl taint node {NODE} node.kubernetes.io/out-of-service="
                "nodeshutdown:NoExecute") in said.message
        assert "still runs its workers" in said.message  # the risk, said


def test_long_names_still_leave_the_ways_out_whole() -> None:
    """Pod, namespace and node names of 63 characters each: shown whole."""
    long = lostnodes.NodeView(name="n" * 63, exists=True, ready="Unknown", since=SINCE)
    for view in (long, lostnodes.NodeView(name="n" * 63, exists=False)):
        said = lostnodes.explain(pod="p" * 63, namespace="s" * 63, phase=PodPhase.UNKNOWN,
                                 node=view)
        assert len(said.message) <= bounds.MESSAGE_CHARS, len(said.message)
        assert said.message.endswith("the replacement proceeds by itself")


def active_world(pod_phase: str, *, read: str,
                 status: SlotStatus | None = None) -> Any:
    phase, deleting = PODS[pod_phase]
    pod = None if phase is None else on_node(f.pod(1, phase, deleting=deleting))
    return f.world(status or f.active(1), now=f.T0 + f.seconds(3600),
                   attempt=f.objects(1, pod=pod, lease=None), node=READS[read])


@pytest.mark.parametrize(("pod_phase", "read"), list(itertools.product(PODS, READS)))
def test_node_lost_is_shown_only_for_a_stuck_pod_on_a_lost_node(pod_phase: str,
                                                                 read: str) -> None:
    """An Active attempt whose Lease is gone (it must end) and whose pod is in each phase,
    its node read each way: the condition only for the stuck ones on a lost node."""
    world = active_world(pod_phase, read=read)
    step = steps.next_step(world)
    stuck = pod_phase in ("Terminating", "Unknown")
    if stuck and READS[read] is not None and READS[read].lost:  # type: ignore[union-attr]
        written = expect(step, WriteStatus)
        shown = f.condition(written.status, names.NODE_LOST_CONDITION)
        assert shown.status == "True" and written.status.state is SlotState.ACTIVE
        assert written.event is not None and written.event.type == "Warning"
        assert written.event.message == shown.message
        again = steps.next_step(active_world(pod_phase, read=read, status=written.status))
        assert isinstance(again, Wait)  # written once
        return
    if stuck:  # the attempt waits for its pod, and says nothing of a node
        assert isinstance(step, Wait) and "gone" in step.message
        return
    if isinstance(step, WriteStatus):
        assert names.NODE_LOST_CONDITION not in {c.type for c in step.status.conditions}


@pytest.mark.parametrize(("pod_phase", "read", "reason"), [
    ("gone", "not read", "PodGone"), ("Failed", "not read", "PodGone"),
    ("Terminating", "ready", "NodeReady")])
def test_node_lost_turns_false_once_the_pod_is_gone_or_the_node_is_back(
        pod_phase: str, read: str, reason: str) -> None:
    shown = slotconditions.set_condition(f.retry_wait(), names.NODE_LOST_CONDITION, "True",
                                         "NodeNotReady", "lost", f.T0)
    phase, deleting = PODS[pod_phase]
    pod = None if phase is None else on_node(f.pod(1, phase, deleting=deleting))
    world = f.world(shown, now=f.T0 + f.seconds(60),
                    attempt=f.objects(1, pod=pod, lease=f.lease(1, outcome="Failed")),
                    node=READS[read])
    written = expect(steps.next_step(world), WriteStatus)
    found = f.condition(written.status, names.NODE_LOST_CONDITION)
    assert (found.status, found.reason) == ("False", reason)
    assert written.event is None
    assert written.status.state is SlotState.RETRY_WAIT  # nothing else decided


def test_the_attempt_ends_only_when_its_pod_is_gone() -> None:
    """Stuck on a lost node the slot stays Active; the same slot with the pod gone ends
    its attempt (the condition is turned False on the next pass)."""
    stuck = expect(steps.next_step(active_world("Terminating", read="missing")),
                   WriteStatus)
    assert stuck.status.state is SlotState.ACTIVE and stuck.status.attempts[-1].outcome is None
    ended = expect(steps.next_step(active_world("gone", read="not read",
                                                status=stuck.status)), WriteStatus)
    assert ended.status.state is SlotState.RETRY_WAIT
    assert ended.event is not None and ended.event.reason == "AttemptEnded"


def test_a_command_is_still_decided_while_node_lost_is_shown() -> None:
    """Shown already, the condition writes nothing, and the rest of the step goes on: a
    hold sent meanwhile is decided (the ledger has it), the condition kept as it was."""
    shown = expect(steps.next_step(active_world("Terminating", read="not ready")),
                   WriteStatus).status
    phase, deleting = PODS["Terminating"]
    world = f.world(shown, now=f.T0 + f.seconds(3600),
                    annotations=f.command("hold", "req-hold", hold_reason="wait for ops"),
                    attempt=f.objects(1, pod=on_node(f.pod(1, phase, deleting=deleting)),
                                      lease=None), node=READS["not ready"])
    written = expect(steps.next_step(world), WriteStatus)
    assert [c.request_id for c in written.status.commands] == ["req-hold"]
    assert f.condition(written.status, names.NODE_LOST_CONDITION).status == "True"
