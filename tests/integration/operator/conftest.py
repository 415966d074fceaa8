"""Fixtures for the operator's integration tests: the operator installed and running.

``installed`` applies the generated RBAC, the local binding of the ``operator`` user to
the operator's role and the actor-stamping admission policy once per session (the CRDs
come from ``crds``), and has the stamping epoch minted; ``operator`` starts the operator
as a subprocess watching only the test's namespace, as the cluster's ``operator`` user, so
it has exactly those rights; ``process`` is that operator not yet started, for the crash
cases to start at a point.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest
from clusters import Cluster
from operators import OperatorProcess, install_for_tests
from scenarios import Scenario
from waiting import wait_for, wait_for_default_service_account

MANIFESTS = Path(__file__).resolve().parents[3] / "manifests"
VALIDATING = MANIFESTS / "admission" / "validating.yaml"
ANN = "agentrun.dev/"


@pytest.fixture(scope="session")
def installed(cluster: Cluster, crds: list[str]) -> None:
    install_for_tests(cluster)


@pytest.fixture
def scenario(cluster: Cluster, namespace: str, installed: None) -> Scenario:
    return Scenario(cluster=cluster, namespace=namespace)


@pytest.fixture
def operator(cluster: Cluster, namespace: str, installed: None,
             tmp_path: Path) -> Iterator[OperatorProcess]:
    process = OperatorProcess(cluster=cluster, namespace=namespace,
                              log=tmp_path / "operator.log").start()
    yield process
    process.stop()
    print(f"--- operator log (tail) ---\n{process.tail(60)}")


@pytest.fixture
def validating(cluster: Cluster, installed: None) -> Iterator[None]:
    """The shipped validating policies, in force for one test (cluster-wide: ``serial``)."""
    applied = cluster.kubectl("apply", "--server-side", "-f", str(VALIDATING))
    assert applied.returncode == 0, applied.stderr
    probe = json.dumps({
        "apiVersion": "agentrun.dev/v1alpha1", "kind": "Slot",
        "metadata": {"name": "probe-00000000", "namespace": "default",
                     "annotations": {f"{ANN}hold-id": "probe"}},
        "spec": {"run": "probe", "node": "probe", "workerClass": "cpu"}})

    def enforced() -> bool:
        result = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=probe)
        return result.returncode != 0 and f"{ANN}hold-reason is required" in result.stderr
    wait_for(enforced, timeout=30, message="the validating policies in force")
    yield
    removed = cluster.kubectl("delete", "--ignore-not-found", "-f", str(VALIDATING))
    assert removed.returncode == 0, removed.stderr


@pytest.fixture
def process(cluster: Cluster, namespace: str, installed: None, tmp_path: Path,
            api_client: kubernetes.client.ApiClient) -> Iterator[OperatorProcess]:
    """The operator, not started: each case starts it with its crash point."""
    wait_for_default_service_account(api_client, namespace)
    operator = OperatorProcess(cluster=cluster, namespace=namespace,
                               log=tmp_path / "operator.log")
    yield operator
    operator.stop()
    print(f"--- operator log (tail) ---\n{operator.tail(40)}")
