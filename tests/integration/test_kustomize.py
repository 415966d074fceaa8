"""``kubectl apply -k`` of the base (``manifests``) and of the example tenant
(``manifests/examples``), validated by the local API server.

The base holds the operator's Deployment: applied for real it would start an operator
serving every namespace of the suite's cluster, so the base is sent as a server-side
dry run (every object through admission and schema validation, nothing stored). The
examples are applied for real in their own namespace (nothing serves it here), which
shows what only storing can: the generated revisions are immutable, and a second apply
of the same kustomization changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import kubernetes
import pytest

from agentrun.api import names
from tests.support.cluster.clusters import Cluster
from tests.support.plays.examples import BASE, EXAMPLES, rendered
from tests.support.waiting import delete_namespace, namespace_gone, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("crds")]

DEMO = "agentrun-demo"


def test_the_base_passes_the_api_server_as_a_dry_run(cluster: Cluster) -> None:
    documents = rendered(cluster, BASE)
    kinds = {d["kind"] for d in documents}
    assert {"CustomResourceDefinition", "ClusterRole", "Deployment",
            "MutatingAdmissionPolicy", "ValidatingAdmissionPolicy"} <= kinds
    # Namespaced objects in a dry run need their namespace to exist already.
    namespace = json.dumps({"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": names.OPERATOR_NAMESPACE}})
    made = cluster.kubectl("apply", "-f", "-", input=namespace)
    assert made.returncode == 0, made.stderr

    result = cluster.kubectl("apply", "--server-side", "--dry-run=server", "-k", str(BASE))

    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == len(documents), result.stdout
    assert all(line.endswith("(server dry run)") for line in lines), result.stdout


@pytest.fixture
def demo_namespace(api_client: kubernetes.client.ApiClient) -> Iterator[str]:
    """The examples' own namespace, absent before and removed after (waited until gone)."""
    wait_for(lambda: namespace_gone(api_client, DEMO), timeout=120,
             message=f"namespace {DEMO} absent before the test")
    yield DEMO
    delete_namespace(api_client, DEMO)


@pytest.mark.serial  # the examples' fixed namespace (agentrun-demo), as the demo's
def test_the_examples_apply_and_their_revisions_are_immutable(
        cluster: Cluster, api_client: kubernetes.client.ApiClient, demo_namespace: str) -> None:
    first = cluster.kubectl("apply", "-k", str(EXAMPLES))
    assert first.returncode == 0, first.stderr
    documents = rendered(cluster)
    created = [line for line in first.stdout.splitlines() if line.endswith(" created")]
    assert len(created) == len(documents), first.stdout

    again = cluster.kubectl("apply", "-k", str(EXAMPLES))
    assert again.returncode == 0, again.stderr
    assert all(line.endswith(" unchanged") for line in again.stdout.splitlines()), again.stdout

    core = kubernetes.client.CoreV1Api(api_client)
    revisions = core.list_namespaced_config_map(
        demo_namespace, label_selector=names.CONFIG_KIND_LABEL).items
    assert sorted(c.metadata.name for c in revisions) == [
        "research-brief-r1", "research-report-agents-r1", "research-report-r1"]
    assert all(c.immutable for c in revisions)
    edit = cluster.kubectl("patch", "configmap", "-n", demo_namespace, "research-brief-r1",
                           "--type", "merge", "-p", json.dumps({"data": {"package.yaml": "x"}}))
    assert edit.returncode != 0
    assert "immutable" in edit.stderr, edit.stderr
    stored = core.read_namespaced_config_map("research-brief-r1", demo_namespace)
    assert stored.data["package.yaml"] == (EXAMPLES / "config" / "package.yaml").read_text()
