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


# A policy applied after the shipped ones, refusing one ConfigMap name: the API server
# compiles every policy and binding its informers hold into one snapshot, and each informer
# sees objects in the order they were written, so once the canary is in force every policy
# written before it is too (and once it is gone after them, they are gone).
CANARY = "agentrun-test-canary"
CANARY_POLICIES = [
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
     "metadata": {"name": CANARY},
     "spec": {"failurePolicy": "Fail",
              "matchConstraints": {"resourceRules": [{
                  "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                  "resources": ["configmaps"]}]},
              "validations": [{"expression": f"object.metadata.name != '{CANARY}'",
                               "message": f"{CANARY} in force"}]}},
    {"apiVersion": "admissionregistration.k8s.io/v1",
     "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": CANARY},
     "spec": {"policyName": CANARY, "validationActions": ["Deny"]}}]


def canary_enforced(cluster: Cluster) -> bool:
    """Whether a dry-run create of the canary's ConfigMap is refused by the canary."""
    probe = json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": CANARY, "namespace": "default"}})
    result = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=probe)
    if result.returncode == 0:
        return False
    assert f"{CANARY} in force" in result.stderr, result.stderr  # no other refusal
    return True


@pytest.fixture
def validating(cluster: Cluster, installed: None) -> Iterator[None]:
    """The shipped validating policies, in force for one test (cluster-wide: ``serial``):
    applied, then the canary; yielded once the canary refuses, so all of them are loaded."""
    applied = cluster.kubectl("apply", "--server-side", "-f", str(VALIDATING))
    assert applied.returncode == 0, applied.stderr
    canary = cluster.kubectl("apply", "--server-side", "-f", "-",
                             input=json.dumps({"apiVersion": "v1", "kind": "List",
                                               "items": CANARY_POLICIES}))
    assert canary.returncode == 0, canary.stderr
    wait_for(lambda: canary_enforced(cluster), timeout=30,
             message="the validating policies in force")
    yield
    removed = cluster.kubectl("delete", "--ignore-not-found", "-f", str(VALIDATING))
    assert removed.returncode == 0, removed.stderr
    removed = cluster.kubectl("delete", "--ignore-not-found",
                              "validatingadmissionpolicybinding,validatingadmissionpolicy",
                              CANARY)
    assert removed.returncode == 0, removed.stderr
    wait_for(lambda: not canary_enforced(cluster), timeout=30,
             message="the validating policies no longer in force")


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
