"""The operator's /metrics after a small recovery trace, on a real API server (no node).

The shape of ``test_recovery_trace`` (``claimPolicy: Manual``, so each claim is a
person's command), smaller: claim → the attempt fails → RetryWait → a reassignment with
a blank reason (rejected) → a reassignment to ``gpu`` (accepted) → claim → Active. The
endpoint is scraped until the last claim is counted; then every counter this trace moves
is checked for its exact amount, the census gauges say what the stores hold (one slot
Active, one run Running), the operator's requests, reconciles and queue waits are counted,
and no series names an object.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.actors.operators import OperatorProcess
from tests.support.cluster.clusters import Cluster
from tests.support.cluster.processes import free_port
from tests.support.plays.scenarios import Scenario, request_id
from tests.support.scrapes import Series, value
from tests.support.scrapes import scrape as scrape_url
from tests.support.waiting import wait_for


@pytest.fixture
def metered(cluster: Cluster, namespace: str, installed: None,
            tmp_path: Path) -> Iterator[tuple[OperatorProcess, int]]:
    port = free_port()
    process = OperatorProcess(cluster=cluster, namespace=namespace,
                              log=tmp_path / "operator.log",
                              args=["--metrics-port", str(port)]).start()
    yield process, port
    process.stop()
    print(f"--- operator log (tail) ---\n{process.tail(60)}")


def scrape(port: int) -> Series:
    return scrape_url(f"http://127.0.0.1:{port}/metrics")


def test_counters_move_by_the_trace(scenario: Scenario,
                                    metered: tuple[OperatorProcess, int]) -> None:
    _, port = metered
    idle = wait_for(lambda: scrape(port), timeout=30, message="/metrics answering")
    assert value(idle, "agentrun_commands_total", kind="Claim", outcome="Accepted",
                 predicate="") == 0
    # alice's Manual run; she claims attempt 1, which fails: RetryWait.
    slot = scenario.owned_retry_wait(owner="alice", editors=("alice",))
    first = f"{slot}-1"
    scenario.launch_spec("gpu-workers", classes=["gpu"], image="busybox:gpu")

    blank = request_id()
    refused = scenario.annotate(slot, user="alice", reassign_id=blank, reassign_run="study",
                                reassign_worker_class="gpu", reassign_reason=" ")
    # No validating policy here (their tests are serial): the operator's ledger decides.
    assert refused.returncode == 0, refused.stderr
    entry = scenario.wait_ledger(slot, blank)
    assert (entry["outcome"], entry["predicate"]) == ("Rejected", "BlankReason")
    reassign = request_id()
    assert scenario.annotate(slot, user="alice", reassign_id=reassign, reassign_run="study",
                             reassign_worker_class="gpu",
                             reassign_reason="needs a GPU").returncode == 0
    assert scenario.wait_ledger(slot, reassign)["outcome"] == "Accepted"
    claim2 = request_id()
    assert scenario.annotate(slot, user="alice", claim_id=claim2).returncode == 0
    assert scenario.wait_state(slot, "Active")["status"]["activeWorker"] == f"{slot}-2"

    # Counted just after the write the test saw: wait for the last of them.
    series = wait_for(lambda: (s := scrape(port)) and value(
        s, "agentrun_claim_latency_seconds_count") == 2 and s, timeout=30,
        message="both claims counted")
    commands = {(kind, outcome, predicate): value(
        series, "agentrun_commands_total", kind=kind, outcome=outcome, predicate=predicate)
        for kind, outcome, predicate in [("Claim", "Accepted", ""),
                                         ("Reassign", "Rejected", "BlankReason"),
                                         ("Reassign", "Accepted", ""),
                                         ("Reassign", "Rejected", "NotOwner")]}
    assert commands == {("Claim", "Accepted", ""): 2, ("Reassign", "Rejected", "BlankReason"): 1,
                        ("Reassign", "Accepted", ""): 1, ("Reassign", "Rejected", "NotOwner"): 0}
    moved = {(kind, outcome): value(series, "agentrun_transitions_total", kind=kind,
                                    outcome=outcome)
             for kind, outcome in [("Slot", "Ready"), ("Slot", "Active"),
                                   ("Slot", "RetryWait"), ("Attempt", "Failed"),
                                   ("Attempt", "Lost"), ("Run", "Pinned")]}
    assert moved == {("Slot", "Ready"): 1, ("Slot", "Active"): 2, ("Slot", "RetryWait"): 1,
                     ("Attempt", "Failed"): 1, ("Attempt", "Lost"): 0, ("Run", "Pinned"): 1}
    assert value(series, "agentrun_attempt_duration_seconds_count", outcome="Failed") == 1
    assert value(series, "agentrun_lease_expiries_total") == 0
    assert value(series, "agentrun_effects_unresolved_total") == 0
    # Each claim was a command the operator served at once (no quota, no wait).
    assert 0 <= value(series, "agentrun_claim_latency_seconds_sum") < 30
    assert ("agentrun_queue_depth", frozenset()) in series
    assert {kind for (name, labels) in series if name == "agentrun_reconcile_errors_total"
            for _, kind in labels} == {"AgentRun", "Slot", "LaunchSpec"}
    # The census of the stores, at the scrape: one slot Active, one run Running.
    assert value(series, "agentrun_slots", state="Active") == 1
    assert value(series, "agentrun_slots", state="RetryWait") == 0
    assert value(series, "agentrun_runs", state="Running") == 1
    assert value(series, "agentrun_waiting_for_person", what="budget") == 0
    # The operator's own requests, their latency, its reconciles and the queue's waits.
    assert value(series, "agentrun_api_requests_total", method="PUT", code="200") >= 4
    assert value(series, "agentrun_api_request_duration_seconds_count", method="GET") >= 1
    assert value(series, "agentrun_reconcile_duration_seconds_count", kind="Slot") >= 4
    assert value(series, "agentrun_queue_wait_seconds_count") >= 4
    assert ("agentrun_blind_seconds", frozenset()) in series
    named = {v for _, labels in series for _, v in labels}
    assert not named & {slot, first, f"{slot}-2", "study", scenario.namespace}, named
