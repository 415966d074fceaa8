"""Building and observing agentrun scenarios in a test namespace.

A :class:`Scenario` publishes configuration (as GitOps would), LaunchSpecs, runs (as a
person would, through kubectl), plays the *worker* (renews the lease, finishes the pod:
there is no kubelet on the local control plane) and reads slots, pods and leases back.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import kubernetes
import yaml
from kubernetes.client.rest import ApiException

from agentrun.api import names
from agentrun.api.meta import micro_time
from tests.support.cluster.clusters import Cluster
from tests.support.waiting import wait_for, wait_for_default_service_account

GROUP, VERSION = "agentrun.dev", "v1alpha1"
Object = dict[str, Any]

def user_binding(name: str, *, kind: str, role: str, users: Sequence[str]) -> Object:
    """A RoleBinding named ``name`` of the ``kind`` (Role or ClusterRole) ``role`` to
    ``users`` (as the local control plane's client certificates name them)."""
    return {"metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u}
                         for u in users]}


EDITOR_RULES = [
    {"apiGroups": [GROUP], "resources": ["agentruns"],
     "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
    {"apiGroups": [GROUP], "resources": ["slots"], "verbs": ["get", "list", "watch", "patch",
                                                              "update"]},
    {"apiGroups": [GROUP], "resources": ["launchspecs"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods", "configmaps"], "verbs": ["get", "list"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list"]},
]


# No scheduler serves this name: the pods of these scenarios are never bound to the
# node, so no kubelet takes their status over while a test plays the worker by hand.
HAND_PLAYED = "agentrun.dev/hand-played"


def workflow(*nodes: tuple[str, str, list[str]]) -> str:
    return yaml.safe_dump({"nodes": [{"name": n, "workerClass": c, "dependsOn": d}
                                     for n, c, d in nodes]})


class Scenario:
    def __init__(self, *, cluster: Cluster, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        api = cluster.client()
        self.core = kubernetes.client.CoreV1Api(api)
        self.custom = kubernetes.client.CustomObjectsApi(api)
        self.coordination = kubernetes.client.CoordinationV1Api(api)
        self.rbac = kubernetes.client.RbacAuthorizationV1Api(api)

    # --- publishing (GitOps / admin) -------------------------------------------------
    def config(self, *, kind: str, name: str, revision: int, text: str,
               accepted: bool = True) -> Object:
        labels = {"agentrun.dev/config-kind": kind, "agentrun.dev/config-name": name,
                  "agentrun.dev/revision": str(revision)}
        if accepted:
            labels["agentrun.dev/accepted"] = "true"
        created: Object = self.core.create_namespaced_config_map(self.namespace, {
            "metadata": {"name": f"{name}-{kind}-r{revision}", "labels": labels},
            "data": {f"{kind}.yaml": text}}).to_dict()
        return created

    def configs(self, *, name: str = "study", revision: int = 1,
                nodes: tuple[tuple[str, str, list[str]], ...] = (("research", "cpu", []),),
                outcome: str = "a sourced report") -> None:
        self.config(kind="package", name=name, revision=revision,
                    text=yaml.safe_dump({"outcome": outcome}))
        self.config(kind="workflow", name=name, revision=revision, text=workflow(*nodes))
        self.config(kind="bindings", name=name, revision=revision, text=yaml.safe_dump({
            "nodes": [{"node": n, "agent": {"name": "researcher", "revision": "7"}}
                      for n, _, _ in nodes]}))

    def launch_spec(self, name: str, *, classes: list[str], image: str = "busybox:1.36",
                    runs: list[str] | None = None, nodes: list[str] | None = None,
                    priority: int = 0, lease_seconds: int = 5,
                    start_deadline_seconds: int = 60) -> Object:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LaunchSpec",
                "metadata": {"name": name},
                "spec": {"claim": {"workerClasses": classes},
                         "scope": {"runs": runs or [], "nodes": nodes or []},
                         "priority": priority, "lease": {"durationSeconds": lease_seconds},
                         "startDeadlineSeconds": start_deadline_seconds,
                         "template": {"metadata": {"labels": {"example/spec": name}},
                                      "spec": {"restartPolicy": "Never",
                                               "schedulerName": HAND_PLAYED,
                                               "containers": [
                                                   {"name": "worker", "image": image}]}}}}
        created: Object = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "launchspecs", body)
        return created

    def grant_editor(self, *users: str) -> None:
        self.rbac.create_namespaced_role(self.namespace, {
            "metadata": {"name": "agentrun-editor"}, "rules": EDITOR_RULES})
        self.rbac.create_namespaced_role_binding(self.namespace, user_binding(
            "agentrun-editor", kind="Role", role="agentrun-editor", users=users))

    def grant_edit(self, user: str) -> None:
        """The standard ``edit`` ClusterRole for ``user`` here: a namespace editor, who may
        delete and create pods and mint ServiceAccount tokens (and, aggregated into it,
        agentrun's editor rights)."""
        self.rbac.create_namespaced_role_binding(self.namespace, user_binding(
            f"{user}-edit", kind="ClusterRole", role="edit", users=[user]))

    # --- a person's actions ----------------------------------------------------------
    def run(self, name: str = "study", *, user: str = "admin", config: str = "study",
            claim_policy: str = "Automatic", max_attempts: int = 3,
            initial_backoff: int = 0, extra: Object | None = None) -> None:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentRun",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {"package": {"name": config}, "workflow": {"name": config},
                         "bindings": {"name": config}, "claimPolicy": claim_policy,
                         "retry": {"maxAttempts": max_attempts,
                                   "backoff": {"initialSeconds": initial_backoff}},
                         **(extra or {})}}
        result = self.cluster.kubectl("apply", "-f", "-", user=user, input=json.dumps(body))
        assert result.returncode == 0, result.stderr

    def annotate(self, slot: str, *, user: str, **annotations: str) -> Any:
        """``kubectl annotate`` as ``user``; keys are given without the agentrun.dev/ prefix."""
        pairs = [f"agentrun.dev/{key.replace('_', '-')}={value}"
                 for key, value in annotations.items()]
        return self.cluster.kubectl("-n", self.namespace, "annotate", "--overwrite",
                                    f"slots.{GROUP}/{slot}", *pairs, user=user)

    def owned_retry_wait(self, *, owner: str = "alice", editors: tuple[str, ...] = ("alice",
                                                                                   "bob")) -> str:
        """A Manual run of ``owner``'s whose only attempt (claimed by ``owner``) failed: the
        slot, in RetryWait with an owner actor. Needs the operator running."""
        self.grant_editor(*editors)
        self.configs()
        self.launch_spec("cpu-workers", classes=["cpu"])
        wait_for_default_service_account(self.core.api_client, self.namespace)
        self.run("study", user=owner, claim_policy="Manual", max_attempts=3)
        slot = self.slot_name_eventually("study", "research")
        self.wait_state(slot, "Ready")
        assert self.annotate(slot, user=owner, claim_id=request_id()).returncode == 0
        self.wait_state(slot, "Active")
        self.finish(f"{slot}-1", "Failed", exit_code=1)
        status = self.wait_state(slot, "RetryWait")["status"]
        assert status["attempts"][-1]["ownerActor"] == owner
        return slot

    # --- the worker's part (no kubelet here) -------------------------------------------
    def renew(self, lease: str) -> None:
        self.coordination.patch_namespaced_lease(
            lease, self.namespace, {"spec": {"renewTime": micro_time(datetime.now(UTC))}})

    def release(self, lease: str) -> None:
        """The worker lets go of its lease as it exits, as the SDK does: its last write
        adds ``agentrun.dev/released`` (here by the admin, whom the lease policy counts as
        the controller)."""
        now = micro_time(datetime.now(UTC))
        self.coordination.patch_namespaced_lease(
            lease, self.namespace, {"metadata": {"annotations": {names.RELEASED_ANNOTATION: now}}})

    def renewing(self, lease: str, *, every: float = 1.0) -> Renewing:
        """A worker renewing ``lease`` every ``every`` seconds until the block ends."""
        return Renewing(self, lease, every=every)

    def finish(self, pod: str, phase: str, *, exit_code: int | None = None) -> None:
        status: Object = {"phase": phase}
        if exit_code is not None:
            status["containerStatuses"] = [{
                "name": "worker", "ready": False, "restartCount": 0, "image": "busybox:1.36",
                "imageID": "", "state": {"terminated": {"exitCode": exit_code}}}]
        self.core.patch_namespaced_pod_status(pod, self.namespace, {"status": status})

    # --- reading -------------------------------------------------------------------------
    def slot_name(self, run: str, node: str) -> str:
        slots = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "slots",
            label_selector=f"agentrun.dev/run={run},agentrun.dev/node={node}")["items"]
        assert len(slots) == 1, slots
        name: str = slots[0]["metadata"]["name"]
        return name

    def slot_name_eventually(self, run: str, node: str, *, timeout: float = 60) -> str:
        found: str = wait_for(lambda: self.slot_name(run, node), timeout=timeout,
                              message=f"the slot of run {run} node {node}")
        return found

    def slot_names(self, run: str) -> list[str]:
        return sorted(s["metadata"]["name"] for s in self.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "slots",
            label_selector=f"agentrun.dev/run={run}")["items"])

    def slot(self, name: str) -> Object:
        found: Object = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "slots", name)
        return found

    def agentrun(self, name: str) -> Object:
        found: Object = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "agentruns", name)
        return found

    def wait_slot(self, name: str, predicate: Callable[[Object], bool], *, message: str,
                  timeout: float = 60) -> Object:
        def check() -> Object | None:
            slot = self.slot(name)
            return slot if predicate(slot) else None
        found: Object = wait_for(check, timeout=timeout, message=f"slot {name}: {message}")
        return found

    def wait_state(self, name: str, state: str, *, timeout: float = 60) -> Object:
        return self.wait_slot(name, lambda s: s.get("status", {}).get("state") == state,
                              message=f"state {state}", timeout=timeout)

    def wait_ledger(self, name: str, request_id: str, *, timeout: float = 60) -> Object:
        """Wait until the command is in the ledger and its annotations are gone."""
        def done(slot: Object) -> bool:
            ids = [c["requestId"] for c in slot.get("status", {}).get("commands", [])]
            annotations = slot["metadata"].get("annotations") or {}
            return request_id in ids and not any(
                k.startswith("agentrun.dev/") and k.endswith("-id") for k in annotations)
        slot = self.wait_slot(name, done, message=f"command {request_id} decided and removed",
                              timeout=timeout)
        entry: Object = next(c for c in slot["status"]["commands"]
                             if c["requestId"] == request_id)
        return entry

    def pod(self, name: str) -> Object | None:
        return self._or_none(lambda: self.core.read_namespaced_pod(name, self.namespace))

    def lease(self, name: str) -> Object | None:
        return self._or_none(lambda: self.coordination.read_namespaced_lease(name,
                                                                             self.namespace))

    def pods(self) -> list[str]:
        return sorted(p.metadata.name for p in self.core.list_namespaced_pod(
            self.namespace, label_selector="agentrun.dev/slot").items)

    def leases(self) -> list[str]:
        return sorted(lease.metadata.name for lease in self.coordination.list_namespaced_lease(
            self.namespace, label_selector="agentrun.dev/slot").items)

    def wait_event(self, reason: str, contains: str, *, timeout: float = 30) -> str:
        """Wait for an Event with ``reason`` whose message contains ``contains``."""
        found: str = wait_for(
            lambda: next((m for m in self.events(reason) if contains in m), None),
            timeout=timeout, message=f"an Event {reason} mentioning {contains!r}")
        return found

    def wait_condition(self, slot: str, type_: str, status: str, *,
                       timeout: float = 60) -> Object:
        """The slot's whole condition ``type_``, once its status is ``status``."""
        def shown() -> Object | None:
            found = condition_of(self.slot(slot).get("status", {}), type_)
            return found if found is not None and found["status"] == status else None
        result: Object = wait_for(shown, timeout=timeout,
                                  message=f"{type_} {status} on slot {slot}")
        return result

    def events(self, reason: str) -> list[str]:
        return [e.message for e in self.core.list_namespaced_event(self.namespace).items
                if e.reason == reason]

    @staticmethod
    def _or_none(read: Callable[[], Any]) -> Object | None:
        try:
            found: Object = kubernetes.client.ApiClient().sanitize_for_serialization(read())
            return found
        except ApiException as error:
            if error.status == 404:
                return None
            raise


def request_id() -> str:
    return uuid.uuid4().hex[:12]


def condition(status: Object, type_: str) -> str | None:
    """The status ("True", "False", "Unknown") of condition ``type_``, or None if absent."""
    found = [c for c in status.get("conditions", []) if c["type"] == type_]
    return found[0]["status"] if found else None


def condition_of(status: Object, type_: str) -> Object | None:
    """The whole condition ``type_`` (reason, message, ...), or None if absent."""
    return next((c for c in status.get("conditions", []) if c["type"] == type_), None)


GUARDED = ("state", "workerClass", "launchSpec", "priorWorker", "activeWorker",
           "pendingWorker", "attemptCount", "attempts", "retryAt")


def unchanged(before: Object, after: Object) -> None:
    """A rejection changes nothing but the ledger and the CommandRejected condition."""
    assert after["spec"] == before["spec"]
    b, a = before["status"], after["status"]
    assert {k: b.get(k) for k in GUARDED} == {k: a.get(k) for k in GUARDED}


class Renewing:
    """Plays a live worker: renews a lease from a background thread while the block runs."""

    def __init__(self, scenario: Scenario, lease: str, *, every: float) -> None:
        self.scenario = scenario
        self.lease = lease
        self.every = every
        self.renewals = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.scenario.renew(self.lease)
            self.renewals += 1
            self._stop.wait(self.every)  # the worker's renewal period, not a synchronisation

    def __enter__(self) -> Renewing:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def exhausted_beside_active(scenario: Scenario) -> tuple[str, str, list[str]]:
    """Run ``study`` (maxAttempts 1): slot ``research`` failed and awaits reassignment,
    slot ``elsewhere`` is Active. The two slots and the attempt-1 pods (= leases) there are.

    The ground of the bad-input tests: commands go to the waiting slot, and the Active one
    shows whether judging goes on meanwhile.
    """
    scenario.configs(nodes=(("research", "cpu", []), ("elsewhere", "cpu", [])))
    scenario.launch_spec("cpu-workers", classes=["cpu"], lease_seconds=5)
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)
    scenario.run("study", max_attempts=1)
    slot = scenario.slot_name_eventually("study", "research")
    elsewhere = scenario.slot_name_eventually("study", "elsewhere")
    scenario.wait_state(slot, "Active")
    scenario.wait_state(elsewhere, "Active")
    scenario.finish(f"{slot}-1", "Failed", exit_code=1)
    scenario.wait_slot(slot, lambda s: any(
        c["type"] == "AwaitingReassignment" and c["status"] == "True"
        for c in s.get("status", {}).get("conditions", [])), message="exhausted")
    objects = sorted([f"{slot}-1", f"{elsewhere}-1"])
    wait_for(lambda: scenario.pods() == objects and scenario.leases() == objects, timeout=10,
             message="only the attempt-1 pods and leases")
    return slot, elsewhere, objects


def holds_throughout(predicate: Callable[[], bool], *, seconds: float, message: str,
                     interval: float = 0.2) -> None:
    """Assert that ``predicate`` stays true for ``seconds`` (a "nothing happens" check).

    The window is the claim under test (e.g. "the attempt does not end while its lease
    is renewed, for longer than the lease's duration"), not a wait for something to happen.
    """
    deadline = time.monotonic() + seconds
    while True:
        assert predicate(), f"no longer true: {message}"
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)  # sampling period of the window


def actor_stamping_works(cluster: Cluster) -> bool:
    """Does admission stamp the actor on a command right now (a server-side dry run)?"""
    probe = json.dumps({
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Slot",
        "metadata": {"name": "probe-00000000", "namespace": "default",
                     "annotations": {"agentrun.dev/claim-id": "probe"}},
        "spec": {"run": "probe", "node": "probe", "workerClass": "cpu"}})
    result = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=probe)
    if result.returncode != 0:
        return False
    annotations = json.loads(result.stdout or "{}").get("metadata", {}).get("annotations", {})
    return bool(annotations.get("agentrun.dev/claim-actor") == "admin")
