"""The Helm chart installed in a namespace of its own choosing, not ``agentrun-system``.

On the suite's control plane and node, like ``test_chart.py``: the project image loaded
into the node, ``watchNamespaces`` the test's namespace only. First the install guard,
with the cluster's real lookups: a tenant's namespace (the test's own, labelled
``agentrun.dev/tenant``) is refused before anything is made. Then the release in
``agentrun-ops``: its two pods Ready, one leading on the Lease there, the fencing token
there naming it, the stamping epoch minted there (``agentrun-operator stamping`` in the
pod finds it through ``$POD_NAMESPACE``), the history API Available through the Service
there; the recovery trace played (commands stamped by admission with the epoch in
``agentrun-ops``, the operator's writes admitted by the fence as
``system:serviceaccount:agentrun-ops:agentrun-operator``, the claims accepted). A second
release in another namespace is refused, naming ``agentrun-ops``; an upgrade of the same
release passes. Finally ``helm uninstall``; the namespace is deleted, and the session's
install (kubectl, ``agentrun-system``) restored.

The session's ``installed`` fixture applied the RBAC and the admission policies with
kubectl in ``agentrun-system``, so the install takes those cluster-wide objects over
(``--take-ownership``) and points them at ``agentrun-ops``; :class:`helm.Release` puts
them back after the uninstall (``operators.install_for_tests``). Serial: the chart's
admission policies are cluster-wide while it is installed.

Run alone: ``.venv/bin/pytest -q -p no:cacheprovider
tests/integration/node/test_chart_namespace.py`` (it starts the local cluster and node
unless ``AGENTRUN_TEST_CLUSTER`` names running ones).
"""

from __future__ import annotations

import json
import subprocess

import kubernetes
import pytest

from agentrun import manifests
from agentrun.api import names
from agentrun.core.policies import fencing
from tests.support import historyapi
from tests.support.actors.operators import install_for_tests
from tests.support.cluster.clusters import Cluster
from tests.support.cluster.helm import CHART, RELEASE, Release, helm_binary
from tests.support.plays.recovery import play_recovery_trace
from tests.support.plays.scenarios import Scenario
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.kubelet, pytest.mark.serial]
OPS = "agentrun-ops"
SECOND = "agentrun-ops-second"


def helm(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm_binary()), "--kubeconfig", str(cluster.kubeconfig), *args],
                          capture_output=True, text=True, check=False, timeout=300)


def refused_install(cluster: Cluster, *, release: str, namespace: str, image: str) -> str:
    """``helm install`` that must fail; its stderr. Nothing of it is left (no release)."""
    result = helm(cluster, "install", release, str(CHART), "--namespace", namespace,
                  "--create-namespace", "--set-string", f"image.repository={image}")
    assert result.returncode != 0, result.stdout
    listed = helm(cluster, "list", "--all-namespaces", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert release not in {r["name"] for r in json.loads(listed.stdout)}
    return result.stderr


def secret(core: kubernetes.client.CoreV1Api, name: str) -> dict[str, object] | None:
    try:
        found: dict[str, object] = core.api_client.sanitize_for_serialization(
            core.read_namespaced_secret(name, OPS))
    except kubernetes.client.ApiException as error:
        if error.status == 404:
            return None
        raise
    return found


def test_the_chart_runs_the_operator_in_a_namespace_of_its_own(
        cluster: Cluster, namespace: str, scenario: Scenario, worker_image: str) -> None:
    api = cluster.client()
    core = kubernetes.client.CoreV1Api(api)
    # A tenant's namespace: refused by the guard's lookup of the Namespace.
    said = refused_install(cluster, release="agentrun-in-a-tenant", namespace=namespace,
                           image=worker_image.rpartition(":")[0])
    assert f"cannot be installed in the namespace {namespace}: it is a tenant's" in said, said

    release = Release(cluster.kubeconfig, image=worker_image, namespaces=[namespace],
                      take_ownership=True, namespace=OPS,
                      restore=lambda: install_for_tests(cluster))
    try:
        with release:
            pods = release.wait_ready()
            assert len(pods) == 2 and {p["metadata"]["namespace"] for p in pods} == {OPS}
            leader = wait_for(release.leader, timeout=60, message="a replica leading")
            assert leader in {p["metadata"]["name"] for p in pods}
            # The fencing token, in the release's namespace, names the leader.
            token = wait_for(lambda: secret(core, names.LEADER_SECRET), timeout=30,
                             message=f"the fencing token in {OPS}")
            assert fencing.token_names(token)[0] == leader
            # The stamping epoch, minted by the leader in its namespace; the README's wait,
            # run in the pod, finds it there through $POD_NAMESPACE.
            stamped = cluster.kubectl("-n", OPS, "exec", "deploy/agentrun-operator", "--",
                                      "agentrun-operator", "stamping")
            assert stamped.returncode == 0, stamped.stdout + stamped.stderr
            assert secret(core, names.STAMPING_SECRET) is not None
            # The cluster-wide objects now name the release's namespace.
            binding = kubernetes.client.RbacAuthorizationV1Api(api).read_cluster_role_binding(
                manifests.OPERATOR_ROLE)
            assert [(s.name, s.namespace) for s in binding.subjects or []] == [
                (names.OPERATOR_APP, OPS)]
            fence = cluster.kubectl("get", "validatingadmissionpolicy", names.FENCE_POLICY,
                                    "-o", "json")
            assert fencing.operator_user(namespace=OPS) in fence.stdout, fence.stdout[:400]
            # The history API, through the Service in agentrun-ops, with the certificate
            # the leader made there.
            historyapi.wait_available(cluster)
            assert secret(core, names.HISTORY_TLS_SECRET) is not None

            # Commands stamped, writes fenced in, claims accepted: the recovery trace.
            slot = play_recovery_trace(scenario)  # asserts each step
            assert len(scenario.slot(slot)["status"]["attempts"]) == 2  # both claims made

            # A second release, elsewhere: refused, naming where the first one is.
            said = refused_install(cluster, release="agentrun-second", namespace=SECOND,
                                   image=worker_image.rpartition(":")[0])
            assert (f"already installed in this cluster by the release {RELEASE} in the "
                    f"namespace {OPS}") in said, said
            assert SECOND not in {n.metadata.name for n in core.list_namespace().items
                                  if n.metadata is not None}
            # The same release upgraded: the guard lets it through.
            release.upgrade({"logLevel": "debug"})
            assert len(release.wait_ready()) == 2
            assert wait_for(release.leader, timeout=60, message="a replica leading")
        assert release.pods() == []
    finally:
        try:
            core.delete_namespace(OPS)
        except kubernetes.client.ApiException as error:
            if error.status != 404:
                raise
