"""The generated CRDs on a real API server: the samples pass, bad objects fail with our words.

What this proves that the unit tests cannot: the API server accepts the schemas
(structural, CEL rules within the cost budget), and its validation — OpenAPI and CEL,
including transition rules against ``oldSelf`` — rejects what docs/design/ says it must,
with the messages written in the models. No operator runs here: every status write is
the test's own, through the status subresource.
"""

from __future__ import annotations

import copy
import json
import pathlib
from collections.abc import Callable
from typing import Any

import kubernetes
import pytest
import yaml
from kubernetes.client.rest import ApiException

from agentrun.api import names
from tests.support.cluster.clusters import Cluster
from tests.support.cluster.images import PROJECT_DEV_REF
from tests.support.plays import examples

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("crds")]

EXAMPLES = examples.EXAMPLES
PLURALS = {"AgentRun": "agentruns", "Slot": "slots", "LaunchSpec": "launchspecs"}
SHA_A, SHA_B = "a" * 64, "b" * 64


def example(file_name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((EXAMPLES / file_name).read_text())
    return loaded


def create(api_client: kubernetes.client.ApiClient, body: dict[str, Any], *, namespace: str,
           dry_run: bool = False) -> Any:
    """Create ``body`` in ``namespace`` (the examples' own namespace is replaced)."""
    body = copy.deepcopy(body)
    dry = "All" if dry_run else None
    kind = body["kind"]
    if kind == "Namespace":
        return kubernetes.client.CoreV1Api(api_client).create_namespace(body, dry_run=dry)
    body["metadata"]["namespace"] = namespace
    if kind == "ConfigMap":
        return kubernetes.client.CoreV1Api(api_client).create_namespaced_config_map(
            namespace, body, dry_run=dry)
    if kind == "ServiceAccount":
        return kubernetes.client.CoreV1Api(api_client).create_namespaced_service_account(
            namespace, body, dry_run=dry)
    if kind == "RoleBinding":
        for subject in body["subjects"]:
            subject["namespace"] = namespace
        return kubernetes.client.RbacAuthorizationV1Api(api_client).create_namespaced_role_binding(
            namespace, body, dry_run=dry)
    return kubernetes.client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, PLURALS[kind], body, dry_run=dry)


def rejection(call: Callable[[], object]) -> str:
    """The message of the 422 Invalid that ``call`` must get."""
    with pytest.raises(ApiException) as caught:
        call()
    assert caught.value.status == 422, caught.value.body
    message: str = json.loads(caught.value.body)["message"]
    return message


def custom(api_client: kubernetes.client.ApiClient) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(api_client)


def slot_body(name: str = "research-report-0a1b2c3d") -> dict[str, Any]:
    return {"apiVersion": names.API_VERSION, "kind": "Slot",
            "metadata": {"name": name, "labels": {names.RUN_LABEL: "research-report",
                                                  names.NODE_LABEL: "research"}},
            "spec": {"run": "research-report", "node": "research", "workerClass": "cpu",
                     "dependsOn": []}}


def pins(sha256: str) -> dict[str, Any]:
    def pin(kind: str) -> dict[str, Any]:
        return {"source": f"{kind}-r1", "revision": 1, "uid": f"uid-{kind}",
                "sha256": sha256, "snapshot": f"research-report-{kind}-{sha256[:10]}"}
    return {kind: pin(kind) for kind in names.CONFIG_KINDS}


@pytest.mark.serial  # dry-runs the examples' namespace (agentrun-demo): absent meanwhile
def test_every_example_is_accepted(
    api_client: kubernetes.client.ApiClient, cluster: Cluster, namespace: str
) -> None:
    documents = examples.rendered(cluster)
    assert {d["kind"] for d in documents} >= {"AgentRun", "LaunchSpec", "ConfigMap"}
    for body in documents:
        create(api_client, body, namespace=namespace, dry_run=True)


def test_examples_are_stored_with_defaults(
    api_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    stored = create(api_client, example("20-launchspec-cpu.yaml"), namespace=namespace)
    assert stored["spec"]["template"]["spec"]["containers"][0]["image"] == PROJECT_DEV_REF
    run = example("30-agentrun.yaml")
    del run["spec"]["claimPolicy"]
    stored = create(api_client, run, namespace=namespace)
    assert stored["spec"]["claimPolicy"] == "Automatic"
    assert stored["spec"]["suspend"] is False


@pytest.mark.parametrize(("field", "value"), [
    ("node", "report"), ("run", "report"), ("workerClass", "gpu"), ("dependsOn", ["plan"]),
    ("retry", {"maxAttempts": 9})])
def test_slot_spec_cannot_change(
    api_client: kubernetes.client.ApiClient, namespace: str, field: str, value: object
) -> None:
    api = custom(api_client)
    create(api_client, slot_body(), namespace=namespace)
    slot = api.get_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, "slots", "research-report-0a1b2c3d")
    slot["spec"][field] = value

    message = rejection(lambda: api.replace_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, "slots", slot["metadata"]["name"], slot))

    assert "spec is immutable" in message
    assert "a slot's identity (run, node) never changes" in message


def test_slot_metadata_can_change(
    api_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    """Commands are annotations: a patch that leaves the spec alone is accepted."""
    api = custom(api_client)
    create(api_client, slot_body(), namespace=namespace)
    api.patch_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, "slots", "research-report-0a1b2c3d",
        {"metadata": {"annotations": {"example.com/note": "kept"}}})


def test_slot_name_over_58_characters_is_rejected(
    api_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    create(api_client, slot_body("s" * 58), namespace=namespace, dry_run=True)
    message = rejection(lambda: create(api_client, slot_body("s" * 59), namespace=namespace,
                                       dry_run=True))
    assert "metadata.name must be at most 58 characters" in message


def test_pinned_is_write_once(api_client: kubernetes.client.ApiClient, namespace: str) -> None:
    api = custom(api_client)
    create(api_client, example("30-agentrun.yaml"), namespace=namespace)

    def write_status(status: dict[str, Any] | None) -> None:
        run = api.get_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, "agentruns", "research-report")
        if status is None:
            run.pop("status", None)
        else:
            run["status"] = status
        api.replace_namespaced_custom_object_status(
            names.GROUP, names.VERSION, namespace, "agentruns", "research-report", run)

    write_status({"pinned": pins(SHA_A)})
    write_status({"pinned": pins(SHA_A), "done": "0/2"})  # same pins: any other change is fine

    changed = rejection(lambda: write_status({"pinned": pins(SHA_B), "done": "0/2"}))
    dropped = rejection(lambda: write_status({"done": "0/2"}))
    removed = rejection(lambda: write_status(None))

    assert "status.pinned is write-once" in changed
    assert "status.pinned is write-once" in dropped
    assert "status cannot be removed once status.pinned is set" in removed
    run = api.get_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, "agentruns", "research-report")
    assert run["status"]["pinned"]["workflow"]["sha256"] == SHA_A


JOURNAL = {"endpoint": "http://10.96.0.83:8333", "bucket": "agentrun-journal",
           "prefix": "agentrun/ns/0d1e", "region": "us-east-1"}


@pytest.mark.parametrize(("field", "value", "says"), [
    ("endpoint", "ftp://store:21", "status.pinned.journal.endpoint"),
    ("endpoint", "http://store:9000/path", "status.pinned.journal.endpoint"),
    ("endpoint", "http://" + "s" * 600, "status.pinned.journal.endpoint"),
    ("bucket", "b1", "status.pinned.journal.bucket"),
    ("bucket", "Upper_Case", "status.pinned.journal.bucket"),
    ("prefix", "a/../b", "status.pinned.journal.prefix"),
    ("prefix", "/leading", "status.pinned.journal.prefix"),
    ("prefix", "p" * 600, "status.pinned.journal.prefix"),
])
def test_a_bad_journal_pin_is_refused_and_a_good_one_is_write_once(
        api_client: kubernetes.client.ApiClient, namespace: str, field: str, value: str,
        says: str) -> None:
    api = custom(api_client)
    create(api_client, example("30-agentrun.yaml"), namespace=namespace)

    def write_status(journal: dict[str, str]) -> None:
        run = api.get_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, "agentruns", "research-report")
        run["status"] = {"pinned": {**pins(SHA_A), "journal": journal}}
        api.replace_namespaced_custom_object_status(
            names.GROUP, names.VERSION, namespace, "agentruns", "research-report", run)

    assert says in rejection(lambda: write_status({**JOURNAL, field: value}))
    run = api.get_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, "agentruns", "research-report")
    assert "pinned" not in run.get("status", {})  # nothing written
    write_status(JOURNAL)
    moved = rejection(lambda: write_status({**JOURNAL, "bucket": "another-bucket"}))
    assert "status.pinned is write-once" in moved


def test_launchspec_restart_policy_always_is_rejected(
    api_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    spec = example("20-launchspec-cpu.yaml")
    spec["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    message = rejection(lambda: create(api_client, spec, namespace=namespace, dry_run=True))
    assert "template.spec.restartPolicy must be Never" in message


def test_bad_claim_policy_is_rejected(
    api_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    run = example("30-agentrun.yaml")
    run["spec"]["claimPolicy"] = "Sometimes"
    message = rejection(lambda: create(api_client, run, namespace=namespace, dry_run=True))
    assert 'spec.claimPolicy: Unsupported value: "Sometimes"' in message


def test_agentrun_name_over_49_characters_is_rejected(
    api_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    run = example("30-agentrun.yaml")
    run["metadata"]["name"] = "r" * 49
    create(api_client, run, namespace=namespace, dry_run=True)
    run["metadata"]["name"] = "r" * 50
    message = rejection(lambda: create(api_client, run, namespace=namespace, dry_run=True))
    assert "metadata.name must be at most 49 characters" in message


def test_run_configuration_refs_are_immutable(
    api_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    api = custom(api_client)
    create(api_client, example("30-agentrun.yaml"), namespace=namespace)
    run = api.get_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, "agentruns", "research-report")
    run["spec"]["workflow"] = {"name": "another-workflow"}
    message = rejection(lambda: api.replace_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, "agentruns", "research-report", run))
    assert "spec.workflow is immutable" in message


def test_kubectl_prints_the_columns_a_person_reads_first(
    cluster: Cluster, api_client: kubernetes.client.ApiClient, namespace: str,
    tmp_path: pathlib.Path,
) -> None:
    api = custom(api_client)
    create(api_client, example("30-agentrun.yaml"), namespace=namespace)
    run = api.get_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, "agentruns", "research-report")
    run["status"] = {"done": "1/2", "conditions": [
        {"type": "Ready", "status": "True", "reason": "SlotsCreated",
         "lastTransitionTime": "2025-01-01T00:00:00Z"},
        {"type": "Succeeded", "status": "False", "reason": "SlotsRunning",
         "lastTransitionTime": "2025-01-01T00:00:00Z"}]}
    api.replace_namespaced_custom_object_status(
        names.GROUP, names.VERSION, namespace, "agentruns", "research-report", run)
    create(api_client, slot_body(), namespace=namespace)

    cache = ("--cache-dir", str(tmp_path))  # discovery cached before the CRDs would hide them
    runs_table = cluster.kubectl(*cache, "get", "durable", "-n", namespace)
    slots_table = cluster.kubectl(*cache, "get", "aslot", "-n", namespace, "-o", "wide")

    assert runs_table.returncode == 0, runs_table.stderr
    header, row = runs_table.stdout.splitlines()[:2]
    assert header.split()[:5] == ["NAME", "READY", "SUCCEEDED", "DONE", "AGE"]
    assert row.split()[:4] == ["agentrun.agentrun.dev/research-report", "True", "False", "1/2"]
    assert slots_table.returncode == 0, slots_table.stderr
    assert slots_table.stdout.split()[:10] == [
        "NAME", "STATE", "CLASS", "WORKER", "ATTEMPTS", "LAUNCHSPEC", "AGE", "PRIOR", "RUN",
        "NODE"]


def forked(**fork: Any) -> dict[str, Any]:
    body = example("30-agentrun.yaml")
    body["metadata"]["name"] = "research-report-b"
    body["spec"]["fork"] = {"run": "research-report", "reason": "another angle", **fork}
    return body


@pytest.mark.parametrize(("fork", "says"), [
    ({"at": "Draft:outline"}, "spec.fork.at"),
    ({"at": "draft"}, "spec.fork.at"),
    ({"at": "draft:out.line"}, "spec.fork.at"),
    ({"at": "draft:" + "s" * 49}, "spec.fork.at"),
    ({"reason": ""}, "spec.fork.reason"),
    ({"run": "other-namespace/research-report"}, "spec.fork.run"),  # a name, no namespace
    ({"uid": "Not A Uid"}, "spec.fork.uid"),
])
def test_a_malformed_fork_is_refused_at_create(
        api_client: kubernetes.client.ApiClient, namespace: str, fork: dict[str, Any],
        says: str) -> None:
    message = rejection(lambda: create(api_client, forked(**fork), namespace=namespace))
    assert says in message, message


def test_a_fork_is_set_at_create_never_after_and_never_changes(
        api_client: kubernetes.client.ApiClient, namespace: str) -> None:
    api = custom(api_client)
    create(api_client, example("30-agentrun.yaml"), namespace=namespace)
    create(api_client, forked(at="research:outline"), namespace=namespace)

    def replace(name: str, change: Callable[[dict[str, Any]], None]) -> None:
        run = api.get_namespaced_custom_object(names.GROUP, names.VERSION, namespace,
                                               "agentruns", name)
        change(run["spec"])
        api.replace_namespaced_custom_object(names.GROUP, names.VERSION, namespace,
                                             "agentruns", name, run)

    added = rejection(lambda: replace("research-report", lambda spec: spec.update(
        fork={"run": "research-report-b", "reason": "late"})))
    changed = rejection(lambda: replace("research-report-b", lambda spec: spec["fork"].update(
        at="research:draft")))
    dropped = rejection(lambda: replace("research-report-b", lambda spec: spec.pop("fork")))
    assert "spec.fork is set when a run is created and never after" in added
    assert "spec.fork is immutable" in changed
    assert "spec.fork is set when a run is created and never after" in dropped


def test_a_forks_provenance_is_write_once(
        api_client: kubernetes.client.ApiClient, namespace: str) -> None:
    api = custom(api_client)
    create(api_client, forked(), namespace=namespace)
    provenance = {"run": "research-report", "uid": "0d1e", "reason": "another angle",
                  "copied": "2026-12-05T06:00:00Z", "inherited": []}

    def write_status(status: dict[str, Any]) -> None:
        run = api.get_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, "agentruns", "research-report-b")
        run["status"] = status
        api.replace_namespaced_custom_object_status(
            names.GROUP, names.VERSION, namespace, "agentruns", "research-report-b", run)

    write_status({"pinned": pins(SHA_A), "fork": provenance})
    changed = rejection(lambda: write_status({"pinned": pins(SHA_A), "fork": {
        **provenance, "uid": "another"}}))
    dropped = rejection(lambda: write_status({"pinned": pins(SHA_A)}))
    assert "status.fork is write-once" in changed and "status.fork is write-once" in dropped
