"""The worker's lease renewer against the real API server, with a pod-bound token.

No node is needed: the Pod exists (an unserved ``schedulerName``, so nothing runs it),
its service account gets a token bound to it (the TokenRequest a kubelet makes for a
projected token), and ``agentrun-worker run`` runs here as a separate process whose
kubeconfig holds only that token, as a worker pod's in-cluster configuration would.

Covers: the renewal is written by the pod's service account (audit log: user and the
bound pod's name and uid), changes ``renewTime`` alone, repeats, the lease is released
(``agentrun.dev/released``, the last write) once the command exited, and the command's
exit code is the renewer's; a tombstone stops renewal and terminates the command, and so does
a lease duration without a successful renewal (the pod deleted: its token refused); a lease held
by someone else, or no RBAC for the service account, means the command never runs; a
SIGTERM reaches the command. The RoleBinding names the generated ``agentrun-worker``
ClusterRole, so it is tested to be enough.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from kubernetes.client.rest import ApiException

from agentrun import manifests
from agentrun.api import names
from agentrun.worker import cli
from tests.support.cluster import audit, images, imagestore
from tests.support.cluster.clusters import Cluster
from tests.support.waiting import wait_for, wait_for_default_service_account

POD = "w-1"
SERVICE_ACCOUNT = "worker"
DURATION = 6  # seconds: the renewer then renews every 2 s
TIMEOUT = 30.0
# The worker command: says it started, exits 7 once told to, or 0 on SIGTERM after
# writing that it got it (so forwarding shows); "kill" leaves SIGTERM at its default.
CHILD = """
import pathlib, signal, sys, time
d = pathlib.Path(sys.argv[1])
if sys.argv[2] == "trap":
    signal.signal(signal.SIGTERM, lambda *_: ((d / "got-sigterm").touch(), sys.exit(0)))
(d / "started").touch()
while not (d / "finish").exists():
    time.sleep(0.05)  # the command's own work loop
sys.exit(7)
"""


# In-cluster configuration as a pod has it: the service account's files at their fixed
# path, here on a tmpfs over /run in a mount namespace of the renewer's own.
IN_CLUSTER = 'mount -t tmpfs tmpfs /run && mkdir -p "$1" && cp "$0"/* "$1" && shift && exec "$@"'
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass
class Worker:
    namespace: str
    pod_uid: str
    kubeconfig: Path
    secrets: Path  # token, ca.crt, namespace: what the kubelet projects into a pod
    server: urllib.parse.SplitResult
    workdir: Path
    coordination: kubernetes.client.CoordinationV1Api

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{SERVICE_ACCOUNT}"

    def lease(self) -> dict[str, Any]:
        found: dict[str, Any] = self.coordination.api_client.sanitize_for_serialization(
            self.coordination.read_namespaced_lease(POD, self.namespace))
        return found

    def start(self, *, on_sigterm: str = "trap", identity: str = POD,
              in_cluster: bool = False) -> subprocess.Popen[str]:
        """The renewer, named by options and credentialed by a kubeconfig; or ``in_cluster``,
        named by the worker environment and credentialed as in a pod."""
        child = [sys.executable, "-c", CHILD, str(self.workdir), on_sigterm]
        if not in_cluster:
            return subprocess.Popen(
                [sys.executable, "-m", "agentrun.worker.cli", "run",
                 "--namespace", self.namespace, "--lease", POD, "--identity", identity,
                 "--start-timeout", "20", "--", *child],
                env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
                stderr=subprocess.PIPE, text=True)
        env = {key: value for key, value in os.environ.items() if key != "KUBECONFIG"}
        env.update({"HOME": str(self.workdir), "HOSTNAME": identity,
                    names.ENV_NAMESPACE: self.namespace, names.ENV_LEASE: POD,
                    "KUBERNETES_SERVICE_HOST": str(self.server.hostname),
                    "KUBERNETES_SERVICE_PORT": str(self.server.port)})
        return subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", IN_CLUSTER,
             str(self.secrets), SERVICE_ACCOUNT_DIR,
             sys.executable, "-m", "agentrun.worker.cli", "run", "--", *child],
            env=env, stderr=subprocess.PIPE, text=True)


def _ensure_worker_role(rbac: kubernetes.client.RbacAuthorizationV1Api) -> None:
    """The generated ClusterRole, exactly (created, or replaced if an older one is there).

    A conflict on the replace is another test, run concurrently, replacing it first: read
    again and replace (identical content: a no-op then)."""
    (role,) = manifests.worker_rbac()
    try:
        rbac.create_cluster_role(role)
        return
    except ApiException as error:
        if error.status != 409:
            raise
    for _ in range(5):
        current = rbac.read_cluster_role(manifests.WORKER_ROLE)
        try:
            rbac.replace_cluster_role(manifests.WORKER_ROLE, {
                **role, "metadata": {**role["metadata"],
                                     "resourceVersion": current.metadata.resource_version}})
            return
        except ApiException as error:
            if error.status != 409:
                raise
    raise AssertionError(f"ClusterRole {manifests.WORKER_ROLE}: 5 conflicts in a row")


def _credentials(cluster: Cluster, *, token: str, namespace: str,
                 folder: Path) -> tuple[Path, Path, urllib.parse.SplitResult]:
    """A kubeconfig holding only ``token``; the same as a pod's service-account files."""
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    server = admin["clusters"][0]["cluster"]
    kubeconfig = folder / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "worker",
        "clusters": [{"name": "c", "cluster": server}],
        "users": [{"name": "worker", "user": {"token": token}}],
        "contexts": [{"name": "worker", "context": {"cluster": "c", "user": "worker"}}],
    }))
    secrets = folder / "serviceaccount"
    secrets.mkdir()
    (secrets / "token").write_text(token)
    (secrets / "namespace").write_text(namespace)
    (secrets / "ca.crt").write_bytes(base64.b64decode(server["certificate-authority-data"]))
    return kubeconfig, secrets, urllib.parse.urlsplit(server["server"])


def _make_worker(cluster: Cluster, namespace: str, tmp_path: Path, *, bound: bool,
                 holder: str = POD) -> Worker:
    api = cluster.client("admin")
    core = kubernetes.client.CoreV1Api(api)
    rbac = kubernetes.client.RbacAuthorizationV1Api(api)
    coordination = kubernetes.client.CoordinationV1Api(api)
    wait_for_default_service_account(api, namespace)
    _ensure_worker_role(rbac)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": SERVICE_ACCOUNT}})
    if bound:
        rbac.create_namespaced_role_binding(namespace, {
            "metadata": {"name": manifests.WORKER_ROLE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": manifests.WORKER_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT,
                          "namespace": namespace}]})
    pod = core.create_namespaced_pod(namespace, {
        "metadata": {"name": POD},
        "spec": {"serviceAccountName": SERVICE_ACCOUNT, "restartPolicy": "Never",
                 "schedulerName": "agentrun-test-unserved",
                 "containers": [{"name": "worker", "image": "localhost/agentrun/unused:0"}]}})
    # As the operator makes it at the claim: held by the pod, no renewTime yet.
    coordination.create_namespaced_lease(namespace, {
        "metadata": {"name": POD, "annotations": {names.LAUNCH_SPEC_ANNOTATION: "cpu@1"}},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": DURATION}})
    token = core.create_namespaced_service_account_token(SERVICE_ACCOUNT, namespace, {
        "spec": {"expirationSeconds": 600, "boundObjectRef": {
            "apiVersion": "v1", "kind": "Pod", "name": POD, "uid": pod.metadata.uid}}})
    workdir = tmp_path / "worker"
    workdir.mkdir()
    kubeconfig, secrets, server = _credentials(cluster, token=token.status.token,
                                               namespace=namespace, folder=tmp_path)
    return Worker(namespace=namespace, pod_uid=pod.metadata.uid, workdir=workdir,
                  kubeconfig=kubeconfig, secrets=secrets, server=server,
                  coordination=coordination)


@pytest.fixture
def worker(cluster: Cluster, namespace: str, tmp_path: Path) -> Worker:
    return _make_worker(cluster, namespace, tmp_path, bound=True)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """Renewer processes a test starts; any still running at its end are killed."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def _audit_events(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    assert cluster.audit_log is not None
    events = []
    for line in cluster.audit_log.read_text().splitlines():
        if namespace in line:
            event = json.loads(line)
            if (event.get("objectRef") or {}).get("namespace") == namespace:
                events.append(event)
    return events


def _needs_audit(cluster: Cluster) -> None:
    if cluster.audit_log is None:
        pytest.skip(f"no audit log is readable on this {cluster.kind} cluster")


@pytest.mark.parametrize("in_cluster", [False, True], ids=["kubeconfig", "in-cluster"])
def test_the_pods_service_account_renews_the_lease(
        cluster: Cluster, worker: Worker, processes: list[subprocess.Popen[str]],
        in_cluster: bool) -> None:
    _needs_audit(cluster)
    before = worker.lease()
    processes.append(renewer := worker.start(in_cluster=in_cluster))
    first = wait_for(lambda: worker.lease()["spec"].get("renewTime"), timeout=TIMEOUT,
                     message="the first renewal")
    wait_for(lambda: (worker.workdir / "started").exists(), timeout=TIMEOUT,
             message="the command to start after the first renewal")
    wait_for(lambda: worker.lease()["spec"].get("renewTime") not in (None, first),
             timeout=TIMEOUT, message="a second renewal")
    (worker.workdir / "finish").touch()
    assert renewer.wait(timeout=TIMEOUT) == 7, renewer.stderr.read() if renewer.stderr else ""

    after = worker.lease()
    assert {k: v for k, v in after["spec"].items() if k != "renewTime"} == before["spec"]
    released = after["metadata"]["annotations"].pop(names.RELEASED_ANNOTATION)
    assert released.endswith("Z") and released > first  # after the first renewal
    assert after["metadata"]["annotations"] == before["metadata"]["annotations"]
    updates = wait_for(
        lambda: [e for e in _audit_events(cluster, worker.namespace)
                 if e["verb"] == "update" and e["stage"] == "ResponseComplete"
                 and (e.get("responseStatus") or {}).get("code") == 200] or None,
        timeout=TIMEOUT, message="the renewals in the audit log")
    assert len(updates) >= 2
    for event in updates:
        assert event["objectRef"]["resource"] == "leases" and event["objectRef"]["name"] == POD
        assert event["user"]["username"] == worker.user
        extra = event["user"].get("extra") or {}
        assert extra.get("authentication.kubernetes.io/pod-name") == [POD]
        assert extra.get("authentication.kubernetes.io/pod-uid") == [worker.pod_uid]
    writes = audit.writes(cluster.audit_log, namespace=worker.namespace, user=worker.user)
    assert {w.key for w in writes} == {("update", "leases", "", POD)}


def test_a_tombstone_stops_renewal_and_ends_the_command(
        cluster: Cluster, worker: Worker, processes: list[subprocess.Popen[str]]) -> None:
    _needs_audit(cluster)
    processes.append(renewer := worker.start(on_sigterm="kill"))
    wait_for(lambda: (worker.workdir / "started").exists(), timeout=TIMEOUT,
             message="the command to start")
    # The operator's tombstone: holder cleared, outcome recorded, under the read version.
    lease = worker.lease()
    lease["metadata"]["annotations"][names.OUTCOME_ANNOTATION] = "Lost"
    lease["spec"]["holderIdentity"] = None
    tombstone = worker.coordination.replace_namespaced_lease(POD, worker.namespace, lease)
    assert renewer.wait(timeout=TIMEOUT) == 128 + signal.SIGTERM
    assert not (worker.workdir / "finish").exists()

    final = worker.lease()
    assert final["metadata"]["resourceVersion"] == tombstone.metadata.resource_version
    assert final["spec"].get("holderIdentity") is None
    ended: datetime = next(w.at for w in audit.writes(cluster.audit_log, namespace=worker.namespace,
                                                      user="admin")
                           if w.key == ("update", "leases", "", POD))
    late = [w for w in audit.writes(cluster.audit_log, namespace=worker.namespace,
                                    user=worker.user, since=ended) if w.code < 400]
    assert late == []


def test_a_worker_that_cannot_renew_for_a_lease_duration_ends_its_command(
        cluster: Cluster, worker: Worker, processes: list[subprocess.Popen[str]]) -> None:
    """Its pod deleted, its bound token is refused (401): the renewer retries, and once a
    whole lease duration passed since its last renewal it ends the command."""
    processes.append(renewer := worker.start(on_sigterm="kill"))
    wait_for(lambda: (worker.workdir / "started").exists(), timeout=TIMEOUT,
             message="the command to start")
    core = kubernetes.client.CoreV1Api(cluster.client("admin"))
    core.delete_namespaced_pod(POD, worker.namespace, grace_period_seconds=0)
    assert renewer.wait(timeout=TIMEOUT) == 128 + signal.SIGTERM
    assert renewer.stderr is not None
    assert f"(lease duration {DURATION}s); last failure: renewal failed (status 401)" \
        in renewer.stderr.read()
    assert not (worker.workdir / "finish").exists()


@pytest.mark.parametrize(("bound", "holder", "reason"), [
    (True, "someone-else", "held by 'someone-else', not by 'w-1'"),
    (False, POD, "may not renew the lease (403)"),
])
def test_the_command_never_runs_on_a_lease_that_is_not_ours(
        cluster: Cluster, namespace: str, tmp_path: Path,
        processes: list[subprocess.Popen[str]], bound: bool, holder: str, reason: str) -> None:
    worker = _make_worker(cluster, namespace, tmp_path, bound=bound, holder=holder)
    before = worker.lease()
    processes.append(renewer := worker.start())
    assert renewer.wait(timeout=TIMEOUT) == cli.EXIT_NOT_OURS
    assert renewer.stderr is not None and reason in renewer.stderr.read()
    assert not (worker.workdir / "started").exists()
    assert worker.lease() == before


def test_sigterm_reaches_the_command(
        worker: Worker, processes: list[subprocess.Popen[str]]) -> None:
    processes.append(renewer := worker.start(on_sigterm="trap"))
    wait_for(lambda: (worker.workdir / "started").exists(), timeout=TIMEOUT,
             message="the command to start")
    renewer.send_signal(signal.SIGTERM)
    assert renewer.wait(timeout=TIMEOUT) == 0  # the command's own exit after its handler
    assert (worker.workdir / "got-sigterm").exists()


def test_the_project_image_renews_as_a_worker_pod_would(
        cluster: Cluster, worker: Worker, processes: list[subprocess.Popen[str]]) -> None:
    """The image's own renewer (its Python, its venv, uid 65532), with the service-account
    files mounted where a kubelet projects them and the environment a pod gets."""
    _needs_audit(cluster)
    image = images.project_image()
    container = imagestore.buildah("from", "--pull-never", image.ref).strip()
    for path in worker.secrets.iterdir():
        path.chmod(0o644)  # projected files are readable by the pod's user
    env = {"HOSTNAME": POD, names.ENV_NAMESPACE: worker.namespace, names.ENV_LEASE: POD,
           "KUBERNETES_SERVICE_HOST": str(worker.server.hostname),
           "KUBERNETES_SERVICE_PORT": str(worker.server.port)}
    try:
        # chroot isolation shares this machine's network: the API server on its loopback.
        processes.append(renewer := subprocess.Popen(imagestore.buildah_command(
            "run", "--isolation", "chroot",
            # /var/run is a link to /run in the image; buildah's chroot mounts need the target.
            "--volume", f"{worker.secrets}:{SERVICE_ACCOUNT_DIR.removeprefix('/var')}:ro",
            *(f"--env={key}={value}" for key, value in env.items()),
            container, "--", "agentrun-worker", "run", "--",
            "python3", "-c", "import os, sys; sys.exit(5 if os.getuid() == 65532 else 1)"),
            stderr=subprocess.PIPE, text=True))
        assert renewer.wait(timeout=60) == 5, renewer.stderr.read() if renewer.stderr else ""
    finally:
        imagestore.buildah("rm", container)
    assert worker.lease()["spec"].get("renewTime")
    def both() -> list[audit.Write] | None:
        found = audit.writes(cluster.audit_log,  # type: ignore[arg-type]
                             namespace=worker.namespace, user=worker.user)
        return found if len(found) >= 2 else None
    writes = wait_for(both, timeout=TIMEOUT,
                      message="the image's renewal and release in the audit log")
    assert [(w.key, w.code) for w in writes] == [(("update", "leases", "", POD), 200)] * 2
    assert names.RELEASED_ANNOTATION in worker.lease()["metadata"]["annotations"]


def test_the_worker_role_is_exactly_what_the_renewer_calls() -> None:
    (role,) = manifests.worker_rbac()
    # get and update: the renewer; list and patch: the SDK's prefix and records.
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "verbs": ["get", "list", "update", "patch"]}]
