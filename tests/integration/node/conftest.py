"""Fixtures for tests on the real node: the node itself and the image its pods run.

Pods here run the project's own image (``tests/support/cluster/images.py``), imported into the
node's containerd once per session; nothing is ever pulled (``imagePullPolicy: Never``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import pytest

from tests.integration.operator import conftest as operator_fixtures
from tests.support.actors.effectowner import EffectOwner
from tests.support.actors.workers import node_address
from tests.support.cluster.clusters import Cluster
from tests.support.cluster.images import project_image
from tests.support.cluster.localnode import LocalNode
from tests.support.plays.scenarios import Scenario
from tests.support.waiting import wait_for, wait_for_default_service_account

# The operator's fixtures (RBAC installed, a Scenario, the operator as a subprocess), for
# the tests here whose workers are served by it.
installed = operator_fixtures.installed
scenario = operator_fixtures.scenario
operator = operator_fixtures.operator

POD_TIMEOUT = 90.0


@pytest.fixture(scope="session")
def node(cluster: Cluster) -> LocalNode:
    if cluster.node is None:
        # opted out: skip, as the kubelet marker's own check would
        if os.environ.get("AGENTRUN_TEST_NO_KUBELET") == "1":
            pytest.skip(f"needs the local node: {cluster.no_kubelet_reason}")
        pytest.fail(f"needs the local node: {cluster.no_kubelet_reason}", pytrace=False)
    return cluster.node


@pytest.fixture(scope="session")
def worker_image(node: LocalNode) -> str:
    """The project's image, loaded into the node; its reference for a pod's ``image``."""
    archive = project_image()
    node.load_image(archive.path)
    ref: str = archive.ref
    return ref


@pytest.fixture
def run_pod(cluster: Cluster, namespace: str,
            worker_image: str) -> Callable[..., dict[str, Any]]:
    """Create a pod running ``command`` in the worker image; return it once created."""
    core = kubernetes.client.CoreV1Api(cluster.client())
    wait_for_default_service_account(cluster.client(), namespace)

    def create(name: str, command: list[str]) -> dict[str, Any]:
        body: Any = {"metadata": {"name": name},
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "main", "image": worker_image,
                                         "imagePullPolicy": "Never",
                                         "command": command}]}}
        created: dict[str, Any] = core.api_client.sanitize_for_serialization(
            core.create_namespaced_pod(namespace, body))
        return created

    return create


def wait_phase(cluster: Cluster, namespace: str, name: str, phases: set[str], *,
               timeout: float = POD_TIMEOUT) -> dict[str, Any]:
    """The pod once its phase is one of ``phases``; it fails early on an unexpected end."""
    core = kubernetes.client.CoreV1Api(cluster.client())

    def check() -> dict[str, Any] | None:
        pod: dict[str, Any] = core.api_client.sanitize_for_serialization(
            core.read_namespaced_pod(name, namespace))
        phase = pod.get("status", {}).get("phase")
        if phase in phases:
            return pod
        return None

    result: dict[str, Any] = wait_for(check, timeout=timeout,
                                      message=f"pod {name} in phase {sorted(phases)}")
    return result


@pytest.fixture
def owner(scenario: Scenario) -> Iterator[EffectOwner]:
    """A test's effect owner (tests/support/actors/effectowner.py) where the node's pods reach the
    host: the node bridge's address. Its request log is printed at the end."""
    started = EffectOwner(host=node_address(scenario)).start()
    yield started
    started.stop()
    print(f"owner requests: {started.requests}")
