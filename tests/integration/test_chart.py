"""The Helm chart, without a node: lint, one source, server-side validation, bad values.

Helm is the project's own build (``tests/support/cluster/helm.py``); the API server is the
suite's. Nothing here runs the operator: that is ``tests/integration/node/test_chart.py``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from agentrun import bundledstore, cli, manifests, workload
from agentrun.api import names
from tests.support.cluster.clusters import Cluster
from tests.support.cluster.helm import CHART, NAMESPACE, RELEASE, helm_binary

IMAGE = "localhost/agentrun-operator:test"


def helm(*args: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    config = ["--kubeconfig", str(kubeconfig)] if kubeconfig else []
    return subprocess.run([str(helm_binary()), *config, *args], capture_output=True, text=True,
                          check=False, timeout=120)


def render(*args: str, include_crds: bool = False) -> list[dict[str, Any]]:
    """``helm template`` of the chart in its namespace: the objects it would install."""
    result = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                  *(["--include-crds"] if include_crds else []), *args)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def server_version(api_client: kubernetes.client.ApiClient) -> str:
    found: str = kubernetes.client.VersionApi(api_client).get_code().git_version
    return found


def test_helm_lint_strict_passes() -> None:
    result = helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def expected_objects() -> list[dict[str, Any]]:
    """What ``agentrun.manifests`` builds for the chart, in its default values."""
    (account, operator) = workload.deployment()
    (container,) = operator["spec"]["template"]["spec"]["containers"]
    container["args"] += BUNDLED_JOURNAL  # the chart's default: its bundled store
    everything = [*manifests.operator_rbac(), *manifests.user_roles(), *manifests.worker_rbac(),
                  *manifests.mutating_policies(), *manifests.validating_policies(),
                  *manifests.fence_policy(),
                  account, operator, *workload.disruption_budget(),
                  *workload.metrics_service(), *workload.history_api(),
                  *bundledstore.store(pull_policy=workload.PULL_POLICY)]
    return [o for o in everything if o["kind"] != "Namespace"]


BUNDLED_JOURNAL = ["--journal-endpoint", bundledstore.store_endpoint(), "--journal-bucket",
                   bundledstore.STORE_BUCKET, "--journal-prefix", "agentrun", "--journal-region",
                   "us-east-1"]


def key(document: dict[str, Any]) -> tuple[str, str, str]:
    return (document["kind"], document["metadata"].get("namespace", ""),
            document["metadata"]["name"])


def test_the_templates_are_exactly_what_manifests_builds() -> None:
    rendered = {key(d): d for d in render()}
    expected = {key(d): d for d in expected_objects()}
    assert sorted(rendered) == sorted(expected)
    for name, document in expected.items():  # rules, policies, the Deployment: field by field
        assert rendered[name] == json.loads(json.dumps(document)), name
    assert not any(d["kind"] == "Namespace" for d in rendered.values())
    # manifests/local (the local `operator` user's binding) is never part of the chart
    assert ("ClusterRoleBinding", "", manifests.LOCAL_USER_BINDING) not in rendered


def test_values_reach_the_deployment_and_the_service() -> None:
    documents = render("--set-string", "image.repository=localhost/op", "--set-string",
                       "image.tag=v9", "--set", "image.pullPolicy=Never", "--set-json",
                       'watchNamespaces=["team-a","team-*"]', "--set", "logLevel=debug",
                       "--set", "metrics.port=9090", "--set", "metrics.service.enabled=false",
                       "--set", "resources.requests.cpu=200m")
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"
                     and d["metadata"]["name"] == manifests.OPERATOR_ROLE]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "localhost/op:v9"
    assert container["imagePullPolicy"] == "Never"
    assert container["args"] == ["run", "--metrics-address", "0.0.0.0", "--metrics-port", "9090",
                                 "--history-port", str(workload.HISTORY_PORT),
                                 "--leader-elect", "--namespace", "team-a", "--namespace",
                                 "team-*", "--verbose",
                                 *BUNDLED_JOURNAL]
    assert container["ports"][0]["containerPort"] == 9090
    assert container["resources"]["requests"] == {"cpu": "200m", "memory": "128Mi"}
    assert workload.METRICS_SERVICE not in {d["metadata"]["name"] for d in documents
                                             if d["kind"] == "Service"}


def test_store_values_reach_the_store_and_disable_it() -> None:
    documents = render("--set-string", "store.image.repository=localhost/sw", "--set-string",
                       "store.image.tag=t1", "--set", "store.image.pullPolicy=Never",
                       "--set", "store.storageClassName=fast", "--set", "store.size=5Gi")
    store = {d["kind"]: d for d in documents if d["metadata"]["name"] == bundledstore.STORE}
    assert set(store) == {"PersistentVolumeClaim", "Deployment", "Service"}
    assert store["PersistentVolumeClaim"]["spec"]["storageClassName"] == "fast"
    assert store["PersistentVolumeClaim"]["spec"]["resources"]["requests"] == {"storage": "5Gi"}
    (container,) = store["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert (container["image"], container["imagePullPolicy"]) == ("localhost/sw:t1", "Never")
    assert not [d for d in render("--set", "store.enabled=false")
                if d["metadata"]["name"] == bundledstore.STORE]


def test_the_history_api_can_be_turned_off_whole() -> None:
    documents = render("--set", "history.enabled=false")
    assert not [d for d in documents if d["kind"] == "APIService"
                or d["metadata"]["name"] == names.HISTORY_SERVICE]
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"
                     and d["metadata"]["name"] == manifests.OPERATOR_ROLE]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--history-port" not in container["args"]
    assert cli.parse(container["args"]).history_port == 0  # the command's default: none


def test_the_journal_retention_reaches_the_flags_as_a_whole_number() -> None:
    def args(*values: str) -> list[str]:
        (deployment,) = [d for d in render(*values) if d["kind"] == "Deployment"
                         and d["metadata"]["name"] == "agentrun-operator"]
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        return list(container["args"])

    assert "--journal-retention-seconds" not in args()  # null: kept until the run goes
    for values in ([], ["--set", "journal.endpoint=http://minio:9000",
                        "--set", "journal.bucket=journals"]):
        found = args(*values, "--set", "journal.retentionSeconds=315360000")
        assert found[found.index("--journal-retention-seconds") + 1] == "315360000"
        assert cli.parse(["run", *found[found.index("--journal-endpoint"):]]).journal


def test_the_rendered_chart_passes_a_server_side_dry_run(cluster: Cluster,
                                                         api_client: kubernetes.client.ApiClient,
                                                         crds: list[str]) -> None:
    version = server_version(api_client)
    documents = render("--kube-version", version, "--set-string", f"image.repository={IMAGE}",
                       "--set-json", 'watchNamespaces=["team-a"]', include_crds=True)
    kinds = {d["kind"] for d in documents}
    assert {"CustomResourceDefinition", "Deployment", "Service", "ServiceAccount", "ClusterRole",
            "Role", "MutatingAdmissionPolicy", "ValidatingAdmissionPolicy"} <= kinds
    # The release's namespace exists before its objects (helm's --create-namespace).
    made = cluster.kubectl("create", "namespace", NAMESPACE)
    assert made.returncode == 0 or "AlreadyExists" in made.stderr, made.stderr
    result = cluster.kubectl("apply", "--dry-run=server", "-f", "-",
                             input="\n".join(json.dumps(d) for d in documents))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("(server dry run)") == len(documents), result.stdout


def test_a_server_older_than_the_floor_is_refused() -> None:
    result = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                  "--kube-version", "v1.35.4")
    assert result.returncode != 0
    assert ">=1.36.0-0" in result.stderr, result.stderr


BAD = [
    pytest.param(["--set", "image.pullPolicy=Sometimes"], NAMESPACE,
                 "value must be one of 'Always', 'IfNotPresent', 'Never'", id="pullPolicy"),
    pytest.param(["--set", "replicas=0"], NAMESPACE, "minimum", id="replicas"),
    pytest.param(["--set", "replicas=6"], NAMESPACE, "maximum", id="replicas-above"),
    pytest.param(["--set", "replica=2"], NAMESPACE, "additional properties 'replica' not allowed",
                 id="misspelt"),
    pytest.param(["--set", "metrics.port=0"], NAMESPACE, "minimum", id="port"),
    pytest.param(["--set", "journal.retentionSeconds=-1"], NAMESPACE, "minimum",
                 id="retention"),
    pytest.param(["--set-json", 'watchNamespaces=["Team A"]'], NAMESPACE, "does not match pattern",
                 id="namespace-name"),
    pytest.param([], "agentrun-elsewhere",
                 "must be installed in the namespace agentrun-system", id="release-namespace"),
]


@pytest.mark.serial  # "creates nothing": no namespace or Deployment appears cluster-wide
@pytest.mark.parametrize(("values", "release_namespace", "says"), BAD)
def test_a_bad_value_is_refused_with_a_clear_message_and_creates_nothing(
        cluster: Cluster, api_client: kubernetes.client.ApiClient, crds: list[str],
        values: list[str], release_namespace: str, says: str) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    apps = kubernetes.client.AppsV1Api(api_client)
    before = {n.metadata.name for n in core.list_namespace().items}
    deployments = [d.metadata.name for d in apps.list_deployment_for_all_namespaces().items]
    result = helm("install", "agentrun-refused", str(CHART), "--namespace", release_namespace,
                  "--create-namespace", *values, kubeconfig=cluster.kubeconfig)
    assert result.returncode != 0
    assert says in result.stderr, result.stderr
    listed = helm("list", "--all-namespaces", "-o", "json", kubeconfig=cluster.kubeconfig)
    assert listed.returncode == 0, listed.stderr
    assert "agentrun-refused" not in {r["name"] for r in json.loads(listed.stdout)}
    assert {n.metadata.name for n in core.list_namespace().items} - before == set()
    assert [d.metadata.name for d in apps.list_deployment_for_all_namespaces().items] \
        == deployments
