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
from tests.support.cluster.helm import CHART, EVERY_VALUE, NAMESPACE, RELEASE, helm_binary

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


STORE_VALUES = {"nodeSelector": {"example.com/pool": "storage"},
                "tolerations": [{"operator": "Exists"}],
                "affinity": {"podAffinity": {}}}


def every_value(tmp_path: Path) -> list[str]:
    """``-f`` of a values file setting every value of the chart's pods, the store's too."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({**EVERY_VALUE, "store": STORE_VALUES}))
    return ["-f", str(values)]


@pytest.mark.parametrize("every", [False, True], ids=["defaults", "every-value"])
def test_helm_lint_strict_passes(tmp_path: Path, every: bool) -> None:
    result = helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE,
                  *(every_value(tmp_path) if every else []))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


STANDARD = {"app.kubernetes.io/instance": RELEASE, "app.kubernetes.io/version": "0.1.0",
            "app.kubernetes.io/part-of": "agentrun", "app.kubernetes.io/managed-by": "Helm",
            "helm.sh/chart": "agentrun-operator-0.1.0"}
# On pods, those that stay the same from one chart version to the next.
POD_STANDARD = {key: value for key, value in STANDARD.items()
                if key not in ("app.kubernetes.io/version", "helm.sh/chart")}


def unlabelled(document: dict[str, Any], *, like: dict[str, Any]) -> dict[str, Any]:
    """``document`` without the labels only the chart adds, asserted present: the standard
    ones, and the chart's name where ``like`` (what ``agentrun.manifests`` builds) has none."""
    document = json.loads(json.dumps(document))
    for metadata, built, standard in (
            (document["metadata"], like["metadata"], STANDARD),
            (document.get("spec", {}).get("template", {}).get("metadata"),
             like.get("spec", {}).get("template", {}).get("metadata"), POD_STANDARD)):
        if metadata is None:
            continue
        labels = metadata.pop("labels")
        assert {k: labels.pop(k, None) for k in standard} == standard, document["metadata"]
        if "app.kubernetes.io/name" not in built.get("labels", {}):
            assert labels.pop("app.kubernetes.io/name") == "agentrun-operator"
        if labels or "labels" in built:
            metadata["labels"] = labels
    return document


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
    """Field by field, but for the standard labels only the chart adds (on every object,
    and the chart's name where an object had no name label)."""
    rendered = {key(d): d for d in render("--skip-tests")}
    expected = {key(d): d for d in expected_objects()}
    assert sorted(rendered) == sorted(expected)
    for name, document in expected.items():  # rules, policies, the Deployment: field by field
        assert unlabelled(rendered[name], like=document) == json.loads(json.dumps(document)), name
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


def named(documents: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def test_every_value_of_the_pods_reaches_them(tmp_path: Path) -> None:
    documents = render(*every_value(tmp_path))
    operator = named(documents, "Deployment", manifests.OPERATOR_ROLE)["spec"]["template"]
    spec = operator["spec"]
    assert operator["metadata"]["labels"]["example.com/team"] == "platform"
    assert operator["metadata"]["annotations"] == EVERY_VALUE["podAnnotations"]
    for key in ("imagePullSecrets", "nodeSelector", "tolerations", "priorityClassName"):
        assert spec[key] == EVERY_VALUE[key], key
    # Helm merges a map into the default: the spread over nodes stays beside it.
    assert spec["affinity"] == {**EVERY_VALUE["affinity"], **workload.SPREAD}  # type: ignore[dict-item]
    (container,) = spec["containers"]
    assert container["image"].endswith(":0.1.0")  # image.tag "": the chart's appVersion
    assert container["env"] == [workload.POD_NAME_ENV, workload.POD_NAMESPACE_ENV,
                                *EVERY_VALUE["extraEnv"]]  # type: ignore[misc]
    assert container["args"][container["args"].index("--qps"):][:4] == EVERY_VALUE["extraArgs"]
    store = named(documents, "Deployment", bundledstore.STORE)["spec"]["template"]["spec"]
    assert {key: store[key] for key in STORE_VALUES} == STORE_VALUES
    assert store["imagePullSecrets"] == EVERY_VALUE["imagePullSecrets"]
    policy = named(documents, "NetworkPolicy", manifests.OPERATOR_ROLE)["spec"]
    assert [rule.get("from") for rule in policy["ingress"]] == [
        None, EVERY_VALUE["networkPolicy"]["metricsFrom"],  # type: ignore[index]
        [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "agentrun-operator-test"}}}]]
    assert named(documents, "NetworkPolicy", bundledstore.STORE)["spec"]["ingress"] == [
        {"ports": [{"port": bundledstore.STORE_PORT_NAME, "protocol": "TCP"}]}]
    test = named(documents, "Pod", f"{RELEASE}-test")
    assert test["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert test["spec"]["containers"][0]["args"] == ["agentrun-operator-metrics 8080 /readyz",
                                                     "agentrun-store 8333 /"]
    # Where the operator's pods may run, not how they spread: a required anti-affinity
    # among them must not leave the test pod without a node.
    assert test["spec"]["affinity"] == {"nodeAffinity": EVERY_VALUE["affinity"][  # type: ignore[index]
        "nodeAffinity"]}
    assert "priorityClassName" not in test["spec"]
    for document in documents:  # every object: the standard labels, with the release's name
        labels = document["metadata"]["labels"]
        assert {k: labels.get(k) for k in STANDARD} == STANDARD, key(document)


def test_defaults_leave_the_optional_pod_settings_out() -> None:
    documents = render("--set", "affinity=null", "--set", "metrics.service.enabled=false",
                       "--set", "store.enabled=false")
    spec = named(documents, "Deployment", manifests.OPERATOR_ROLE)["spec"]["template"]["spec"]
    assert not {"imagePullSecrets", "nodeSelector", "tolerations", "affinity",
                "priorityClassName"} & set(spec)
    assert not [d for d in documents if d["kind"] == "NetworkPolicy"]
    test = named(documents, "Pod", f"{RELEASE}-test")  # nothing to check: passes as such
    assert test["spec"]["containers"][0]["args"] is None


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
    documents = render("--set", "history.enabled=false", "--set", "networkPolicy.enabled=true")
    policy = named(documents, "NetworkPolicy", manifests.OPERATOR_ROLE)["spec"]
    assert [port["port"] for rule in policy["ingress"] for port in rule["ports"]] == [
        workload.METRICS_PORT_NAME] * 2  # nothing admitted to a port nobody serves
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
                                                         crds: list[str], tmp_path: Path) -> None:
    """Every value set (the store's too): the API server admits every object, the
    NetworkPolicies and ``helm test``'s pod included."""
    version = server_version(api_client)
    documents = render("--kube-version", version, "--set-string", f"image.repository={IMAGE}",
                       "--set-json", 'watchNamespaces=["team-a"]', *every_value(tmp_path),
                       include_crds=True)
    kinds = {d["kind"] for d in documents}
    assert {"CustomResourceDefinition", "Deployment", "Service", "ServiceAccount", "ClusterRole",
            "Role", "MutatingAdmissionPolicy", "ValidatingAdmissionPolicy", "NetworkPolicy",
            "Pod"} <= kinds
    # The release's namespace exists before its objects (helm's --create-namespace).
    made = cluster.kubectl("create", "namespace", NAMESPACE)
    assert made.returncode == 0 or "AlreadyExists" in made.stderr, made.stderr
    result = cluster.kubectl("apply", "--dry-run=server", "-f", "-",
                             input="\n".join(json.dumps(d) for d in documents))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("(server dry run)") == len(documents), result.stdout


def test_every_pod_the_chart_makes_passes_the_restricted_standard(
        cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    """The operator's and the store's pod templates and ``helm test``'s pod, every value
    set, dry-run as Pods in a namespace enforcing the restricted Pod Security Standard
    (their service account left to the namespace's default: that is not what is judged)."""
    labelled = cluster.kubectl("label", "namespace", namespace,
                               "pod-security.kubernetes.io/enforce=restricted")
    assert labelled.returncode == 0, labelled.stderr
    documents = render("--set-string", f"image.repository={IMAGE}", *every_value(tmp_path))
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{d['metadata']['name']}-pod", "namespace": namespace},
             "spec": {k: v for k, v in d["spec"]["template"]["spec"].items()
                      if k != "serviceAccountName"}}
            for d in documents if d["kind"] == "Deployment"]
    pods += [{**d, "metadata": {**d["metadata"], "namespace": namespace}}
             for d in documents if d["kind"] == "Pod"]
    assert len(pods) == 3
    result = cluster.kubectl("apply", "--dry-run=server", "-f", "-",
                             input="\n".join(json.dumps(p) for p in pods))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("(server dry run)") == 3, result.stdout
    # It could fail: a container without the restricted fields is refused there.
    (lax,) = [p for p in pods if p["metadata"]["name"] == f"{RELEASE}-test"]
    del lax["spec"]["containers"][0]["securityContext"]
    refused = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(lax))
    assert refused.returncode != 0 and "violates PodSecurity" in refused.stderr, refused.stderr


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
    pytest.param(["--set-json", 'podLabels={"app.kubernetes.io/name":"x"}'], NAMESPACE,
                 "podLabels: app.kubernetes.io/name is one of the chart's or the project's",
                 id="pod-label-of-the-chart"),
    pytest.param(["--set-json", 'podLabels={"agentrun.dev/run":"x"}'], NAMESPACE,
                 "podLabels: agentrun.dev/run is one of the chart's or the project's",
                 id="pod-label-of-the-project"),
    pytest.param(["--set-json", 'extraArgs=["--metrics-port","9090"]'], NAMESPACE,
                 "extraArgs: --metrics-port is a flag the chart sets or depends on",
                 id="chart-flag-in-extra-args"),
    pytest.param(["--set-json", 'extraEnv=[{"name":"POD_NAME","value":"x"}]'], NAMESPACE,
                 "extraEnv: POD_NAME is the chart's own variable", id="pod-name-env"),
    pytest.param(["--set-json", 'tolerations=[{"effect":"Sometimes"}]'], NAMESPACE,
                 "value must be one of", id="toleration-effect"),
    pytest.param(["--set-json", 'imagePullSecrets=["regcred"]'], NAMESPACE,
                 "got string, want object", id="pull-secret-shape"),
    pytest.param(["--set-json", 'extraEnv=[{"name":"POD_NAMESPACE","value":"x"}]'], NAMESPACE,
                 "extraEnv: POD_NAMESPACE is the chart's own variable", id="pod-namespace-env"),
    pytest.param(["--set-json", 'extraArgs=["--operator-namespace","x"]'], NAMESPACE,
                 "extraArgs: --operator-namespace is a flag the chart sets or depends on",
                 id="operator-namespace-flag"),
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
