"""Attempt Leases: only the holder's pod renews its own, never a tombstone.

With the shipped validating policies in force (``serial``) and worker tokens bound to the
attempt pods (``kubectl create token --bound-object-kind Pod``; no node needed). Attempt 1
fails and is tombstoned, attempt 2 runs. Covers: the holder's token renews its Lease; the
stale worker of attempt 1 can renew neither its tombstoned Lease nor attempt 2's; the
holder cannot change anything but ``spec.renewTime``, nor delete or create an attempt
Lease; the holder adds a record (``record.agentrun.dev/<key>``) but cannot change or
delete it, the stale worker cannot add one to the successor's Lease nor (a late write,
its pod still there) to its own tombstoned one, each refusal naming the policy; a person
with ``update`` on leases cannot renew one; other Leases are not matched;
the namespace controller still empties a deleted namespace. The holder releases its Lease
(its last write): only in the documented shape, not a person; nothing of the holder's is
accepted after it, and the attempt ends as soon as its pod finished, not at expiry.

An impostor pod (a bad-input case): ``alice``, an editor of the namespace (the standard
``edit`` role), deletes an attempt's pod and creates an unlabelled one under the same name
and ServiceAccount, and uses a token bound to it. Attempt 1's pod renewed first, which
bound its Lease to its uid: the impostor can neither renew nor add a record (the refusal
names both uids), nor can the holder change or remove the binding; with its pod gone the
attempt ends Lost and attempt 2 is claimed. Attempt 2's impostor acts while the operator
is down, before the pod's first renewal, so it binds the Lease and commits a record there:
the operator, started again, ends the attempt at once although the impostor keeps
renewing, its tombstone names the attempt's pod uid, and attempt 3's prefix does not
trust the impostor's record.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import kubernetes
import pytest

from agentrun.api import names
from agentrun.api.meta import micro_time
from agentrun.worker import _prefix as prefix
from agentrun.worker import _records as records
from tests.support.actors.operators import OperatorProcess
from tests.support.plays.scenarios import HAND_PLAYED, Scenario
from tests.support.waiting import wait_for, wait_for_default_service_account

pytestmark = pytest.mark.serial
POLICY = "agentrun-attempt-leases"
LEASE_RIGHTS = [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                 "verbs": ["get", "create", "update", "patch", "delete"]}]


def grant(scenario: Scenario, name: str, subject: dict[str, str]) -> None:
    scenario.rbac.create_namespaced_role(scenario.namespace, {
        "metadata": {"name": name}, "rules": LEASE_RIGHTS})
    scenario.rbac.create_namespaced_role_binding(scenario.namespace, {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [subject]})


def token_for(scenario: Scenario, pod: str) -> str:
    made = scenario.cluster.kubectl("-n", scenario.namespace, "create", "token", "default",
                                    "--bound-object-kind", "Pod", "--bound-object-name", pod)
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def renew(scenario: Scenario, lease: str, *, token: str | None = None, user: str = "admin",
          spec: dict[str, object] | None = None) -> tuple[int, str]:
    now = micro_time(datetime.now(UTC))
    patch = json.dumps({"spec": spec or {"renewTime": now}})
    auth = ("--token", token) if token else ()
    result = scenario.cluster.kubectl(*auth, "-n", scenario.namespace, "patch", "lease",
                                      lease, "--type=merge", "-p", patch, user=user)
    return result.returncode, result.stderr


def annotate(scenario: Scenario, lease: str, annotations: dict[str, str | None], *,
             token: str) -> tuple[int, str]:
    patch = json.dumps({"metadata": {"annotations": annotations}})
    result = scenario.cluster.kubectl("--token", token, "-n", scenario.namespace, "patch",
                                      "lease", lease, "--type=merge", "-p", patch)
    return result.returncode, result.stderr


def record(key: str, attempt: int, payload: object) -> dict[str, str | None]:
    made = records.make(key=key, kind=records.Kind.STEP_RESULT, attempt=attempt,
                        payload=payload)
    return {made.annotation: records.encode(made)}


def started(scenario: Scenario, *, lease_seconds: int, max_attempts: int,
            user: str = "admin") -> str:
    """A run of one node, its attempt 1 Active (its pod unscheduled): the slot."""
    scenario.configs()
    scenario.launch_spec("cpu-workers", classes=["cpu"], lease_seconds=lease_seconds)
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)
    scenario.run("study", user=user, max_attempts=max_attempts)
    slot = scenario.slot_name_eventually("study", "research")
    scenario.wait_state(slot, "Active")
    return slot


def test_only_the_holders_pod_renews_and_never_a_tombstone(
        scenario: Scenario, operator: OperatorProcess, validating: None) -> None:
    scenario.grant_editor("alice")
    slot = started(scenario, lease_seconds=30, max_attempts=2, user="alice")
    first, second = f"{slot}-1", f"{slot}-2"
    grant(scenario, "worker-leases", {"kind": "ServiceAccount", "name": "default",
                                      "namespace": scenario.namespace})
    grant(scenario, "alice-leases", {"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                     "name": "alice"})
    stale = token_for(scenario, first)
    assert renew(scenario, first, token=stale)[0] == 0  # the holder renews its own

    scenario.finish(first, "Failed", exit_code=1)
    wait_for(lambda: scenario.slot(slot)["status"].get("activeWorker") == second, timeout=60,
             message="attempt 2 active")
    wait_for(lambda: (scenario.lease(first) or {}).get("metadata", {}).get(
        "annotations", {}).get("agentrun.dev/outcome"), timeout=30,
        message="attempt 1's lease tombstoned")
    tombstone = scenario.lease(first)
    code, error = renew(scenario, first, token=stale)
    assert code != 0 and f"Lease {first} is tombstoned" in error, error
    code, error = renew(scenario, second, token=stale)
    assert code != 0 and f"Lease {second} is held by pod {second}" in error, error

    holder = token_for(scenario, second)
    assert renew(scenario, second, token=holder)[0] == 0
    gather = record("gather", 2, [1])
    assert annotate(scenario, second, gather, token=holder) == (0, "")
    for change in (record("gather", 2, [2]), dict.fromkeys(gather)):
        code, error = annotate(scenario, second, change, token=holder)
        assert code != 0 and POLICY in error and "records are write-once" in error, error
    code, error = annotate(scenario, second, record("notes", 2, "x"), token=stale)
    assert code != 0 and POLICY in error and f"held by pod {second}" in error, error
    code, error = annotate(scenario, first, record("late", 1, "x"), token=stale)
    assert code != 0 and POLICY in error and f"Lease {first} is tombstoned" in error, error
    code, error = renew(scenario, second, token=holder, spec={"leaseDurationSeconds": 86400})
    assert code != 0 and "only spec.renewTime" in error, error
    deleted = scenario.cluster.kubectl("--token", holder, "-n", scenario.namespace, "delete",
                                       "lease", second)
    assert deleted.returncode != 0 and "the operator's record" in deleted.stderr
    created = scenario.cluster.kubectl("--token", holder, "-n", scenario.namespace, "create",
                                       "-f", "-", input=json.dumps({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": f"{slot}-3", "labels": {"agentrun.dev/attempt": "3"}},
        "spec": {"holderIdentity": f"{slot}-3"}}))
    assert created.returncode != 0 and "the operator's record" in created.stderr
    code, error = renew(scenario, second, user="alice")
    assert code != 0 and "with a token bound to that pod" in error, error

    assert scenario.lease(first) == tombstone  # nothing got through
    lease = scenario.lease(second) or {}
    assert lease["spec"]["leaseDurationSeconds"] == 30
    assert {k: v for k, v in lease["metadata"]["annotations"].items()
            if k.startswith("record.")} == gather
    # A Lease of the worker's own, without the attempt label, is not the policy's business.
    own = scenario.cluster.kubectl("--token", holder, "-n", scenario.namespace, "create",
                                   "-f", "-", input=json.dumps({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "my-own-lock"}, "spec": {"holderIdentity": "me"}}))
    assert own.returncode == 0, own.stderr

    # The namespace controller empties a deleted namespace, attempt Leases included.
    scenario.core.delete_namespace(scenario.namespace)

    def gone() -> bool:
        try:
            scenario.core.read_namespace(scenario.namespace)
        except kubernetes.client.ApiException as error:
            return error.status == 404
        return False
    wait_for(gone, timeout=120, message="the namespace deleted, its Leases with it")


def as_editor(scenario: Scenario, *args: str, input: str | None = None) -> str:
    """``kubectl`` as ``alice`` (the namespace's ``edit`` role); its output."""
    result = scenario.cluster.kubectl("-n", scenario.namespace, *args, user="alice",
                                      input=input)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def impostor(scenario: Scenario, pod: str) -> tuple[str, str]:
    """As alice: delete ``pod`` and create an unlabelled pod of that name and
    ServiceAccount; its uid, and a token bound to it (minted by the admin, as the kubelet
    running it would: alice herself may not, ``agentrun-pod-tokens``)."""
    as_editor(scenario, "delete", "pod", pod, "--wait=true")
    created = json.loads(as_editor(scenario, "create", "-o", "json", "-f", "-",
                                   input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod},
        "spec": {"serviceAccountName": "default", "schedulerName": HAND_PLAYED,
                 "containers": [{"name": "mine", "image": "busybox:1.36"}]}})))
    return created["metadata"]["uid"], token_for(scenario, pod)


def annotations_of(scenario: Scenario, lease: str) -> dict[str, str]:
    found: dict[str, str] = (scenario.lease(lease) or {})["metadata"].get("annotations") or {}
    return found


def test_a_pod_run_under_the_attempts_name_is_not_its_pod(
        scenario: Scenario, operator: OperatorProcess, validating: None) -> None:
    scenario.grant_edit("alice")
    slot = started(scenario, lease_seconds=5, max_attempts=3)
    grant(scenario, "worker-leases", {"kind": "ServiceAccount", "name": "default",
                                      "namespace": scenario.namespace})
    first, second, third = f"{slot}-1", f"{slot}-2", f"{slot}-3"

    # Attempt 1's own pod renews first: admission binds the Lease to its uid.
    own = (scenario.pod(first) or {})["metadata"]["uid"]
    holder = token_for(scenario, first)
    assert renew(scenario, first, token=holder)[0] == 0
    assert annotations_of(scenario, first)[names.HOLDER_UID_ANNOTATION] == own
    for value in ("another", None):  # changed or removed: the binding stays as stamped
        code, error = annotate(scenario, first, {names.HOLDER_UID_ANNOTATION: value},
                               token=holder)
        assert code != 0 and POLICY in error, error
    uid, forger = impostor(scenario, first)
    bound = f"is bound to the pod of uid {own}"
    code, error = renew(scenario, first, token=forger)
    assert code != 0 and POLICY in error and bound in error and uid in error, error
    code, error = annotate(scenario, first, record("gather", 1, "forged"), token=forger)
    assert code != 0 and POLICY in error and bound in error, error
    assert not any(k.startswith(records.PREFIX) for k in annotations_of(scenario, first))
    # Its pod gone and nobody renewing, attempt 1 ends; attempt 2 is claimed.
    wait_for(lambda: scenario.slot(slot)["status"].get("activeWorker") == second, timeout=60,
             message="attempt 2 active")
    assert scenario.slot(slot)["status"]["attempts"][0]["outcome"] == "Lost"
    assert (scenario.pod(first) or {})["metadata"]["uid"] == uid  # alice's: not fenced

    # Attempt 2: with the operator down, an impostor is first to write its Lease.
    pod_uid = wait_for(lambda: (scenario.pod(second) or {}).get("metadata", {}).get("uid"),
                       timeout=30, message=f"pod {second}")
    operator.stop()
    uid, forger = impostor(scenario, second)
    assert renew(scenario, second, token=forger) == (0, "")
    assert annotate(scenario, second, record("gather", 2, "forged"), token=forger) == (0, "")
    assert annotations_of(scenario, second)[names.HOLDER_UID_ANNOTATION] == uid
    operator.start()

    def moved_on() -> bool:
        renew(scenario, second, token=forger)  # the impostor keeps renewing
        return bool(scenario.slot(slot)["status"].get("activeWorker") == third)
    wait_for(moved_on, timeout=30, message="attempt 3 active although attempt 2 is renewed")
    ended = scenario.slot(slot)["status"]["attempts"][1]
    assert ended["outcome"] == "Lost" and f"bound to the pod of uid {uid}" in ended["reason"]

    def tombstoned() -> dict[str, str] | None:
        found = annotations_of(scenario, second)
        return found if names.OUTCOME_ANNOTATION in found else None
    tombstone = wait_for(tombstoned, timeout=30, message=f"Lease {second} tombstoned")
    assert tombstone[names.POD_UID_ANNOTATION] == pod_uid
    assert tombstone[names.HOLDER_UID_ANNOTATION] == uid
    leases = [scenario.lease(first) or {}, scenario.lease(second) or {}]
    found = prefix.prefix(leases=leases, attempt=3)
    assert "gather" not in found.committed, found
    assert any(second in p and "not trusted" in p for p in found.problems), found.problems


def test_a_released_lease_is_sealed_and_ends_its_attempt_once_the_pod_finished(
        scenario: Scenario, operator: OperatorProcess, validating: None) -> None:
    """The holder's last write releases its Lease (agentrun.dev/released, when): nobody
    else may, in no other shape; after it the holder writes nothing more, and the attempt
    ends as soon as its pod has finished, long before its 120 s lease could expire."""
    scenario.grant_editor("alice")
    slot = started(scenario, lease_seconds=120, max_attempts=1)
    lease = f"{slot}-1"
    grant(scenario, "worker-leases", {"kind": "ServiceAccount", "name": "default",
                                      "namespace": scenario.namespace})
    grant(scenario, "alice-leases", {"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                     "name": "alice"})
    holder = token_for(scenario, lease)
    assert renew(scenario, lease, token=holder)[0] == 0
    now = micro_time(datetime.now(UTC))
    for bad in ("yesterday", now + " ", "2026-13-01"[:7]):
        code, error = annotate(scenario, lease, {names.RELEASED_ANNOTATION: bad}, token=holder)
        assert code != 0 and POLICY in error and "in RFC 3339 UTC" in error, (bad, error)
    patch = json.dumps({"metadata": {"annotations": {names.RELEASED_ANNOTATION: now}}})
    by_alice = scenario.cluster.kubectl("-n", scenario.namespace, "patch", "lease", lease,
                                        "--type=merge", "-p", patch, user="alice")
    assert by_alice.returncode != 0 and "with a token bound to that pod" in by_alice.stderr
    assert annotate(scenario, lease, {names.RELEASED_ANNOTATION: now}, token=holder) == (0, "")
    sealed = scenario.lease(lease)
    code, error = renew(scenario, lease, token=holder)
    assert code != 0 and f"Lease {lease} is tombstoned" in error and "released" in error, error
    code, error = annotate(scenario, lease, record("late", 1, "x"), token=holder)
    assert code != 0 and f"Lease {lease} is tombstoned" in error, error
    code, error = annotate(scenario, lease, {names.RELEASED_ANNOTATION: None}, token=holder)
    assert code != 0 and f"Lease {lease} is tombstoned" in error, error
    assert scenario.lease(lease) == sealed

    scenario.finish(lease, "Succeeded", exit_code=0)
    wait_for(lambda: scenario.slot(slot)["status"].get("state") == "Succeeded", timeout=30,
             message="the slot Succeeded, its lease released (not expired: 120 s)")
    attempt = scenario.slot(slot)["status"]["attempts"][-1]
    assert attempt["outcome"] == "Succeeded"
    assert attempt["reason"].endswith("the lease is released"), attempt
