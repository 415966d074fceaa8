"""Real workers on the local node: LaunchSpecs that run the project's image, and their traces.

Unlike :class:`scenarios.Scenario`'s hand-played LaunchSpecs (an unserved scheduler, a
test writing the pod's status), these pods are scheduled, run by the kubelet and renew
their own Lease: the container runs ``agentrun-worker run -- python3 -c <script>`` as the
LaunchSpec's service account, which is bound to the generated ``agentrun-worker``
ClusterRole in the test's namespace. The audit log then tells who wrote what.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import kubernetes

from agentrun import rest
from tests.support.cluster.audit import Write, writes
from tests.support.cluster.localnode import LocalNode
from tests.support.plays.scenarios import GROUP, VERSION, Object, Scenario
from tests.support.waiting import wait_for

WORKER_ACCOUNT = "worker"
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
# The CRD's minimums: a 5 s lease (the renewer renews every 1.7 s) and a 5 s start
# deadline would be too short for a cold container start on a busy machine; 60 s is not.
LEASE_SECONDS = 5
START_DEADLINE_SECONDS = 60


def worker_user(namespace: str) -> str:
    return f"system:serviceaccount:{namespace}:{WORKER_ACCOUNT}"


def grant_worker_role(scenario: Scenario) -> None:
    """The LaunchSpecs' service account, with the ``agentrun-worker`` ClusterRole here."""
    account: Any = {"metadata": {"name": WORKER_ACCOUNT}}
    scenario.core.create_namespaced_service_account(scenario.namespace, account)
    binding: Any = {
        "metadata": {"name": "agentrun-worker"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "agentrun-worker"},
        "subjects": [{"kind": "ServiceAccount", "name": WORKER_ACCOUNT,
                      "namespace": scenario.namespace}]}
    scenario.rbac.create_namespaced_role_binding(scenario.namespace, binding)


def real_launch_spec(scenario: Scenario, name: str, *, classes: list[str], image: str,
                     script: str, lease_seconds: int = LEASE_SECONDS,
                     renewer: bool = True, env: dict[str, str] | None = None,
                     start_deadline_seconds: int = START_DEADLINE_SECONDS,
                     extra: Object | None = None, pod: Object | None = None) -> Object:
    """A LaunchSpec whose pods run ``script`` under the lease renewer (or, ``renewer``
    False, as ``python3 -c script`` alone: an SDK worker renews itself), on the node;
    ``extra``: more of its spec (its approvals); ``pod``: more of its pods' spec."""
    command = ["python3", "-c", script]
    container = {"name": "worker", "image": image, "imagePullPolicy": "Never",
                 "command": ["agentrun-worker", "run", "--", *command] if renewer else command,
                 "env": [{"name": k, "value": v} for k, v in sorted((env or {}).items())]}
    return node_launch_spec(scenario, name, classes=classes, container=container,
                            lease_seconds=lease_seconds,
                            start_deadline_seconds=start_deadline_seconds, extra=extra,
                            pod=pod)


def node_launch_spec(scenario: Scenario, name: str, *, classes: list[str],
                     container: Object, lease_seconds: int = LEASE_SECONDS,
                     start_deadline_seconds: int = START_DEADLINE_SECONDS,
                     extra: Object | None = None, pod: Object | None = None) -> Object:
    """A LaunchSpec whose pods run ``container`` on the node as the worker account
    (``pod``: more of their spec)."""
    body: Object = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LaunchSpec",
            "metadata": {"name": name},
            "spec": {"claim": {"workerClasses": classes},
                     "lease": {"durationSeconds": lease_seconds},
                     "startDeadlineSeconds": start_deadline_seconds,
                     "template": {"metadata": {"labels": {"example/spec": name}},
                                  "spec": {"restartPolicy": "Never",
                                           "serviceAccountName": WORKER_ACCOUNT,
                                           "terminationGracePeriodSeconds": 2,
                                           "containers": [container], **(pod or {})}},
                     **(extra or {})}}
    created: Any = scenario.custom.create_namespaced_custom_object(
        GROUP, VERSION, scenario.namespace, "launchspecs", body)
    return dict(created)


def audit_log(scenario: Scenario) -> Path:
    log = scenario.cluster.audit_log
    assert log is not None, "the local control plane's audit log"
    return log


def pod_status_writes(scenario: Scenario, pod: str) -> list[Write]:
    return [w for w in writes(audit_log(scenario), namespace=scenario.namespace)
            if w.resource == "pods" and w.subresource == "status" and w.name == pod]


def status_writers_of(scenario: Scenario, pods: list[str]) -> set[str]:
    """Who wrote ``pods/status`` of any of ``pods``, once every one has such a write."""
    found = {pod: {w.user for w in pod_status_writes(scenario, pod)} for pod in pods}
    assert all(found.values()), f"pods/status writes missing: {found}"
    return set().union(*found.values())


def lease_renewers(scenario: Scenario, lease: str) -> list[str]:
    """The users of every successful ``update`` of ``lease`` (renewals, in order)."""
    return [w.user for w in writes(audit_log(scenario), namespace=scenario.namespace)
            if w.resource == "leases" and w.name == lease and w.verb == "update"
            and w.code == 200]


LOCAL_OPERATOR_USER = "operator"  # the local control plane's user the operator runs as


def renewed_by_its_pod_then_tombstoned(scenario: Scenario, lease: str, *,
                                       at_least: int) -> list[str]:
    """Wait for the operator's tombstone of ``lease``; assert every earlier update was the
    worker account's (at least ``at_least`` renewals), made with ``lease``'s own pod's bound
    token. The renewers, in order."""
    wait_for(lambda: LOCAL_OPERATOR_USER in lease_renewers(scenario, lease), timeout=30,
             message=f"lease {lease} tombstoned")
    renewers = lease_renewers(scenario, lease)
    worker = worker_user(scenario.namespace)
    assert renewers[-1] == LOCAL_OPERATOR_USER and set(renewers[:-1]) == {worker}, renewers
    assert len(renewers) - 1 >= at_least, renewers
    assert token_pods(scenario, user=worker, name=lease) == {lease}  # its pod-bound token
    return renewers


def token_pods(scenario: Scenario, *, user: str, name: str) -> set[str]:
    """The pods whose bound tokens ``user``'s writes to object ``name`` came with.

    A pod-bound service-account token carries its pod's name into the request's user
    (``extra``); the audit log records it, which :func:`audit.writes` leaves out.
    """
    found: set[str] = set()
    for line in audit_log(scenario).read_text(errors="replace").splitlines():
        if name not in line:
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:  # a line being written right now
            continue
        who = event.get("user") or {}
        ref = event.get("objectRef") or {}
        if (event.get("stage") == "ResponseComplete" and who.get("username") == user
                and ref.get("namespace") == scenario.namespace and ref.get("name") == name):
            found.update((who.get("extra") or {}).get(POD_NAME_EXTRA, []))
    return found


def terminated(pod: Object) -> dict[str, Any]:
    """The worker container's ``state.terminated`` (exit code, reason) of a finished pod."""
    (status,) = pod["status"]["containerStatuses"]
    found: dict[str, Any] = status["state"]["terminated"]
    return found


def wait_pod_phase(scenario: Scenario, name: str, phases: set[str], *,
                   timeout: float = 90) -> Object:
    def check() -> Object | None:
        pod = scenario.pod(name)
        return pod if pod and pod.get("status", {}).get("phase") in phases else None
    found: Object = wait_for(check, timeout=timeout,
                             message=f"pod {name} in phase {sorted(phases)}")
    return found


def wait_renewed(scenario: Scenario, lease: str, *, times: int, timeout: float = 60) -> None:
    """Wait until ``lease`` has ``times`` renewals by the worker's service account."""
    user = worker_user(scenario.namespace)
    wait_for(lambda: lease_renewers(scenario, lease).count(user) >= times, timeout=timeout,
             message=f"{times} renewals of lease {lease} by {user} in the audit log")


def container_pid(node: LocalNode, pod: Object) -> int:
    """The host pid of the pod's worker container's main process, from containerd's tasks."""
    (status,) = pod["status"]["containerStatuses"]
    container_id = status["containerID"].removeprefix("containerd://")
    listed = node.ctr("tasks", "ls")
    assert listed.returncode == 0, listed.stderr
    for line in listed.stdout.splitlines()[1:]:
        task, pid, state = line.split()[:3]
        if task == container_id:
            assert state == "RUNNING", line
            return int(pid)
    raise AssertionError(f"no task {container_id} in `ctr tasks ls`:\n{listed.stdout}")


def kill_on_node(pid: int, *, pod_uid: str, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` (SIGKILL) to ``pid`` from the host, after checking it is in that pod's
    cgroup."""
    cgroups = Path(f"/proc/{pid}/cgroup").read_text()
    assert pod_uid in cgroups or pod_uid.replace("-", "_") in cgroups, cgroups
    os.kill(pid, sig)


# --- SDK workers beside a test's effect owner (tests/integration/node/test_stale_*.py) ---

OWNER_ENV = "EFFECT_OWNER"  # the owner's URL, in an SDK worker's environment


def node_address(scenario: Scenario) -> str:
    """The node bridge's address on this machine: pods reach a test's server there."""
    local = scenario.cluster.local
    assert local is not None and local.node_ip, "needs the local node's bridge"
    return local.node_ip


def printed(scenario: Scenario, pod: str) -> list[dict[str, Any]]:
    """The JSON objects a worker printed, one a line, in order (other lines skipped)."""
    return json_lines(scenario.cluster.kubectl("logs", "-n", scenario.namespace, pod).stdout)


def wait_printed(scenario: Scenario, pod: str, field: str, *,
                 timeout: float = 90) -> dict[str, Any]:
    """The first JSON object with ``field`` that ``pod`` printed, once it has."""
    def check() -> dict[str, Any] | None:
        return next((p for p in printed(scenario, pod) if field in p), None)
    found: dict[str, Any] = wait_for(check, timeout=timeout,
                                     message=f"pod {pod} printed {field!r}")
    return found


def token_client(scenario: Scenario, token: str) -> rest.Rest:
    """A raw client of the API server authenticated by ``token`` alone (no client cert)."""
    admin = scenario.cluster.client().configuration
    configuration = kubernetes.client.Configuration()
    configuration.host = admin.host
    configuration.ssl_ca_cert = admin.ssl_ca_cert
    configuration.api_key = {"BearerToken": f"Bearer {token}"}
    return rest.Rest(kubernetes.client.ApiClient(configuration))


def follow_logs(scenario: Scenario, pod: str, path: Path) -> subprocess.Popen[bytes]:
    """``kubectl logs -f pod`` into ``path`` from now on: what a pod printed stays readable
    after the operator deletes it (fencing). Stop it with ``.terminate()``."""
    local = scenario.cluster.local
    assert local is not None, "the local control plane's kubectl"
    with open(path, "wb") as out:
        return subprocess.Popen(
            [str(local.workdir / "bin" / "kubectl"), "--kubeconfig",
             str(scenario.cluster.kubeconfig), "--context", "admin", "logs", "-f",
             "-n", scenario.namespace, pod], stdout=out, stderr=subprocess.STDOUT)


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects in ``text``, one a line (other lines skipped)."""
    found: list[dict[str, Any]] = []
    for line in text.splitlines():
        if line.startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):
                found.append(json.loads(line))
    return found


# -- the example agent on the node (tests/integration/node/test_interruptions.py) ------

AGENT_COMMAND = ["python3", "-m", "agentrun.examples.research_report"]


def agent_configs(scenario: Scenario, *, owner_url: str, name: str = "study",
                  review: bool = False, model_url: str | None = None,
                  prices: Object | None = None) -> None:
    """Package, a one-node workflow (``research``, class cpu) and bindings whose
    ``publish.url`` is the test's effect owner, as revision 1 of ``name``; ``review``: the
    agent asks a person before publishing (its question ``review``); ``model_url``: the
    model service the agent calls (``tests/support/actors/fakemodel.py``), ``prices``:
    the bindings' price table."""
    import yaml

    from tests.support.plays.scenarios import workflow

    scenario.config(kind="package", name=name, revision=1, text=yaml.safe_dump(
        {"outcome": "A sourced report on recovery", "sources": ["leases", "records", "effects"],
         **({"review": True} if review else {})}))
    scenario.config(kind="workflow", name=name, revision=1,
                    text=workflow(("research", "cpu", [])))
    scenario.config(kind="bindings", name=name, revision=1, text=yaml.safe_dump({
        "nodes": [{"node": "research", "agent": {"name": "researcher", "revision": "1"}}],
        "publish": {"url": owner_url}, **({"model": {"url": model_url}} if model_url else {}),
        **({"prices": prices} if prices else {})}))


def agent_launch_spec(scenario: Scenario, name: str, *, classes: list[str], image: str,
                      pause: str = "", lease_seconds: int = LEASE_SECONDS) -> Object:
    """A LaunchSpec whose pods run the example agent (its SDK the only renewer), with the
    fault hook ``AGENTRUN_EXAMPLE_PAUSE=pause`` (see ``agentrun.examples.faults``)."""
    container = {"name": "worker", "image": image, "imagePullPolicy": "Never",
                 "command": AGENT_COMMAND,
                 "env": [{"name": "AGENTRUN_EXAMPLE_PAUSE", "value": pause}]}
    return node_launch_spec(scenario, name, classes=classes, container=container,
                            lease_seconds=lease_seconds)


def agent_events(scenario: Scenario, pod: str) -> list[dict[str, Any]]:
    """The JSON event lines the example agent's pod printed so far (others left out)."""
    logs = scenario.cluster.kubectl("logs", "-n", scenario.namespace, pod)
    found = []
    for line in logs.stdout.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict) and "event" in event:
            found.append(event)
    return found


def kill_when_paused(scenario: Scenario, node: LocalNode, pod: str, *, point: str,
                     timeout: float = 90) -> Object:
    """Wait until ``pod`` prints that it is paused at ``point``, SIGKILL its container on
    the node, and return the pod once Failed (exit 137)."""
    wait_pod_phase(scenario, pod, {"Running"}, timeout=timeout)
    wait_for(lambda: {"event": "paused", "point": point}.items() <= (
        agent_events(scenario, pod) or [{}])[-1].items(), timeout=timeout,
        message=f"pod {pod} paused at {point}")
    running = scenario.pod(pod)
    assert running is not None
    kill_on_node(container_pid(node, running), pod_uid=running["metadata"]["uid"])
    ended = wait_pod_phase(scenario, pod, {"Succeeded", "Failed"}, timeout=timeout)
    assert ended["status"]["phase"] == "Failed" and terminated(ended)["exitCode"] == 137
    return ended
