"""The samples in ``manifests/examples`` are valid, and valid together.

They are read as kustomize renders them (``kubectl kustomize``: what ``kubectl apply -k``
sends; tests/support/plays/examples.py). Each object parses with its model (AgentRun and
LaunchSpec with the API models, configuration ConfigMaps with ``configs.parse_document``)
and conforms to the generated CRD schema; the configuration is generated immutable and
labelled as docs/design/names.md says; the bindings cover the workflow; the run names
configuration that exists; some LaunchSpec serves every worker class the workflow asks
for. tests/integration/test_kustomize.py applies them to a real API server.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import yaml

from agentrun.api import configs, crds, launchspecs, names, runs, schema
from tests.support.cluster.clusters import Cluster
from tests.support.cluster.images import PROJECT_DEV_REF
from tests.support.plays.examples import EXAMPLES, rendered

pytestmark = pytest.mark.integration
NAMESPACE = "agentrun-demo"
AGENT_MODULE = "agentrun.examples.research_report"


Documents = list[dict[str, Any]]


@pytest.fixture(scope="module")
def documents(cluster: Cluster) -> Documents:
    return rendered(cluster)


def of_kind(documents: Documents, kind: str) -> Documents:
    return [doc for doc in documents if doc["kind"] == kind]


def configuration(documents: Documents, kind: str) -> Documents:
    return [cm for cm in of_kind(documents, "ConfigMap")
            if cm["metadata"]["labels"][names.CONFIG_KIND_LABEL] == kind]


def parsed(documents: Documents, kind: str) -> Any:
    (cm,) = configuration(documents, kind)
    return configs.parse_document(kind, yaml.safe_load(cm["data"][names.CONFIG_DATA_KEYS[kind]]))


def test_the_expected_files_exist() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == [
        "00-namespace.yaml", "01-worker-account.yaml", "02-editors.yaml",
        "20-launchspec-cpu.yaml", "21-launchspec-gpu.yaml", "30-agentrun.yaml",
        "kustomization.yaml"]
    assert sorted(p.name for p in (EXAMPLES / "config").iterdir()) == [
        "bindings.yaml", "package.yaml", "workflow.yaml"]


@pytest.mark.parametrize("kind", names.CONFIG_KINDS)
def test_configuration_is_generated_immutable_with_readable_names(
        documents: Documents, kind: str) -> None:
    (cm,) = configuration(documents, kind)
    assert cm["immutable"] is True
    labels = cm["metadata"]["labels"]
    assert cm["metadata"]["name"] == f"{labels[names.CONFIG_NAME_LABEL]}-r1"  # no hash
    assert (EXAMPLES / "config" / names.CONFIG_DATA_KEYS[kind]).read_text() == (
        cm["data"][names.CONFIG_DATA_KEYS[kind]])


def test_namespace_is_a_labelled_tenant(documents: Documents) -> None:
    (namespace,) = of_kind(documents, "Namespace")
    assert namespace["metadata"]["name"] == NAMESPACE
    assert namespace["metadata"]["labels"] == {names.TENANT_LABEL: "demo"}
    namespaced = [doc for doc in documents if doc["kind"] != "Namespace"]
    assert {doc["metadata"]["namespace"] for doc in namespaced} == {NAMESPACE}


@pytest.mark.parametrize("kind", names.CONFIG_KINDS)
def test_configuration_is_labelled_accepted_and_parses(documents: Documents, kind: str) -> None:
    (cm,) = configuration(documents, kind)
    labels = cm["metadata"]["labels"]
    assert labels[names.CONFIG_NAME_LABEL]
    assert labels[names.REVISION_LABEL] == "1"
    assert labels[names.ACCEPTED_LABEL] == "true"
    assert set(cm["data"]) == {names.CONFIG_DATA_KEYS[kind]}
    assert parsed(documents, kind) is not None


def test_workflow_nodes_and_bindings_cover_them(documents: Documents) -> None:
    workflow = parsed(documents, "workflow")
    assert isinstance(workflow, configs.WorkflowDocument)
    assert [(n.name, n.worker_class, n.depends_on) for n in workflow.nodes] == [
        ("research", "cpu", []), ("report", "cpu", ["research"])]
    bindings = parsed(documents, "bindings")
    assert isinstance(bindings, configs.BindingsDocument)
    bindings.check_covers(workflow)
    assert bindings.publish is not None and bindings.publish.url.startswith("http://")


def test_the_agent_module_exists_and_reads_the_example_configuration(
        documents: Documents) -> None:
    """The module the LaunchSpecs run is importable, and the example's pinned texts give
    it what it needs (the publish URL, the package's outcome)."""
    research_report = importlib.import_module(AGENT_MODULE)
    texts = {kind: configuration(documents, kind)[0]["data"][names.CONFIG_DATA_KEYS[kind]]
             for kind in names.CONFIG_KINDS}
    brief = research_report.Brief.from_texts(texts)
    assert brief.publish_url == parsed(documents, "bindings").publish.url
    assert brief.outcome == parsed(documents, "package").outcome
    assert len(brief.topics) >= 2


def test_agentrun_parses_and_names_existing_configuration(documents: Documents) -> None:
    (doc,) = of_kind(documents, "AgentRun")
    run = runs.AgentRun.model_validate(doc)
    assert len(run.metadata.name) <= names.MAX_RUN_NAME
    for kind in names.CONFIG_KINDS:
        ref = getattr(run.spec, kind)
        (cm,) = configuration(documents, kind)
        assert ref.name == cm["metadata"]["labels"][names.CONFIG_NAME_LABEL]
        assert ref.revision in (None, int(cm["metadata"]["labels"][names.REVISION_LABEL]))


def test_launchspecs_parse_and_serve_every_worker_class(documents: Documents) -> None:
    specs = [launchspecs.LaunchSpec.model_validate(doc)
             for doc in of_kind(documents, "LaunchSpec")]
    assert {s.metadata.name for s in specs} == {"cpu-workers", "gpu-workers"}
    for spec in specs:
        assert spec.spec.template.spec.restart_policy == "Never"
    served = {c for s in specs for c in s.spec.claim.worker_classes}
    workflow = parsed(documents, "workflow")
    assert isinstance(workflow, configs.WorkflowDocument)
    assert {n.worker_class for n in workflow.nodes} <= served
    assert {"cpu", "gpu"} <= served


def test_workers_run_the_example_agent_in_the_project_image_as_a_bound_account(
        documents: Documents) -> None:
    """What makes the quick start run on the local node: the image ``make cluster`` tags,
    never pulled, running the example agent (its SDK renews the lease), and a service
    account that may renew leases (``agentrun-worker``)."""
    (account,) = of_kind(documents, "ServiceAccount")
    (binding,) = [b for b in of_kind(documents, "RoleBinding")
                  if b["metadata"]["name"] == "agentrun-worker"]
    worker_role = yaml.safe_load((EXAMPLES.parent / "rbac" / "worker.yaml").read_text())
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": worker_role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "namespace": NAMESPACE,
                                    "name": account["metadata"]["name"]}]
    for spec in of_kind(documents, "LaunchSpec"):
        pod = spec["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == account["metadata"]["name"]
        for container in pod["containers"]:
            assert container["image"] == PROJECT_DEV_REF
            assert container["imagePullPolicy"] == "Never"
            assert container["command"] == ["python3", "-m", AGENT_MODULE]


def test_the_tenants_people_are_editors(documents: Documents) -> None:
    """alice and bob get the built-in ``edit`` role here, which the project's viewer and
    editor roles aggregate into (manifests/rbac/roles.yaml)."""
    (binding,) = [b for b in of_kind(documents, "RoleBinding")
                  if b["metadata"]["name"] == "agentrun-editors"]
    assert binding["roleRef"]["name"] == "edit"
    assert [(s["kind"], s["name"]) for s in binding["subjects"]] == [
        ("User", "alice"), ("User", "bob")]
    roles = {r["metadata"]["name"]: r for r in yaml.safe_load_all(
        (EXAMPLES.parent / "rbac" / "roles.yaml").read_text()) if r}
    for role in ("agentrun-viewer", "agentrun-editor"):
        assert roles[role]["metadata"]["labels"][
            "rbac.authorization.k8s.io/aggregate-to-edit"] == "true"


@pytest.mark.parametrize("kind", ["AgentRun", "LaunchSpec"])
def test_custom_objects_conform_to_the_generated_crd(documents: Documents, kind: str) -> None:
    (crd_kind,) = [k for k in crds.KINDS if k.kind == kind]
    openapi = crds.definition(crd_kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for doc in of_kind(documents, kind):
        assert doc["apiVersion"] == names.API_VERSION
        assert schema.conforms(doc, openapi), doc["metadata"]["name"]


def test_the_langgraph_overlay_runs_the_langgraph_agent_on_the_same_tenant(
        cluster: Cluster, documents: Documents) -> None:
    """``manifests/examples-langgraph``: the same objects, every LaunchSpec running the
    LangGraph agent (importable here: the image carries the same extra), which reads the
    example's configuration as the research-report agent does."""
    overlay = rendered(cluster, EXAMPLES.parent / "examples-langgraph")
    names_of = [(d["kind"], d["metadata"]["name"]) for d in overlay]
    assert names_of == [(d["kind"], d["metadata"]["name"]) for d in documents]
    for spec in of_kind(overlay, "LaunchSpec"):
        launchspecs.LaunchSpec.model_validate(spec)
        (container,) = spec["spec"]["template"]["spec"]["containers"]
        assert container["command"] == ["python3", "-m", "agentrun.examples.langgraph_agent"]
    agent = importlib.import_module("agentrun.examples.langgraph_agent")
    assert agent.ROUNDS >= 1 and callable(agent.run)
