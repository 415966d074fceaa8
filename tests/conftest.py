"""Session fixtures: a real Kubernetes API server for every integration test.

Which cluster, in this order:
0. ``AGENTRUN_TEST_CLUSTER`` set (by ``make test``'s driver,
   :mod:`tests.support.cluster.session`): the local control plane and node it started,
   attached through the file it names (:mod:`tests.support.cluster.handle`); this
   process never stops them.
1. ``AGENTRUN_TEST_KUBECONFIG`` set: that cluster, as its current context (admin);
   other users are reached through impersonation, so the tests run on any cluster.
2. ``--kind`` given and a Docker engine and kind available: a kind cluster through
   pytest-kind (the only choice with a kubelet, so tests marked ``kubelet`` run).
3. Otherwise: the local control plane of ``tests/support/cluster/localcluster.py`` and its
   node (``tests/support/cluster/localnode.py``: kubelet, containerd, kube-proxy), built from
   source, started once per session and stopped at its end, with the object store on the
   node (``tests/support/cluster/store.py``); with ``AGENTRUN_TEST_NO_KUBELET=1``, the
   control plane alone.

Tests marked ``kubelet`` need real pods: without a Ready node they FAIL, with the
reason, unless ``AGENTRUN_TEST_NO_KUBELET=1`` opts out (then they skip). CI never sets
it. On 1, ``AGENTRUN_TEST_KUBELET=1`` says the cluster has nodes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

import kubernetes
import pytest

from tests.support import parts
from tests.support.cluster import handle
from tests.support.cluster.clusters import Cluster, docker_and_kind_available
from tests.support.cluster.localnode import running
from tests.support.cluster.nodehost import NodeUnavailable

TENANT_LABEL = "agentrun.dev/tenant"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--kind", action="store_true", default=False,
                     help="run integration tests on a kind cluster (needs Docker and kind)")
    parser.addoption("--part", choices=parts.PARTS, default=None,
                     help="only one part of the suite (make test runs each in turn: "
                          "see tests/support/cluster/session.py)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.path).replace(os.sep, "/"):
            item.add_marker(pytest.mark.integration)
    part = config.getoption("--part")
    config.stash[parts.PART_DESELECTED] = frozenset()
    if part is not None:
        kept = [item for item in items if parts.part_of(item) == part]
        others = [item for item in items if parts.part_of(item) != part]
        config.stash[parts.PART_DESELECTED] = frozenset(str(item.path) for item in others)
        config.hook.pytest_deselected(items=others)
        items[:] = kept
    # Tests marked `last` read what the whole session did (the audit log): after the rest;
    # a module that stops the session's cluster (to check what stopping leaves) after them.
    items.sort(key=lambda item: (
        getattr(getattr(item, "module", None), "STOPS_THE_SESSION_CLUSTER", False),
        item.get_closest_marker("last") is not None))


NO_KUBELET = os.environ.get("AGENTRUN_TEST_NO_KUBELET") == "1"


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    attached = os.environ.get(handle.ENV)
    if attached:
        found = handle.attach(Path(attached))
        yield Cluster(kubeconfig=found.cluster.kubeconfig, kind="local",
                      has_kubelet=found.node is not None, local=found.cluster,
                      node=found.node, no_kubelet_reason=found.no_kubelet_reason,
                      owner=found.owner, prepared=True)
        return
    existing = os.environ.get("AGENTRUN_TEST_KUBECONFIG")
    if existing:
        yield Cluster(kubeconfig=Path(existing), kind="existing",
                      has_kubelet=os.environ.get("AGENTRUN_TEST_KUBELET") == "1",
                      no_kubelet_reason="AGENTRUN_TEST_KUBELET=1 is not set")
        return
    if request.config.getoption("--kind") and docker_and_kind_available():
        kind_cluster = request.getfixturevalue("kind_cluster")
        yield Cluster(kubeconfig=Path(kind_cluster.kubeconfig_path), kind="kind",
                      has_kubelet=True)
        return
    workdir = Path(tempfile.mkdtemp(prefix="agentrun-cluster-"))
    with contextlib.ExitStack() as stack:
        reason = "AGENTRUN_TEST_NO_KUBELET=1" if NO_KUBELET else ""
        try:
            local, node = stack.enter_context(running(workdir, node=not NO_KUBELET,
                                                      with_store=True))
        except NodeUnavailable as why:  # e.g. another session's node: the rest still runs
            reason = str(why)
            local, node = stack.enter_context(running(workdir, node=False))
        yield Cluster(kubeconfig=local.kubeconfig, kind="local", has_kubelet=node is not None,
                      local=local, node=node, no_kubelet_reason=reason,
                      shutdown=stack.close)
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(autouse=True)
def _require_kubelet(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("kubelet") is None:
        return
    cluster: Cluster = request.getfixturevalue("cluster")
    if cluster.has_kubelet:
        return
    message = (f"needs real pods (a Ready node); this {cluster.kind} cluster has none: "
               f"{cluster.no_kubelet_reason}")
    if NO_KUBELET:
        pytest.skip(message)
    request.node.stash[_NO_NODE] = True
    pytest.fail(message + " (AGENTRUN_TEST_NO_KUBELET=1 opts out)", pytrace=False)


_NO_NODE = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None],
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A ``kubelet`` test refused for want of a node is reported FAILED, not as an error."""
    report: pytest.TestReport = yield
    if report.when == "setup" and report.failed and item.stash.get(_NO_NODE, False):
        report.when = "call"
    return report


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

