"""The chart in any namespace, rendered by Helm without a cluster: every namespaced object
in the release's namespace, the admission policies naming it, and the install guard's
refusals: ``default`` and the control plane's namespaces by name, a tenant's namespace and
a second release decided from what ``lookup`` finds.

The refusals by name need no cluster: the real chart is rendered into each. ``helm
template`` has no cluster, so ``lookup`` finds nothing there and the rest of the guard
passes; its decisions are rendered here from a copy of the chart's guard whose two lookups
read values instead (each replacement asserted, so a changed guard fails here rather than
go untested). The real lookups run in ``tests/integration/node/test_chart.py``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentrun import bundledstore, workload
from agentrun.api import names
from agentrun.core.policies import fencing
from agentrun.kube import ownnamespace
from tests.support.cluster.helm import CHART, RELEASE, helm_binary

NAMESPACE = "agentrun-ops"
ALL_ON = ["--set", "networkPolicy.enabled=true", "--set", "monitoring.serviceMonitor.enabled=true",
          "--set", "monitoring.prometheusRule.enabled=true",
          "--set", "monitoring.dashboard.enabled=true"]
# The one object the chart makes outside the release's namespace: the front proxy's CA
# reader, bound where that CA is (kube-system).
ELSEWHERE = {("RoleBinding", "agentrun-operator-authentication-reader"): "kube-system"}


def helm(*args: str, chart: Path = CHART) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm_binary()), "template", RELEASE, str(chart), *args],
                          capture_output=True, text=True, check=False, timeout=120)


def render(namespace: str, *args: str) -> list[dict[str, Any]]:
    result = helm("--namespace", namespace, *ALL_ON, *args)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def named(documents: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def test_every_namespaced_object_is_in_the_release_namespace() -> None:
    documents = render(NAMESPACE)
    namespaced = [d for d in documents if "namespace" in d["metadata"]]
    assert {d["kind"] for d in namespaced} >= {
        "ServiceAccount", "Deployment", "PodDisruptionBudget", "Service", "Role",
        "RoleBinding", "PersistentVolumeClaim", "NetworkPolicy", "ServiceMonitor",
        "PrometheusRule", "ConfigMap", "Pod"}
    for document in namespaced:
        where = ELSEWHERE.get((document["kind"], document["metadata"]["name"]), NAMESPACE)
        assert document["metadata"]["namespace"] == where, document["metadata"]
    assert not any(d["kind"] == "Namespace" for d in documents)  # --create-namespace's
    # Nothing names the plain manifests' namespace any more.
    assert names.OPERATOR_NAMESPACE not in json.dumps(documents)


def test_what_points_at_the_namespace_names_the_release_namespace() -> None:
    documents = render(NAMESPACE)
    binding = named(documents, "ClusterRoleBinding", names.OPERATOR_APP)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": names.OPERATOR_APP,
                                    "namespace": NAMESPACE}]
    reader = named(documents, "RoleBinding", "agentrun-operator-authentication-reader")
    assert reader["subjects"][0]["namespace"] == NAMESPACE
    service = named(documents, "APIService", names.HISTORY_APISERVICE)["spec"]["service"]
    assert (service["name"], service["namespace"]) == (names.HISTORY_SERVICE, NAMESPACE)
    monitor = named(documents, "ServiceMonitor", names.OPERATOR_APP)
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (container,) = named(documents, "Deployment", names.OPERATOR_APP)["spec"]["template"][
        "spec"]["containers"]
    args = container["args"]
    assert args[args.index("--journal-endpoint") + 1] == bundledstore.store_endpoint(
        namespace=NAMESPACE) == f"http://agentrun-store.{NAMESPACE}.svc:8333"
    # The pod learns its namespace, where it keeps its Lease and Secrets.
    assert workload.POD_NAMESPACE_ENV in container["env"]


def test_the_admission_policies_name_the_release_namespace() -> None:
    documents = render(NAMESPACE)
    fence = named(documents, "ValidatingAdmissionPolicy", names.FENCE_POLICY)
    conditions = {c["name"]: c["expression"] for c in fence["spec"]["matchConditions"]}
    assert conditions["the-operator"] == (
        f"request.userInfo.username == '{fencing.operator_user(namespace=NAMESPACE)}'")
    assert "system:serviceaccount:agentrun-ops:agentrun-operator" in conditions["the-operator"]
    assert f"request.namespace == '{NAMESPACE}'" in conditions["not-the-election"]
    variables = {v["name"]: v["expression"] for v in fence["spec"]["variables"]}
    assert f"request.namespace == '{NAMESPACE}'" in variables["token"]
    assert named(documents, "ValidatingAdmissionPolicyBinding", names.FENCE_POLICY)[
        "spec"]["paramRef"]["namespace"] == NAMESPACE
    assert named(documents, "MutatingAdmissionPolicyBinding", names.STAMP_POLICY)[
        "spec"]["paramRef"] == {"name": names.STAMPING_SECRET, "namespace": NAMESPACE,
                                "parameterNotFoundAction": "Deny"}
    # Exactly what the operator compares the live objects with, in its namespace.
    assert fence["spec"] == fencing.fence_policy(namespace=NAMESPACE)[0]["spec"]


def swap(node: Any, old: str, new: str) -> Any:
    """``node`` with every string's ``old`` replaced by ``new``."""
    if isinstance(node, dict):
        return {key: swap(value, old, new) for key, value in node.items()}
    if isinstance(node, list):
        return [swap(value, old, new) for value in node]
    return node.replace(old, new) if isinstance(node, str) else node


def test_the_namespace_is_the_only_difference_between_two_releases() -> None:
    """Rendered in agentrun-ops and in the default namespace, the chart differs in the
    namespace's name alone (no object added, dropped or otherwise changed)."""
    assert swap(render(NAMESPACE), NAMESPACE, names.OPERATOR_NAMESPACE) == render(
        names.OPERATOR_NAMESPACE)


# The guard's two lookups, and what stands for each in the copy (values instead).
LOOKUPS = {'lookup "v1" "Namespace" "" .Release.Namespace': ".Values.found.namespace",
           'lookup (index . 0) (index . 1) "" (index . 2)': "(get $.Values.found (index . 1))"}


@pytest.fixture(scope="module")
def guard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A chart of the guard alone, its lookups reading ``.Values.found``."""
    chart = tmp_path_factory.mktemp("guard")
    (chart / "templates").mkdir()
    shutil.copy(CHART / "Chart.yaml", chart / "Chart.yaml")
    text = (CHART / "templates" / "install-guard.yaml").read_text()
    for lookup, stand_in in LOOKUPS.items():
        assert lookup in text, lookup
        text = text.replace(lookup, stand_in)
    (chart / "templates" / "install-guard.yaml").write_text(text)
    return chart


def owned(namespace: str, release: str = RELEASE) -> dict[str, Any]:
    """A cluster-scoped object of a release, as ``lookup`` returns it."""
    return {"metadata": {"name": names.OPERATOR_APP, "annotations": {
        "meta.helm.sh/release-namespace": namespace, "meta.helm.sh/release-name": release}}}


TENANT = {"metadata": {"name": NAMESPACE, "labels": {names.TENANT_LABEL: "team-a"}}}
PLAIN = {"metadata": {"name": NAMESPACE, "labels": {"kubernetes.io/metadata.name": NAMESPACE}}}


@pytest.mark.parametrize(("found", "release", "says"), [
    ({"namespace": {}}, RELEASE, None),  # helm template, a dry run: nothing found (the
    # real guard's case in every render above)
    ({"namespace": PLAIN}, RELEASE, None),  # a first install in a namespace of its own
    ({"namespace": TENANT}, RELEASE,
     f"cannot be installed in the namespace {NAMESPACE}: it is a tenant's (labelled "
     f"{names.TENANT_LABEL}=team-a)"),
    ({"namespace": PLAIN, "ClusterRole": owned(NAMESPACE)}, RELEASE, None),  # an upgrade
    ({"namespace": PLAIN, "ValidatingAdmissionPolicy": owned(NAMESPACE)}, RELEASE, None),
    ({"namespace": PLAIN, "ClusterRole": owned("agentrun-system")}, RELEASE,
     "already installed in this cluster by the release agentrun-operator in the namespace "
     "agentrun-system (its ClusterRole agentrun-operator)"),
    ({"namespace": PLAIN, "ValidatingAdmissionPolicy": owned("agentrun-system")}, RELEASE,
     "in the namespace agentrun-system (its ValidatingAdmissionPolicy agentrun-fence-operator)"),
    ({"namespace": PLAIN, "ClusterRole": owned(NAMESPACE, "first")}, RELEASE,
     f"by the release first in the namespace {NAMESPACE}"),
    # kubectl apply -k manifests: no release owns it; Helm's own check refuses it unless
    # the install takes it over (--take-ownership), as the suite's chart tests do.
    ({"namespace": PLAIN, "ClusterRole": {"metadata": {"name": names.OPERATOR_APP}}},
     RELEASE, None),
], ids=["nothing-found", "own-namespace", "tenant-namespace", "upgrade-role",
        "upgrade-fence", "other-namespace", "other-namespace-fence", "other-release",
        "unowned"])
def test_the_guard_refuses_a_tenants_namespace_and_a_second_release(
        guard: Path, found: dict[str, Any], release: str, says: str | None) -> None:
    result = subprocess.run([str(helm_binary()), "template", release, str(guard),
                             "--namespace", NAMESPACE, "--set-json",
                             f"found={json.dumps(found)}"],
                            capture_output=True, text=True, check=False, timeout=120)
    if says is None:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode != 0 and says in result.stderr, result.stderr
        assert "upgrade that one" in result.stderr or "a namespace of its own" in \
            result.stderr


def template(chart: Path, *, namespace: str,
             found: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """``helm template`` of ``chart`` (the guard's copy) in ``namespace``, its lookups
    finding ``found``."""
    return subprocess.run([str(helm_binary()), "template", RELEASE, str(chart), "--namespace",
                           namespace, "--set-json", f"found={json.dumps(found)}"],
                          capture_output=True, text=True, check=False, timeout=120)


@pytest.mark.parametrize("namespace", ownnamespace.REFUSED)
def test_default_and_the_control_planes_namespaces_are_refused_without_a_cluster(
        namespace: str) -> None:
    """Where the operator itself would refuse to start (``kube.ownnamespace``): ``default``
    (people and tools commonly hold rights to Secrets there) and the namespaces the fence
    spares (``fencing.SPARED``: the leader's dry-run check would pass there before
    admission saw its token). By name alone, so under ``helm template`` too."""
    result = helm("--namespace", namespace)
    assert result.returncode != 0
    assert (f"agentrun-operator cannot be installed in the namespace {namespace}: "
            in result.stderr), result.stderr
    assert "only cluster admins may read or write Secrets" in result.stderr
    assert f"--namespace {names.OPERATOR_NAMESPACE} --create-namespace" in result.stderr
    assert "a namespace of its own" in result.stderr


def test_the_guard_refuses_by_name_what_the_operator_refuses(guard: Path) -> None:
    """The copy too (nothing found: a dry run), and the names are the operator's own."""
    assert set(ownnamespace.REFUSED) >= set(fencing.SPARED) | {"default"}
    for namespace in ownnamespace.REFUSED:
        result = template(guard, namespace=namespace, found={"namespace": {}})
        assert result.returncode != 0 and namespace in result.stderr, result.stderr


def test_a_refusal_never_suggests_the_namespace_it_refused(guard: Path) -> None:
    """A tenant's namespace that happens to be called agentrun-system: the message names
    no namespace to use rather than the one just refused."""
    tenant = {"metadata": {"name": names.OPERATOR_NAMESPACE,
                           "labels": {names.TENANT_LABEL: "team-a"}}}
    result = template(guard, namespace=names.OPERATOR_NAMESPACE, found={"namespace": tenant})
    assert result.returncode != 0
    assert f"cannot be installed in the namespace {names.OPERATOR_NAMESPACE}: it is a " \
        "tenant's" in result.stderr, result.stderr
    assert "helm install --namespace <another namespace> --create-namespace" in result.stderr
    assert f"--namespace {names.OPERATOR_NAMESPACE}" not in result.stderr
    elsewhere = template(guard, namespace=NAMESPACE, found={"namespace": TENANT})
    assert f"--namespace {names.OPERATOR_NAMESPACE} --create-namespace" in elsewhere.stderr
