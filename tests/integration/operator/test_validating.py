"""Synchronous rejection by the shipped ValidatingAdmissionPolicies.

With ``manifests/admission/validating.yaml`` installed (``serial``: cluster-wide; removed
after), as the real users: ``kubectl annotate`` itself fails, with the policy's message,
and writes nothing, for a blank or oversize reason, a missing request id or run, a value
over its bound, a command the slot's status does not accept, and ``bob`` forging
``reassign-actor: alice`` (stamped as bob, refused as not the owner). A person relabelling
a Slot, setting or editing ``agentrun.dev/accepted`` configuration, or creating or changing
a Pod or ConfigMap with the operator's labels is refused. The operator's own writes, a
whole reassignment cycle and a foreground cascading delete (the garbage collector) go
through with the policies installed.
"""

from __future__ import annotations

import json

import pytest

from tests.support.actors.operators import OperatorProcess
from tests.support.cluster.clusters import Cluster
from tests.support.plays.scenarios import Scenario, request_id
from tests.support.waiting import wait_for

pytestmark = pytest.mark.serial

ANN = "agentrun.dev/"
WRITER_RULES = [{"apiGroups": [""], "resources": ["pods", "configmaps"],
                 "verbs": ["create", "update", "patch"]}]


def annotate(scenario: Scenario, slot: str, *pairs: str, user: str = "alice") -> str:
    """``kubectl annotate`` that admission must refuse: its error text."""
    result = scenario.cluster.kubectl("-n", scenario.namespace, "annotate", "--overwrite",
                                      f"slots.agentrun.dev/{slot}", *pairs, user=user)
    assert result.returncode != 0, f"accepted: {pairs}"
    assert "denied request" in result.stderr, result.stderr
    return result.stderr


def reassign_pairs(rid: str, **values: str) -> list[str]:
    fields = {"id": rid, "run": "study", "worker-class": "cpu", "reason": "the worker died"}
    fields.update({k.replace("_", "-"): v for k, v in values.items()})
    return [f"{ANN}reassign-{k}={v}" for k, v in fields.items()]


def test_bad_commands_fail_in_kubectl_and_write_nothing(
        scenario: Scenario, operator: OperatorProcess, validating: None) -> None:
    slot = scenario.owned_retry_wait(owner="alice")
    before = scenario.slot(slot)
    cases = {
        "blank reason": (reassign_pairs(request_id(), reason="   "),
                         f"{ANN}reassign-reason is required"),
        "oversize reason": (reassign_pairs(request_id(), reason="x" * 1025),
                            "at most 1024 bytes"),
        "hold without reason": ([f"{ANN}hold-id={request_id()}"],
                                f"{ANN}hold-reason is required"),
        "release not held": ([f"{ANN}release-id={request_id()}"],
                             "the slot is RetryWait: only a held slot can be released"),
        "missing run": ([p for p in reassign_pairs(request_id()) if "-run=" not in p],
                        f"{ANN}reassign-run is required"),
        "wrong run": (reassign_pairs(request_id(), run="another"), "must name the slot's run"),
        "missing id": ([p for p in reassign_pairs("x") if "-id=" not in p],
                       f"needs its request id: set {ANN}reassign-id"),
        "oversize id": (reassign_pairs("r" * 254), "at most 253 characters"),
        "oversize class": (reassign_pairs(request_id(), worker_class="c" * 64),
                           "at most 63 characters"),
        "malformed class": (reassign_pairs(request_id(), worker_class="GPU!"),
                            "must be a worker class name"),
        "malformed rerun step": ([f"{ANN}rerun-id={request_id()}", f"{ANN}rerun-run=study",
                                  f"{ANN}rerun-reason=redo", f"{ANN}rerun-from-step=Draft!"],
                                 f"{ANN}rerun-from-step must be a step's key"),
        "wrong tenant": (reassign_pairs(request_id(), tenant="someone-else"),
                         f"must be the namespace's tenant (its label {ANN}tenant, here "
                         f"{scenario.namespace})"),
    }
    for name, (pairs, says) in cases.items():
        error = annotate(scenario, slot, *pairs)
        assert says in error, (name, error)
    # bob forges alice as the actor: stamped as bob, refused as not the owner.
    error = annotate(scenario, slot, *reassign_pairs(request_id()),
                     f"{ANN}reassign-actor=alice", user="bob")
    assert "the attempt is owned by alice, not bob" in error
    assert "'override'" in error
    after = scenario.slot(slot)
    # Nothing was written (no resourceVersion moved), nothing decided.
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["metadata"].get("annotations") == before["metadata"].get("annotations")
    assert after["status"] == before["status"]

    # A state the slot does not accept: a give-up is fine, then nothing more on a Failed slot.
    gave_up = request_id()
    assert scenario.annotate(slot, user="alice", give_up_id=gave_up,
                             give_up_reason="wrong question").returncode == 0
    assert scenario.wait_ledger(slot, gave_up)["outcome"] == "Accepted"
    scenario.wait_state(slot, "Failed")
    error = annotate(scenario, slot, *reassign_pairs(request_id()))
    assert "the slot is Failed: only a RetryWait slot" in error
    error = annotate(scenario, slot, f"{ANN}hold-id={request_id()}", f"{ANN}hold-reason=x")
    assert "the slot has already finished" in error


def test_people_change_only_command_annotations_and_never_the_operators_objects(
        scenario: Scenario, operator: OperatorProcess, validating: None,
        cluster: Cluster) -> None:
    slot = scenario.owned_retry_wait(owner="alice")
    ns = ("-n", scenario.namespace)
    relabel = cluster.kubectl(*ns, "label", "--overwrite", f"slots.agentrun.dev/{slot}",
                              f"{ANN}run=elsewhere", user="alice")
    assert relabel.returncode != 0 and "a Slot's labels are kept by the operator" in \
        relabel.stderr
    other = cluster.kubectl(*ns, "annotate", f"slots.agentrun.dev/{slot}",
                            f"{ANN}launch-spec=forged", user="bob")
    assert other.returncode != 0 and "other than commands" in other.stderr
    assert scenario.slot(slot)["metadata"]["labels"][f"{ANN}run"] == "study"

    scenario.rbac.create_namespaced_role(scenario.namespace, {
        "metadata": {"name": "writer"}, "rules": WRITER_RULES})
    scenario.rbac.create_namespaced_role_binding(scenario.namespace, {
        "metadata": {"name": "writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "writer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": "alice"}]})
    pod = cluster.kubectl(*ns, "label", "--overwrite", f"pod/{slot}-1", "example.com/x=y",
                          user="alice")
    assert pod.returncode != 0 and "only the operator creates or changes it" in pod.stderr
    squat = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "study-package-0000000000", "labels": {f"{ANN}snapshot-of": "x"}}})
    made = cluster.kubectl(*ns, "create", "-f", "-", user="alice", input=squat)
    assert made.returncode != 0 and "only the operator creates or changes it" in made.stderr

    accepted = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "study-package-r9", "labels": {f"{ANN}config-kind": "package",
                                               f"{ANN}config-name": "study",
                                               f"{ANN}revision": "9",
                                               f"{ANN}accepted": "true"}},
        "data": {"package.yaml": "outcome: x\n"}})
    made = cluster.kubectl(*ns, "create", "-f", "-", user="alice", input=accepted)
    assert made.returncode != 0 and "GitOps/admin identity" in made.stderr
    edit = cluster.kubectl(*ns, "patch", "configmap", "study-package-r1", "--type=merge",
                           "-p", '{"data": {"package.yaml": "outcome: forged\\n"}}',
                           user="alice")
    assert edit.returncode != 0 and "GitOps/admin identity" in edit.stderr
    unaccept = cluster.kubectl(*ns, "label", "configmap", "study-package-r1",
                               f"{ANN}accepted-", user="alice")
    assert unaccept.returncode != 0 and "GitOps/admin identity" in unaccept.stderr
    draft = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "study-package-r2", "labels": {f"{ANN}config-kind": "package"}},
        "data": {"package.yaml": "outcome: y\n"}})
    assert cluster.kubectl(*ns, "create", "-f", "-", user="alice",
                           input=draft).returncode == 0  # a draft is anyone's
    assert cluster.kubectl(*ns, "label", "configmap", "study-package-r2",
                           f"{ANN}accepted=true").returncode == 0  # the admin accepts it


def test_the_operator_and_the_garbage_collector_are_never_blocked(
        scenario: Scenario, operator: OperatorProcess, validating: None,
        cluster: Cluster) -> None:
    slot = scenario.owned_retry_wait(owner="alice")
    rid = request_id()
    assert scenario.annotate(slot, user="alice", reassign_id=rid, reassign_run="study",
                             reassign_worker_class="cpu",
                             reassign_reason="retry it").returncode == 0
    assert scenario.wait_ledger(slot, rid)["outcome"] == "Accepted"
    claim = request_id()
    assert scenario.annotate(slot, user="alice", claim_id=claim).returncode == 0
    status = scenario.wait_state(slot, "Active")["status"]
    assert status["activeWorker"] == f"{slot}-2"

    deleted = cluster.kubectl("-n", scenario.namespace, "delete", "agentrun", "study",
                              "--cascade=foreground", "--wait=false", user="alice")
    assert deleted.returncode == 0, deleted.stderr

    def all_gone() -> bool:
        left = [scenario.custom.list_namespaced_custom_object(
                    "agentrun.dev", "v1alpha1", scenario.namespace, plural)["items"]
                for plural in ("agentruns", "slots")]
        return not any(left) and not scenario.pods() and not scenario.leases() and not [
            cm for cm in scenario.core.list_namespaced_config_map(scenario.namespace).items
            if (cm.metadata.labels or {}).get(f"{ANN}snapshot-of")]
    wait_for(all_gone, timeout=90, message="the run, its slots, pods, leases and snapshots "
                                            "deleted in the foreground")
