"""A lost node explained: a worker pod that no kubelet will confirm gone, then the way out.

A Node object with no kubelet behind it (``Ready=Unknown``, as the node lifecycle
controller writes for a node that stopped reporting; a test taint keeps the scheduler's
other pods off it) stands for a node that died. The LaunchSpec's pods name a scheduler
nobody serves, and the test binds them as a scheduler would: attempt 1's to the lost
node, where it never starts. Deleted (as the taint eviction of a lost node deletes its
pods), it stays Terminating: only a kubelet could confirm it gone. Covers, on the real
API server, controllers and node:

- the slot says why it waits (condition ``NodeLost`` True, reason ``NodeNotReady``,
  Warning Event ``NodeLost``): the pod, the node, since when (the node's own Ready
  transition time), and the two ways out with their risk; no replacement starts;
- the person's way out, as the condition says it: the ``out-of-service`` taint; the pod
  garbage collector then deletes the pod, attempt 1 ends, ``NodeLost`` turns False
  (``PodGone``) and the replacement proceeds by itself: attempt 2, bound to the real
  node, runs and the slot succeeds.

A pod on a node that died while it ran gets here the same way: its Lease expires, the
operator deletes it, and it stays Terminating; the test deletes it at once instead of
waiting for a start deadline.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from tests.support.actors.operators import OperatorProcess
from tests.support.actors.workers import grant_worker_role, real_launch_spec
from tests.support.cluster.clusters import Cluster
from tests.support.cluster.localcluster import NODE_NAME
from tests.support.cluster.localnode import LocalNode
from tests.support.plays.scenarios import HAND_PLAYED, Scenario
from tests.support.waiting import wait_for, wait_for_default_service_account

pytestmark = pytest.mark.kubelet

TEST_TAINT = "agentrun.dev/lost-node-test"
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"


@pytest.fixture
def lost_node(cluster: Cluster, namespace: str) -> Iterator[str]:
    """A Node with no kubelet behind it, NotReady (Ready=Unknown) since now."""
    name = f"lost-{namespace}"[:63]
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {"taints": [{"key": TEST_TAINT, "effect": "NoSchedule"}]}}
    made = cluster.kubectl("create", "-f", "-", input=json.dumps(body))
    assert made.returncode == 0, made.stderr
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {"status": {"conditions": [{
        "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.", "lastHeartbeatTime": now,
        "lastTransitionTime": now}]}}
    patched = cluster.kubectl("patch", "node", name, "--subresource=status", "--type=merge",
                              "-p", json.dumps(status))
    assert patched.returncode == 0, patched.stderr
    yield name
    cluster.kubectl("delete", "node", name, "--ignore-not-found", "--wait=false")


def bind(cluster: Cluster, scenario: Scenario, pod: str, *, node: str) -> None:
    """Bind ``pod`` to ``node`` as a scheduler does (a Binding)."""
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
    bound = cluster.kubectl("-n", scenario.namespace, "create", "-f", "-",
                            input=json.dumps(body))
    assert bound.returncode == 0, bound.stderr


def test_a_pod_on_a_lost_node_is_explained_and_the_taint_lets_the_slot_go_on(
        scenario: Scenario, operator: OperatorProcess, cluster: Cluster, node: LocalNode,
        worker_image: str, lost_node: str) -> None:
    grant_worker_role(scenario)
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)
    scenario.configs()
    real_launch_spec(scenario, "cpu-workers", classes=["cpu"], image=worker_image,
                     script="print('attempt done')",
                     pod={"schedulerName": HAND_PLAYED,
                          "tolerations": [{"key": TEST_TAINT, "operator": "Exists"}]})
    scenario.run("study", max_attempts=3, initial_backoff=0)
    slot = scenario.slot_name_eventually("study", "research")
    first, second = f"{slot}-1", f"{slot}-2"
    wait_for(lambda: scenario.pod(first), timeout=60, message=f"pod {first}")
    bind(cluster, scenario, first, node=lost_node)
    scenario.wait_state(slot, "Active")
    deleted = cluster.kubectl("-n", scenario.namespace, "delete", "pod", first, "--wait=false")
    assert deleted.returncode == 0, deleted.stderr

    shown = scenario.wait_condition(slot, "NodeLost", "True", timeout=60)
    found = json.loads(cluster.kubectl("get", "node", lost_node, "-o", "json").stdout)
    since = next(c["lastTransitionTime"] for c in found["status"]["conditions"]
                 if c["type"] == "Ready")
    message = shown["message"]
    assert shown["reason"] == "NodeNotReady", shown
    assert f"attempt {first} is being deleted on node {lost_node}" in message
    assert f"Ready=Unknown since {since}" in message
    assert (f"kubectl taint node {lost_node} {OUT_OF_SERVICE}=nodeshutdown:NoExecute"
            in message)
    assert (f"kubectl delete pod {first} -n {scenario.namespace} --force --grace-period=0"
            in message)
    assert "still runs its workers" in message  # the risk, said
    assert wait_for(lambda: scenario.events("NodeLost"), timeout=30,
                    message="the NodeLost Event")[0] == message
    now = scenario.slot(slot)["status"]
    assert now["state"] == "Active" and now["attemptCount"] == 1
    assert scenario.pod(second) is None and scenario.lease(second) is None  # no replacement
    stuck = scenario.pod(first)
    assert stuck is not None and stuck["metadata"].get("deletionTimestamp")

    tainted = cluster.kubectl("taint", "node", lost_node,
                              f"{OUT_OF_SERVICE}=nodeshutdown:NoExecute")
    assert tainted.returncode == 0, tainted.stderr
    # The pod garbage collector looks every 20 s.
    wait_for(lambda: scenario.pod(first) is None, timeout=90,
             message=f"pod {first} deleted by the pod garbage collector")
    gone = scenario.wait_condition(slot, "NodeLost", "False", timeout=60)
    assert gone["reason"] == "PodGone", gone
    wait_for(lambda: scenario.pod(second), timeout=60, message=f"the replacement {second}")
    bind(cluster, scenario, second, node=NODE_NAME)
    done = scenario.wait_state(slot, "Succeeded", timeout=120)["status"]
    assert [a["number"] for a in done["attempts"]] == [1, 2]
    # Lost, or Failed when the collector's last status write (phase Failed) was read
    # before the pod's removal, or StartTimeout past the start deadline: never a success.
    assert done["attempts"][0]["outcome"] in ("Lost", "Failed", "StartTimeout"), done
