"""Fixtures for the operator's integration tests: the operator installed and running.

``installed`` applies the generated RBAC, the local binding of the ``operator`` user to
the operator's role and the actor-stamping admission policy once per session (the CRDs
come from ``crds``), and has the stamping epoch minted; ``operator`` starts the operator
as a subprocess watching only the test's namespace, as the cluster's ``operator`` user, so
it has exactly those rights; ``process`` is that operator not yet started, for the crash
cases to start at a point.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest

from tests.support.actors.operators import OperatorProcess, install_for_tests
from tests.support.cluster.clusters import Cluster
from tests.support.plays import canaries
from tests.support.plays.scenarios import Scenario
from tests.support.waiting import wait_for_default_service_account

MANIFESTS = Path(__file__).resolve().parents[3] / "manifests"
VALIDATING = MANIFESTS / "admission" / "validating.yaml"


@pytest.fixture(scope="session")
def installed(cluster: Cluster, crds: list[str]) -> None:
    if not cluster.prepared:  # else make test's driver installed it, before its workers
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
    """The shipped validating policies, in force for one test (cluster-wide: ``serial``):
    applied, then the canary; yielded once the canary refuses, so all of them are loaded."""
    applied = cluster.kubectl("apply", "--server-side", "-f", str(VALIDATING))
    assert applied.returncode == 0, applied.stderr
    canaries.apply(cluster, canaries.REFUSING, what="the validating policies")
    yield
    removed = cluster.kubectl("delete", "--ignore-not-found", "-f", str(VALIDATING))
    assert removed.returncode == 0, removed.stderr
    canaries.remove(cluster, canaries.REFUSING, what="the validating policies")


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
