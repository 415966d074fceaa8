"""Session fixtures: a real Kubernetes API server for every integration test.

Which cluster, in this order:
1. ``AGENTRUN_TEST_KUBECONFIG`` set: that cluster, as its current context (admin);
   other users are reached through impersonation, so the tests run on any cluster.
2. ``--kind`` given and a Docker engine and kind available: a kind cluster through
   pytest-kind (the only choice with a kubelet, so tests marked ``kubelet`` run).
3. Otherwise: the local control plane of ``tests/support/localcluster.py``, built from
   source, started once per session and stopped at its end.

Tests marked ``kubelet`` need real pods and skip with the reason on 1 (unless
``AGENTRUN_TEST_KUBELET=1``) and 3.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest
from clusters import Cluster, docker_and_kind_available
from localcluster import LocalCluster, build

TENANT_LABEL = "agentrun.dev/tenant"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--kind", action="store_true", default=False,
                     help="run integration tests on a kind cluster (needs Docker and kind)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.path).replace(os.sep, "/"):
            item.add_marker(pytest.mark.integration)
    # Tests marked `last` read what the whole session did (the audit log): after the rest;
    # a module that stops the session's cluster (to check what stopping leaves) after them.
    items.sort(key=lambda item: (
        getattr(getattr(item, "module", None), "STOPS_THE_SESSION_CLUSTER", False),
        item.get_closest_marker("last") is not None))


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    existing = os.environ.get("AGENTRUN_TEST_KUBECONFIG")
    if existing:
        yield Cluster(kubeconfig=Path(existing), kind="existing",
                      has_kubelet=os.environ.get("AGENTRUN_TEST_KUBELET") == "1")
        return
    if request.config.getoption("--kind") and docker_and_kind_available():
        kind_cluster = request.getfixturevalue("kind_cluster")
        yield Cluster(kubeconfig=Path(kind_cluster.kubeconfig_path), kind="kind",
                      has_kubelet=True)
        return
    workdir = Path(tempfile.mkdtemp(prefix="agentrun-cluster-"))
    local = LocalCluster(workdir=workdir, binary=build())
    local.start()
    try:
        yield Cluster(kubeconfig=local.kubeconfig, kind="local", has_kubelet=False, local=local)
    finally:
        local.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(autouse=True)
def _skip_without_kubelet(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("kubelet") is None:
        return
    cluster: Cluster = request.getfixturevalue("cluster")
    if not cluster.has_kubelet:
        pytest.skip(f"needs real pods (a kubelet); this {cluster.kind} cluster has none: "
                    "run with --kind where Docker and kind exist")


@pytest.fixture(scope="session")
def kubeconfig(cluster: Cluster) -> Path:
    return cluster.kubeconfig


@pytest.fixture(scope="session")
def api_client(cluster: Cluster) -> kubernetes.client.ApiClient:
    return cluster.client("admin")


@pytest.fixture
def namespace(api_client: kubernetes.client.ApiClient) -> Iterator[str]:
    """A fresh namespace, labelled as its own tenant; deleted (not awaited) after the test."""
    core = kubernetes.client.CoreV1Api(api_client)
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name, "labels": {TENANT_LABEL: name}}})
    yield name
    try:
        core.delete_namespace(name)
    except kubernetes.client.ApiException as error:
        if error.status != 404:  # a test may have deleted it itself
            raise

