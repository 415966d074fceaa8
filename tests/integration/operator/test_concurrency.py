"""Two operators at once on the same namespace: optimistic concurrency keeps it correct.

docs/design/caches-and-queue.md: one replica reconciles (leader election), but correctness
must hold if two run at once
(Kopf peering is off; both are standalone). Every write carries a precondition, so when
both decide the same step one of them gets a 409 (or AlreadyExists on its own object),
reads again and finds the step taken. These tests run two ``OperatorProcess`` on one
namespace and check the outcome: no attempt claimed twice, every command once in its
ledger, nothing left Claiming.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest

from tests.support.actors.operators import OperatorProcess
from tests.support.cluster import audit
from tests.support.cluster.clusters import Cluster
from tests.support.plays.convergence import (
    ANN,
    OPERATOR_USER,
    assert_converged,
    assert_nothing_stray,
    condition,
    exit_worker,
    ledger,
    publish,
    reassign,
    slots,
    status,
    tombstoned,
)
from tests.support.plays.scenarios import Scenario, request_id
from tests.support.waiting import wait_for, wait_for_default_service_account


@pytest.fixture
def operators(cluster: Cluster, namespace: str, installed: None, tmp_path: Path,
              api_client: kubernetes.client.ApiClient) -> Iterator[list[OperatorProcess]]:
    """Two operators on the test's namespace, both started."""
    wait_for_default_service_account(api_client, namespace)
    both = [OperatorProcess(cluster=cluster, namespace=namespace,
                            log=tmp_path / f"operator-{i}.log").start() for i in (1, 2)]
    yield both
    for process in both:
        process.stop()
    for i, process in enumerate(both, 1):
        print(f"--- operator {i} log (tail) ---\n{process.tail(25)}")


def conflicts(cluster: Cluster, namespace: str) -> list[audit.Write]:
    """The operators' writes the API server refused as stale (409): the races they ran."""
    log = cluster.audit_log
    if log is None:
        return []
    return [w for w in audit.writes(log, namespace=namespace, user=OPERATOR_USER)
            if w.code == 409]


def annotate(scenario: Scenario, slot: str, **annotations: str) -> None:
    result = scenario.annotate(slot, user="admin", **annotations)
    assert result.returncode == 0, result.stderr


def entry(scenario: Scenario, slot: str, request: str) -> dict[str, object]:
    found: dict[str, object] = scenario.wait_ledger(slot, request, timeout=30)
    return found


def test_two_operators_run_a_workflow(scenario: Scenario, cluster: Cluster,
                                      operators: list[OperatorProcess]) -> None:
    """Four independent nodes, Automatic claims, maxAttempts 1, both operators running.

    n0: the pod fails and its lease expires, then it is reassigned to gpu (the same
    request sent twice at once). n1: the worker fails and releases its lease; a hold,
    a reassignment rejected as Held, a release, then an accepted reassignment. n2: the
    worker stops renewing while its pod runs (fenced: deleted, Lost), reassigned to cpu,
    and attempt 2 succeeds. n3: held while Active (the attempt runs on), then succeeds.
    """
    nodes = publish(scenario, nodes=4)
    scenario.run("study", max_attempts=1)
    slot = {node: scenario.slot_name_eventually("study", node) for node in nodes}
    first = {node: scenario.wait_state(slot[node], "Active")["status"]["activeWorker"]
             for node in nodes}
    assert sorted(first.values()) == sorted(f"{slot[n]}-1" for n in nodes)

    hold3 = request_id()
    annotate(scenario, slot["n3"], hold_id=hold3, hold_reason="looking at its output")
    exit_worker(scenario, first["n0"], expire=True)
    exit_worker(scenario, first["n1"])
    scenario.renew(first["n2"])  # ... and never again: fenced after 5 s
    assert entry(scenario, slot["n3"], hold3)["outcome"] == "Accepted"
    assert status(scenario.slot(slot["n3"]))["state"] == "Active"  # a hold never interrupts
    exit_worker(scenario, first["n3"], phase="Succeeded")

    for node in ("n0", "n1", "n2"):
        scenario.wait_slot(slot[node], lambda s: condition(s, "AwaitingReassignment") == "True",
                           message="attempts exhausted", timeout=30)
        wait_for(lambda node=node: tombstoned(scenario, first[node]), timeout=30,
                 message=f"lease {first[node]} tombstoned")
    scenario.wait_state(slot["n3"], "Succeeded")

    # n0: the same reassignment twice, back to back, while both operators watch.
    to_gpu = dict(reassign_run="study", reassign_worker_class="gpu",
                  reassign_reason="needs a GPU")
    a = request_id()
    annotate(scenario, slot["n0"], reassign_id=a, **to_gpu)
    annotate(scenario, slot["n0"], reassign_id=a, **to_gpu)
    d = reassign(scenario, slot["n2"], worker_class="cpu")
    # n1: hold, a reassignment refused while held, release, reassignment accepted.
    hold1, refused, release1 = request_id(), request_id(), request_id()
    annotate(scenario, slot["n1"], hold_id=hold1, hold_reason="checking the failure")
    assert entry(scenario, slot["n1"], hold1)["outcome"] == "Accepted"
    annotate(scenario, slot["n1"], reassign_id=refused, **to_gpu)
    rejected = entry(scenario, slot["n1"], refused)
    assert (rejected["outcome"], rejected["predicate"]) == ("Rejected", "Held")
    annotate(scenario, slot["n1"], release_id=release1)
    assert entry(scenario, slot["n1"], release1)["outcome"] == "Accepted"
    c = reassign(scenario, slot["n1"])

    second = {node: f"{slot[node]}-2" for node in ("n0", "n1", "n2")}
    for node, worker in second.items():
        scenario.wait_slot(slot[node], lambda s, w=worker: status(s).get("activeWorker") == w,
                           message=f"attempt {worker} Active", timeout=60)
    exit_worker(scenario, second["n2"], phase="Succeeded")
    scenario.wait_state(slot["n2"], "Succeeded")
    # The same request once more, after it was decided: a no-op, removed.
    annotate(scenario, slot["n0"], reassign_id=a, **to_gpu)
    entry(scenario, slot["n0"], a)

    assert all(p.alive for p in operators), [p.tail() for p in operators]
    expected = {"n0": ((a,), "Active", 2, ()), "n1": ((hold1, refused, release1, c),
                                                       "Active", 2, ()),
                "n2": ((d,), "Succeeded", 2, (1,)), "n3": ((hold3,), "Succeeded", 1, ())}
    for node, (requests, state, count, without_pod) in expected.items():
        final = assert_converged(scenario, cluster, slot[node], count=count, state=state,
                                 without_pod=without_pod, requests=requests)
        assert ledger(final) == list(requests), (node, ledger(final))
    outcomes = {node: [r.get("outcome") for r in status(scenario.slot(slot[node]))["attempts"]]
                for node in nodes}
    assert outcomes == {"n0": ["Failed", None], "n1": ["Failed", None],
                        "n2": ["Lost", "Succeeded"], "n3": ["Succeeded"]}, outcomes
    assert_nothing_stray(scenario)
    raced = conflicts(cluster, scenario.namespace)
    print(f"409 conflicts between the two operators: {len(raced)}")
    for write in raced:
        print(f"  {write.row()}")
    if cluster.audit_log is not None:  # evidence that the two really raced
        assert raced, "no write of either operator was ever refused as stale"


def test_same_reassignment_raced(scenario: Scenario, cluster: Cluster,
                                 operators: list[OperatorProcess]) -> None:
    """One reassignment, its request id sent three times while both operators run."""
    publish(scenario, nodes=1)
    scenario.run("study", max_attempts=1)
    slot = scenario.slot_name_eventually("study", "n0")
    first = scenario.wait_state(slot, "Active")["status"]["activeWorker"]
    exit_worker(scenario, first)
    scenario.wait_slot(slot, lambda s: condition(s, "AwaitingReassignment") == "True",
                       message="attempts exhausted", timeout=30)
    wait_for(lambda: tombstoned(scenario, first), timeout=30,
             message=f"lease {first} tombstoned")
    before = len(conflicts(cluster, scenario.namespace))

    request = request_id()
    fields = dict(reassign_id=request, reassign_run="study", reassign_worker_class="gpu",
                  reassign_reason="raced")
    for _ in range(3):
        annotate(scenario, slot, **fields)
    entry(scenario, slot, request)
    worker = f"{slot}-2"
    scenario.wait_slot(slot, lambda s: status(s).get("activeWorker") == worker,
                       message=f"attempt {worker} Active", timeout=60)

    final = assert_converged(scenario, cluster, slot, count=2, state="Active",
                             requests=(request,))
    assert ledger(final) == [request]
    # Only the operator whose ledger write won posts the Event: one, not two.
    wait_for(lambda: scenario.events("Reassigned"), timeout=10, message="a Reassigned Event")
    assert len(scenario.events("Reassigned")) == 1, scenario.events("Reassigned")
    assert f"{ANN}reassign-id" not in (final["metadata"].get("annotations") or {})
    assert_nothing_stray(scenario)
    assert all(p.alive for p in operators)
    raced = conflicts(cluster, scenario.namespace)[before:]
    print(f"409 conflicts after the reassignment was sent: {len(raced)}")
    for write in raced:
        print(f"  {write.row()}")
    assert not any(s["status"].get("state") == "Claiming" for s in slots(scenario))
