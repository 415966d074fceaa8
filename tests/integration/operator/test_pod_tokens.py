"""An editor cannot act as an attempt's pod: no token bound to it, no change to it.

With the shipped validating policies in force (``serial``), no operator and no node: the
admin plays the operator (the attempt's Pod, unscheduled, labelled ``agentrun.dev/attempt``
and running as the worker's ServiceAccount, and its Lease held by that pod). ``alice``
holds the standard ``edit`` role in the tenant's namespace, which grants ``create`` on
``serviceaccounts/token``, ``impersonate`` on serviceaccounts and writes on pods.
Covers: alice's TokenRequest bound to the attempt's pod is refused with a 403 naming the
policy, the pod and the way out, and so is one bound to a pod of her own; a token she
may mint (bound to no pod, or to a Secret) and impersonating the ServiceAccount write
no record; a token bound to her own pod (what her pod's kubelet would give it) writes
none on the attempt's Lease; she can neither change the attempt pod's image nor add an
ephemeral container to it (even once granted that subresource); the Lease holds no record.
"""

from __future__ import annotations

import json

import kubernetes
import pytest

from agentrun import manifests
from agentrun.api import names
from agentrun.core.policies import leasepolicy, tokenpolicy
from agentrun.core.policies.validating import OPERATOR_OBJECTS
from agentrun.worker import _records as records
from tests.support.plays.scenarios import Scenario
from tests.support.waiting import wait_for, wait_for_default_service_account

pytestmark = pytest.mark.serial
ACCOUNT, SLOT = "agentrun-worker", "study-research-0a1b2c3d"
ATTEMPT, OWN = f"{SLOT}-1", "alice-own"
EPHEMERAL_RIGHTS = [{"apiGroups": [""], "resources": ["pods/ephemeralcontainers"],
                     "verbs": ["update", "patch"]}]


def bind(scenario: Scenario, name: str, role: tuple[str, str], subject: dict[str, str]) -> None:
    scenario.rbac.create_namespaced_role_binding(scenario.namespace, {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role[0], "name": role[1]},
        "subjects": [subject]})


def pod(name: str, labels: dict[str, str]) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"serviceAccountName": ACCOUNT, "restartPolicy": "Never",
                     "schedulerName": "agentrun-test-unserved",
                     "containers": [{"name": "worker", "image": "localhost/unused:0"}]}}


def token_request(scenario: Scenario, *, user: str,
                  bound: dict[str, str] | None) -> tuple[int, str]:
    """``create serviceaccounts/token`` for the worker's account: (status, token or error)."""
    core = kubernetes.client.CoreV1Api(scenario.cluster.client(user))
    spec = {"expirationSeconds": 600, **({"boundObjectRef": bound} if bound else {})}
    try:
        made = core.create_namespaced_service_account_token(ACCOUNT, scenario.namespace,
                                                            {"spec": spec})
    except kubernetes.client.ApiException as error:
        return error.status, json.loads(error.body)["message"]
    return 201, made.status.token


def add_record(scenario: Scenario, *identity: str, user: str = "admin") -> tuple[int, str]:
    made = records.make(key="gather", kind=records.Kind.STEP_RESULT, attempt=1,
                        payload={"notes": "not the attempt's"})
    patch = json.dumps({"metadata": {"annotations": {made.annotation: records.encode(made)}}})
    result = scenario.cluster.kubectl(*identity, "-n", scenario.namespace, "patch", "lease",
                                      ATTEMPT, "--type=merge", "-p", patch, user=user)
    return result.returncode, result.stderr


def test_an_editor_can_neither_mint_an_attempt_pods_token_nor_change_its_pod(
        scenario: Scenario, validating: None) -> None:
    namespace = scenario.namespace
    alice = {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}
    bind(scenario, "alice-edit", ("ClusterRole", "edit"), alice)
    scenario.core.create_namespaced_service_account(namespace, {"metadata": {"name": ACCOUNT}})
    bind(scenario, ACCOUNT, ("ClusterRole", manifests.WORKER_ROLE),
         {"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace})
    wait_for_default_service_account(scenario.core.api_client, namespace)
    uid = scenario.core.create_namespaced_pod(namespace, pod(ATTEMPT, {
        names.ATTEMPT_LABEL: "1", names.SLOT_LABEL: SLOT})).metadata.uid
    scenario.coordination.create_namespaced_lease(namespace, {"metadata": {
        "name": ATTEMPT, "labels": {names.ATTEMPT_LABEL: "1", names.SLOT_LABEL: SLOT}},
        "spec": {"holderIdentity": ATTEMPT, "leaseDurationSeconds": 30}})
    created = scenario.cluster.kubectl("-n", namespace, "create", "-f", "-", user="alice",
                                       input=json.dumps(pod(OWN, {})))
    assert created.returncode == 0, created.stderr
    own_uid = scenario.core.read_namespaced_pod(OWN, namespace).metadata.uid

    def bound(name: str, kind: str = "Pod", uid: str = "") -> dict[str, str]:
        return {"apiVersion": "v1", "kind": kind, "name": name, **({"uid": uid} if uid else {})}

    # The policy lands with the fixture's others, not necessarily at the same moment.
    refused = wait_for(lambda: (found := token_request(
        scenario, user="alice", bound=bound(ATTEMPT, uid=uid)))[0] != 201 and found,
        timeout=30, message=f"{tokenpolicy.POD_TOKENS} in force")
    assert refused[0] == 403, refused
    message = refused[1]
    assert f"ValidatingAdmissionPolicy '{tokenpolicy.POD_TOKENS}'" in message, message
    assert f"a token bound to pod {ATTEMPT} could write records" in message, message
    assert f"kubectl create token {ACCOUNT} without --bound-object-kind Pod" in message
    status, message = token_request(scenario, user="alice", bound=bound(OWN, uid=own_uid))
    assert status == 403 and f"a token bound to pod {OWN}" in message, message

    # What alice may still mint carries no pod, so no record gets through with it.
    secret = scenario.cluster.kubectl("-n", namespace, "create", "secret", "generic",
                                      "alice-binding", user="alice")
    assert secret.returncode == 0, secret.stderr
    for target in (None, bound("alice-binding", "Secret")):
        status, token = token_request(scenario, user="alice", bound=target)
        assert status == 201, token
        code, error = add_record(scenario, "--token", token)
        assert code != 0 and f"Lease {ATTEMPT} is held by pod {ATTEMPT}" in error, error
    worker = f"system:serviceaccount:{namespace}:{ACCOUNT}"
    code, error = add_record(scenario, "--as", worker, user="alice")
    assert code != 0 and leasepolicy.ATTEMPT_LEASES in error, error
    code, error = add_record(scenario, "--as", worker, "--as-user-extra",
                             f"{leasepolicy.POD_NAME}={ATTEMPT}", user="alice")
    assert code != 0 and "cannot impersonate resource \"userextras" in error, error
    # Her own pod's token (what its kubelet gets) is not the attempt's pod's.
    status, own_token = token_request(scenario, user="admin", bound=bound(OWN, uid=own_uid))
    assert status == 201, own_token
    code, error = add_record(scenario, "--token", own_token)
    assert code != 0 and f"Lease {ATTEMPT} is held by pod {ATTEMPT}" in error, error

    # Nor can she make the attempt's pod run something else.
    image = scenario.cluster.kubectl("-n", namespace, "set", "image", f"pod/{ATTEMPT}",
                                     "worker=localhost/hers:0", user="alice")
    assert image.returncode != 0 and OPERATOR_OBJECTS in image.stderr, image.stderr
    ephemeral = ("-n", namespace, "debug", ATTEMPT, "--image=localhost/hers:0",
                 "--container=hers", "--profile=general")
    denied = scenario.cluster.kubectl(*ephemeral, user="alice")
    assert denied.returncode != 0 and "forbidden" in denied.stderr, denied.stderr
    scenario.rbac.create_namespaced_role(namespace, {"metadata": {"name": "debug"},
                                                     "rules": EPHEMERAL_RIGHTS})
    bind(scenario, "alice-debug", ("Role", "debug"), alice)
    debug = wait_for(lambda: (found := scenario.cluster.kubectl(*ephemeral, user="alice"))
                     .returncode != 0 and OPERATOR_OBJECTS in found.stderr
                     and found, timeout=30, message="alice's debug refused by admission")
    assert f"Pod {ATTEMPT} carries the agentrun operator's labels" in debug.stderr

    lease = scenario.coordination.read_namespaced_lease(ATTEMPT, namespace)
    assert not [k for k in lease.metadata.annotations or {} if k.startswith("record.")]
    attempt_pod = scenario.core.read_namespaced_pod(ATTEMPT, namespace)
    assert [c.image for c in attempt_pod.spec.containers] == ["localhost/unused:0"]
    assert not attempt_pod.spec.ephemeral_containers
