"""The operator with real workers: pods that run, renew their own Lease, crash and are killed.

What real pods must show on the node: each worker pod runs the project's image as
``agentrun-worker run -- python3 -c <script>`` with the LaunchSpec's service account, so
every Lease renewal is the pod's own (pod-bound token, in-cluster configuration through
the ``kubernetes`` Service) and every ``pods/status`` write is the kubelet's. Nothing
here writes a pod's status or a lease: the audit log shows who did. The operator runs out
of process as the ``operator`` user, or (the trace's second case) in the cluster as the
pods of ``manifests/deploy/operator.yaml`` (two replicas: only the leader's pod writes);
only one of them serves the test's namespace.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agentrun.worker import _effects as effects
from tests.support.actors.effectowner import EffectOwner
from tests.support.actors.incluster import OPERATOR_USER, InClusterOperator
from tests.support.actors.operators import OperatorProcess
from tests.support.actors.workers import (
    LOCAL_OPERATOR_USER,
    agent_events,
    container_pid,
    grant_worker_role,
    kill_on_node,
    lease_renewers,
    real_launch_spec,
    renewed_by_its_pod_then_tombstoned,
    status_writers_of,
    terminated,
    token_pods,
    wait_pod_phase,
    wait_renewed,
    worker_user,
)
from tests.support.cluster.audit import writes
from tests.support.cluster.clusters import Cluster
from tests.support.cluster.images import PROJECT_DEV_REF
from tests.support.cluster.localcluster import NODE_NAME
from tests.support.cluster.localnode import LocalNode
from tests.support.plays import examples
from tests.support.plays.scenarios import Scenario, condition, request_id
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kubelet
NODE_USER = f"system:node:{NODE_NAME}"
ANN = "agentrun.dev/"

# Prints the pinned configuration it finds mounted, then works for a lease duration.
READS_CONFIG = """
import json, os, pathlib, time
root = pathlib.Path(os.environ["AGENTRUN_CONFIG_DIR"])
found = {k: (root / k / f"{k}.yaml").read_text() for k in ("package", "workflow", "bindings")}
print(json.dumps({"attempt": os.environ["AGENTRUN_ATTEMPT"], "config": found}), flush=True)
time.sleep(5)  # the worker's work: long enough for a few background renewals
"""
# Attempt 1 gives up on its own (exit 3); any later attempt succeeds.
FAILS_FIRST = """
import os, sys
attempt = int(os.environ["AGENTRUN_ATTEMPT"])
print(f"attempt {attempt} of {os.environ['AGENTRUN_SLOT']}", flush=True)
sys.exit(3 if attempt == 1 else 0)
"""
# Works until killed.
WORKS_ON = """
import time
print("working", flush=True)
time.sleep(3600)
"""


def one_attempt(scenario: Scenario, *, image: str, script: str) -> tuple[str, str]:
    """A run of one node and one automatic attempt running ``script``: slot and pod names."""
    grant_worker_role(scenario)
    scenario.configs()
    real_launch_spec(scenario, "cpu-workers", classes=["cpu"], image=image, script=script)
    scenario.run("study", max_attempts=1)
    slot = scenario.slot_name_eventually("study", "research")
    return slot, f"{slot}-1"


def test_worker_reads_its_pinned_configuration_and_renews_its_own_lease(
        scenario: Scenario, operator: OperatorProcess, worker_image: str) -> None:
    slot, first = one_attempt(scenario, image=worker_image, script=READS_CONFIG)
    pod = wait_pod_phase(scenario, first, {"Succeeded", "Failed"})
    logs = scenario.cluster.kubectl("logs", "-n", scenario.namespace, first)
    assert pod["status"]["phase"] == "Succeeded", logs.stdout + logs.stderr
    assert pod["spec"]["nodeName"] == NODE_NAME
    assert pod["spec"]["containers"][0]["image"] == worker_image
    printed = json.loads(next(line for line in logs.stdout.splitlines() if line.startswith("{")))
    pins = scenario.agentrun("study")["status"]["pinned"]
    snapshots = {kind: (scenario.core.read_namespaced_config_map(
        pin["snapshot"], scenario.namespace).data or {})[f"{kind}.yaml"]
        for kind, pin in pins.items()}
    assert printed == {"attempt": "1", "config": snapshots}

    done = scenario.wait_state(slot, "Succeeded", timeout=60)["status"]
    assert done["attempts"][-1]["outcome"] == "Succeeded"
    # Renewals by the pod's own service account (first one before the command, then every
    # 1.7 s), then the operator's tombstone; no one else updates the lease.
    renewed_by_its_pod_then_tombstoned(scenario, first, at_least=3)
    assert status_writers_of(scenario, [first]) == {NODE_USER}


@pytest.fixture(params=["process", "in-cluster"])
def served(request: pytest.FixtureRequest, cluster: Cluster, namespace: str,
           installed: None, worker_image: str, tmp_path: Path) -> Iterator[str]:
    """The one operator serving the test's namespace; the user it writes as."""
    if request.param == "process":
        process = OperatorProcess(cluster=cluster, namespace=namespace,
                                  log=tmp_path / "operator.log").start()
        yield LOCAL_OPERATOR_USER
        process.stop()
        print(f"--- operator log (tail) ---\n{process.tail(60)}")
        return
    deployed = InClusterOperator(cluster=cluster, image=worker_image, namespace=namespace)
    try:
        pods = deployed.start()
        assert {p["spec"]["serviceAccountName"] for p in pods} == {"agentrun-operator"}
        yield OPERATOR_USER
        print(f"--- in-cluster operator log (tail) ---\n{deployed.logs()}")
    finally:
        deployed.stop()


def test_seed_trace_with_a_real_worker(scenario: Scenario, served: str,
                                       worker_image: str) -> None:
    """Exit 3 → lease released → Failed by the kubelet → RetryWait → reassign → claim → 2 runs."""
    scenario.grant_editor("alice", "bob")
    grant_worker_role(scenario)
    scenario.configs()
    for name, classes in (("cpu-workers", ["cpu"]), ("gpu-workers", ["gpu"])):
        real_launch_spec(scenario, name, classes=classes, image=worker_image,
                         script=FAILS_FIRST)
    scenario.run("study", user="alice", claim_policy="Manual")
    slot = scenario.slot_name_eventually("study", "research")
    scenario.wait_state(slot, "Ready")

    claim = request_id()
    assert scenario.annotate(slot, user="alice", claim_id=claim).returncode == 0
    assert scenario.wait_ledger(slot, claim)["outcome"] == "Accepted"
    first = f"{slot}-1"
    pod1 = wait_pod_phase(scenario, first, {"Succeeded", "Failed"})
    assert pod1["status"]["phase"] == "Failed"
    assert terminated(pod1)["exitCode"] == 3

    waiting = scenario.wait_state(slot, "RetryWait", timeout=60)["status"]
    assert waiting["priorWorker"] == first
    assert (waiting["attempts"][-1]["outcome"], waiting["attempts"][-1]["exitCode"]) == (
        "Failed", 3)
    tombstone = wait_for(lambda: (lease := scenario.lease(first)) and f"{ANN}outcome" in (
        lease["metadata"].get("annotations") or {}) and lease, timeout=30,
        message=f"lease {first} tombstoned")
    assert tombstone["metadata"]["annotations"][f"{ANN}outcome"] == "Failed"
    # The worker's last write released its lease as its command exited (accepted: the
    # pod's own token), before the operator's tombstone; how soon that ends an attempt is
    # tests/integration/operator/test_lease_policy.py's (hand-played, no kubelet delays).
    assert f"{ANN}released" in tombstone["metadata"]["annotations"]
    updates = [w for w in writes(scenario.cluster.audit_log or Path(), namespace=scenario.namespace)
               if w.resource == "leases" and w.name == first and w.verb == "update"]
    renewals = [w for w in updates if w.user == worker_user(scenario.namespace)]
    (ended,) = [w for w in updates if w.user == served]
    assert renewals and renewals[-1].code == 200 and renewals[-1].at <= ended.at

    reassign = request_id()
    assert scenario.annotate(slot, user="alice", reassign_id=reassign, reassign_run="study",
                             reassign_worker_class="gpu",
                             reassign_reason="attempt 1 gave up").returncode == 0
    assert scenario.wait_ledger(slot, reassign)["outcome"] == "Accepted"
    reopened = scenario.slot(slot)["status"]
    assert (reopened["state"], reopened["launchSpec"]["name"]) == ("RetryWait", "gpu-workers")
    assert condition(reopened, "Reopened") == "True"
    assert scenario.pods() == [first]

    claim2 = request_id()
    assert scenario.annotate(slot, user="alice", claim_id=claim2).returncode == 0
    second = f"{slot}-2"
    pod2 = wait_pod_phase(scenario, second, {"Succeeded", "Failed"})
    logs = scenario.cluster.kubectl("logs", "-n", scenario.namespace, second)
    assert pod2["status"]["phase"] == "Succeeded", logs.stdout + logs.stderr
    assert f"attempt 2 of {slot}" in logs.stdout
    assert pod2["metadata"]["labels"]["example/spec"] == "gpu-workers"
    final = scenario.wait_state(slot, "Succeeded", timeout=60)["status"]
    assert [a["outcome"] for a in final["attempts"]] == ["Failed", "Succeeded"]
    assert scenario.pods() == [first, second]
    assert status_writers_of(scenario, [first, second]) == {NODE_USER}
    assert worker_user(scenario.namespace) in lease_renewers(scenario, second)
    operator_writes = writes(scenario.cluster.audit_log or Path(), namespace=scenario.namespace,
                             user=served)
    assert any(w.resource == "slots" and w.subresource == "status" for w in operator_writes)
    if served == OPERATOR_USER:  # in the cluster: the leader pod's own bound token, alone
        (pod,) = token_pods(scenario, user=served, name=slot)
        assert pod.startswith("agentrun-operator-"), pod


def test_worker_killed_on_the_node_ends_its_attempt_failed(
        scenario: Scenario, operator: OperatorProcess, worker_image: str,
        node: LocalNode) -> None:
    slot, first = one_attempt(scenario, image=worker_image, script=WORKS_ON)
    pod = wait_pod_phase(scenario, first, {"Running"})
    wait_renewed(scenario, first, times=2)
    assert scenario.slot(slot)["status"]["state"] == "Active"

    kill_on_node(container_pid(node, pod), pod_uid=pod["metadata"]["uid"])
    ended = wait_pod_phase(scenario, first, {"Succeeded", "Failed"})
    assert ended["status"]["phase"] == "Failed"
    assert terminated(ended)["exitCode"] == 137  # 128 + SIGKILL

    waiting = scenario.wait_state(slot, "RetryWait", timeout=60)["status"]
    assert (waiting["attempts"][-1]["outcome"], waiting["attempts"][-1]["exitCode"]) == (
        "Failed", 137)
    assert condition(waiting, "AwaitingReassignment") == "True"  # maxAttempts 1
    assert scenario.pods() == [first]
    assert status_writers_of(scenario, [first]) == {NODE_USER}


def test_the_examples_run_on_the_node(scenario: Scenario, operator: OperatorProcess,
                                      node: LocalNode) -> None:
    """``manifests/examples`` as the README applies them (in the test's namespace, the
    bindings' placeholder publish URL pointed at a test's effect owner), with the image
    ``make cluster`` tags: the research node's worker runs the example agent, which
    publishes its report once."""
    node.load_project_image()
    local = scenario.cluster.local
    assert local is not None and local.node_ip
    owner = EffectOwner(host=local.node_ip).start()
    objects = []
    for document in examples.rendered(scenario.cluster):
        if document["kind"] == "Namespace":
            continue
        document["metadata"]["namespace"] = scenario.namespace
        for subject in document.get("subjects", []):
            if subject["kind"] == "ServiceAccount":
                subject["namespace"] = scenario.namespace
        if "bindings.yaml" in document.get("data", {}):
            bindings = yaml.safe_load(document["data"]["bindings.yaml"])
            bindings["publish"]["url"] = owner.url
            document["data"]["bindings.yaml"] = yaml.safe_dump(bindings)
        objects.append(document)
    try:
        applied = scenario.cluster.kubectl("apply", "-f", "-",
                                           input="\n".join(json.dumps(o) for o in objects))
        assert applied.returncode == 0, applied.stderr
        slot = scenario.slot_name_eventually("research-report", "research")
        first = f"{slot}-1"
        pod = wait_pod_phase(scenario, first, {"Succeeded", "Failed"})
        events = agent_events(scenario, first)
        assert pod["status"]["phase"] == "Succeeded", events
        assert pod["spec"]["containers"][0]["image"] == PROJECT_DEV_REF
        assert (events[0]["event"], events[0]["slot"], events[0]["node"]) == (
            "started", slot, "research")
        assert events[-1]["event"] == "finished"
        uid = scenario.agentrun("research-report")["metadata"]["uid"]
        key = effects.idempotency_key(run_uid=uid, slot=slot, key="publish")
        assert owner.applied.get(key) == 1
    finally:
        owner.stop()
    assert status_writers_of(scenario, [first]) == {NODE_USER}
    (account,) = [o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"]
    renewer = f"system:serviceaccount:{scenario.namespace}:{account}"
    assert renewer in lease_renewers(scenario, first)
