"""The recovery trace as one OpenTelemetry trace, received by a real Collector.

The demo's recovery on real pods, the operator restarted mid-run: alice claims attempt 1
of a Manual run; its SDK worker runs two steps and is killed on the node while the
operator is down; the operator, started again, ends attempt 1 (Failed: its pod was
killed) once its lease expired;
bob's reassignment is refused (NotOwner), alice's to ``gpu`` accepted; her claim starts
attempt 2, which skips the two steps (the recoverable prefix) and runs the third; the run
succeeds. The operator (``--otlp-endpoint``) and the workers (their LaunchSpec's
``OTEL_EXPORTER_OTLP_ENDPOINT``) send to the Collector (``tests/support/otelcol.py``) on
the node bridge's address, which the pods reach; the test reads what it received.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentrun.api import traces
from tests.support.actors.operators import OperatorProcess
from tests.support.actors.workers import (
    container_pid,
    grant_worker_role,
    kill_on_node,
    node_address,
    real_launch_spec,
    wait_pod_phase,
    wait_printed,
)
from tests.support.cluster.localnode import LocalNode
from tests.support.otelcol import Collector, Span
from tests.support.plays.scenarios import Scenario, request_id
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kubelet
STEP_TIMEOUT = 120.0

# Steps gather and draft, then (attempt 1) pause for the kill, its spans sent first; a
# later attempt skips those two (read back from the prefix) and runs publish.
WORKER = """
import json, threading
from agentrun.worker import Worker
def say(**fields):
    print(json.dumps(fields), flush=True)
with Worker.from_env() as worker:
    for key in ("gather", "draft"):
        worker.step(key, do=lambda key=key: f"{key} by attempt {worker.context.attempt}")
    if worker.context.attempt == 1:
        worker.tracing.sink.flush()
        say(paused=True, tracing=worker.tracing.on)
        threading.Event().wait()
    worker.step("publish", do=lambda: "published")
    say(done=worker.steps.done)
"""


@pytest.fixture
def collector(scenario: Scenario) -> Iterator[Collector]:
    with Collector(host=node_address(scenario)) as started:
        yield started
        print(f"collector log: {started.log()}")


def test_the_recovery_is_one_trace_across_an_operator_restart(
        scenario: Scenario, installed: None, node: LocalNode, worker_image: str,
        collector: Collector, tmp_path: Path) -> None:
    operator = OperatorProcess(cluster=scenario.cluster, namespace=scenario.namespace,
                               log=tmp_path / "operator.log",
                               args=["--otlp-endpoint", collector.endpoint]).start()
    try:
        run_uid, slot_uid = recovery(scenario, operator=operator, node=node,
                                           image=worker_image, collector=collector)
    finally:
        operator.stop()
        print(f"--- operator log (tail) ---\n{operator.tail(40)}")

    def complete() -> list[Span] | None:
        found = collector.spans()
        names = {s.name for s in found}
        return found if {"run study", "step publish"} <= names else None
    spans = wait_for(complete, timeout=30, message="the run's span and attempt 2's steps")
    print("\n".join(f"{s.service:18} {s.parent or '-':16} {s.span} {s.name} "
                    f"{ {k: v for k, v in s.attributes.items() if 'command' in k} }"
                    for s in spans))

    # One trace for the run, its ids derived from the uids.
    trace = f"{traces.trace_id(run_uid):032x}"
    assert {s.trace for s in spans} == {trace}
    run_span, slot_span = f"{traces.run_span(run_uid):016x}", f"{traces.slot_span(slot_uid):016x}"
    by_name = {s.name: s for s in spans}
    assert (by_name["run study"].span, by_name["run study"].parent) == (run_span, "")
    assert (by_name["slot research"].span, by_name["slot research"].parent) == (
        slot_span, run_span)
    # Attempts 1 and 2 under the slot: the first killed (an error), the second succeeded.
    first, second = by_name["attempt 1"], by_name["attempt 2"]
    assert first.parent == second.parent == slot_span
    assert (first.attributes["agentrun.outcome"], first.attributes["agentrun.exit_code"]) == (
        "Failed", 137)
    assert first.error is not None
    assert (second.error, second.attributes["agentrun.outcome"]) == (None, "Succeeded")
    assert first.attributes["agentrun.owner"] == second.attributes["agentrun.owner"] == "alice"
    # The steps, from the workers, under their attempts: attempt 2 skipped what 1 ran.
    steps = {(s.parent, s.attributes["agentrun.step.key"]): s.attributes["agentrun.step.outcome"]
             for s in spans if s.name.startswith("step ")}
    assert steps == {(first.span, "gather"): "ran", (first.span, "draft"): "ran",
                     (second.span, "gather"): "skipped", (second.span, "draft"): "skipped",
                     (second.span, "publish"): "ran"}
    assert {s.service for s in spans if s.name.startswith("step ")} == {"agentrun-worker"}
    assert {s.service for s in spans if not s.name.startswith("step ")} == {
        "agentrun-operator"}
    # The reassignments on their spans: who, why, and the check that refused bob's.
    reassigns = {(s.attributes["agentrun.command.actor"],
                  s.attributes["agentrun.command.outcome"],
                  s.attributes.get("agentrun.command.predicate"),
                  s.attributes.get("agentrun.command.reason"), s.parent)
                 for s in spans if s.name == "command Reassign"}
    assert reassigns == {
        ("alice", "Accepted", None, "the node was lost", slot_span),
        ("bob", "Rejected", "NotOwner", "mine now", slot_span)}
    assert {s.parent for s in spans if s.name == "claim"} == {first.span, second.span}
    assert operator.starts == 2


def recovery(scenario: Scenario, *, operator: OperatorProcess, node: LocalNode, image: str,
             collector: Collector) -> tuple[str, str]:
    """The recovery, the operator restarted while attempt 1 dies: the run's and slot's uids."""
    scenario.grant_editor("alice", "bob")
    grant_worker_role(scenario)
    scenario.configs()
    for name, classes in (("cpu-workers", ["cpu"]), ("gpu-workers", ["gpu"])):
        real_launch_spec(scenario, name, classes=classes, image=image, script=WORKER,
                         renewer=False, env={"OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint})
    scenario.run("study", user="alice", claim_policy="Manual")
    slot = scenario.slot_name_eventually("study", "research", timeout=STEP_TIMEOUT)
    scenario.wait_state(slot, "Ready", timeout=STEP_TIMEOUT)
    assert scenario.annotate(slot, user="alice", claim_id=request_id()).returncode == 0
    first = f"{slot}-1"
    wait_pod_phase(scenario, first, {"Running"}, timeout=STEP_TIMEOUT)
    assert wait_printed(scenario, first, "paused", timeout=STEP_TIMEOUT)["tracing"] is True

    operator.stop()  # down while the worker dies and its lease runs out
    running = scenario.pod(first)
    assert running is not None
    kill_on_node(container_pid(node, running), pod_uid=running["metadata"]["uid"])
    wait_pod_phase(scenario, first, {"Failed"}, timeout=STEP_TIMEOUT)
    operator.start()
    scenario.wait_state(slot, "RetryWait", timeout=STEP_TIMEOUT)

    def reassign(user: str, reason: str) -> dict[str, Any]:
        """``user``'s reassignment to gpu, as the ledger recorded it."""
        sent = request_id()
        assert scenario.annotate(slot, user=user, reassign_id=sent, reassign_run="study",
                                 reassign_worker_class="gpu",
                                 reassign_reason=reason).returncode == 0
        return scenario.wait_ledger(slot, sent)

    assert reassign("bob", "mine now")["predicate"] == "NotOwner"
    assert reassign("alice", "the node was lost")["outcome"] == "Accepted"
    assert scenario.annotate(slot, user="alice", claim_id=request_id()).returncode == 0
    second = f"{slot}-2"
    wait_printed(scenario, second, "done", timeout=STEP_TIMEOUT)
    found = scenario.wait_state(slot, "Succeeded", timeout=STEP_TIMEOUT)
    wait_for(lambda: any(c["type"] == "Succeeded" and c["status"] == "True" for c in (
        scenario.agentrun("study").get("status", {}).get("conditions") or [])),
        timeout=STEP_TIMEOUT, message="run study Succeeded")
    run_uid = scenario.agentrun("study")["metadata"]["uid"]
    return run_uid, found["metadata"]["uid"]
