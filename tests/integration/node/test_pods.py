"""Real pods on the local node: they run, exit, log, exec and reach the API server.

What the node must do for agentrun's workers: run the project's image, let a container's
own exit end the pod (``Succeeded``/``Failed``, written by the kubelet and no one else),
serve ``kubectl logs``/``exec`` through the API server's kubelet client certificate, and
give the pod the ``kubernetes`` Service with its own service-account token.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable
from typing import Any

import kubernetes
import pytest

from tests.support.cluster.audit import writes
from tests.support.cluster.clusters import Cluster
from tests.support.cluster.localcluster import NODE_NAME
from tests.support.cluster.nodeconfig import NO_REGISTRY
from tests.support.cluster.nodehost import SERVICE_RANGE
from tests.support.waiting import wait_for

from .conftest import wait_phase

pytestmark = pytest.mark.kubelet
NODE_USER = f"system:node:{NODE_NAME}"


def status_writers(cluster: Cluster, namespace: str, pod: str) -> set[str]:
    assert cluster.audit_log is not None
    return {w.user for w in writes(cluster.audit_log, namespace=namespace)
            if w.resource == "pods" and w.subresource == "status" and w.name == pod}


def test_pod_runs_to_succeeded_and_only_the_node_writes_its_status(
        cluster: Cluster, namespace: str, run_pod: Callable[..., dict[str, Any]]) -> None:
    run_pod("hello", ["python3", "-c", "print('hello from a real pod')"])
    pod = wait_phase(cluster, namespace, "hello", {"Succeeded", "Failed"})
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["spec"]["nodeName"] == NODE_NAME
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0
    logs = cluster.kubectl("logs", "-n", namespace, "hello")
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.strip() == "hello from a real pod"
    writers = wait_for(lambda: status_writers(cluster, namespace, "hello"), timeout=10,
                       message="pods/status writes of pod hello in the audit log")
    assert writers == {NODE_USER}


def test_container_exiting_non_zero_ends_the_pod_failed(
        cluster: Cluster, namespace: str, run_pod: Callable[..., dict[str, Any]]) -> None:
    run_pod("crash", ["python3", "-c", "import sys; print('giving up'); sys.exit(3)"])
    pod = wait_phase(cluster, namespace, "crash", {"Succeeded", "Failed"})
    assert pod["status"]["phase"] == "Failed"
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 3
    assert terminated["reason"] == "Error"
    writers = wait_for(lambda: status_writers(cluster, namespace, "crash"), timeout=10,
                       message="pods/status writes of pod crash in the audit log")
    assert writers == {NODE_USER}


def test_exec_and_the_pods_routes_stay_on_the_machine(
        cluster: Cluster, namespace: str, run_pod: Callable[..., dict[str, Any]]) -> None:
    # The container's own process waits; the test waits on the pod's phase.
    run_pod("idle", ["python3", "-c", "import time; time.sleep(600)"])
    wait_phase(cluster, namespace, "idle", {"Running"})
    assert cluster.node is not None
    routes = cluster.kubectl("exec", "-n", namespace, "idle", "--", "cat", "/proc/net/route")
    assert routes.returncode == 0, routes.stderr
    destinations = {route_destination(line) for line in routes.stdout.splitlines()[1:]}
    network = cluster.node.network
    assert destinations == {network.subnet, SERVICE_RANGE}, routes.stdout
    route6 = cluster.kubectl("exec", "-n", namespace, "idle", "--", "cat",
                             "/proc/net/ipv6_route")
    assert route6.returncode == 0, route6.stderr
    defaults = [line for line in route6.stdout.splitlines()
                if line.split()[:2] == ["0" * 32, "00"] and line.split()[-1] != "lo"]
    assert defaults == [], route6.stdout


def route_destination(line: str) -> ipaddress.IPv4Network:
    """The destination of a /proc/net/route line (little-endian hex address and mask)."""
    fields = line.split()
    address, mask = (ipaddress.IPv4Address(int.from_bytes(bytes.fromhex(f), "little"))
                     for f in (fields[1], fields[7]))
    return ipaddress.IPv4Network(f"{address}/{mask}")


def test_pod_reaches_the_api_server_with_in_cluster_config(
        cluster: Cluster, namespace: str, run_pod: Callable[..., dict[str, Any]]) -> None:
    script = (
        "import json, os, kubernetes as k\n"
        "k.config.load_incluster_config()\n"
        "review = k.client.AuthenticationV1Api().create_self_subject_review("
        "{'apiVersion': 'authentication.k8s.io/v1', 'kind': 'SelfSubjectReview'})\n"
        "info = review.status.user_info\n"
        "print(json.dumps({'user': info.username, 'extra': info.extra,"
        " 'host': os.environ['KUBERNETES_SERVICE_HOST']}))\n"
    )
    run_pod("whoami", ["python3", "-c", script])
    pod = wait_phase(cluster, namespace, "whoami", {"Succeeded", "Failed"})
    logs = cluster.kubectl("logs", "-n", namespace, "whoami")
    assert pod["status"]["phase"] == "Succeeded", logs.stdout + logs.stderr
    answer = json.loads(logs.stdout.strip().splitlines()[-1])
    assert answer["user"] == f"system:serviceaccount:{namespace}:default"
    assert answer["extra"]["authentication.kubernetes.io/pod-name"] == ["whoami"]
    assert answer["host"] == "10.96.0.1"


def test_a_pull_goes_to_loopback_only(cluster: Cluster, namespace: str,
                                      worker_image: str) -> None:
    """Nothing can be pulled here; an attempt must not leave the machine (no DNS either)."""
    core = kubernetes.client.CoreV1Api(cluster.client())
    body: Any = {"metadata": {"name": "pull"},
                 "spec": {"restartPolicy": "Never", "containers": [
                     {"name": "main", "image": "registry.invalid/agentrun/absent:1",
                      "imagePullPolicy": "IfNotPresent"}]}}
    core.create_namespaced_pod(namespace, body)

    def pull_failure() -> str | None:
        events = core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=pull,reason=Failed")
        messages = [e.message for e in events.items if "pull" in (e.message or "").lower()]
        return messages[0] if messages else None

    message = wait_for(pull_failure, timeout=60, message="the pull's Failed event")
    assert NO_REGISTRY.removeprefix("https://") in message, message
