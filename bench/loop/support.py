"""The control-loop benchmark's machinery: its cluster, its operator, and what it counts.

:class:`Bench` starts one local control plane without a node (``tests/support``'s
:class:`LocalCluster`: kube-apiserver with an audit log, kube-controller-manager with the
Job controller), installs agentrun as ``tests/integration`` does, starts the operator as a
process (the cluster's ``operator`` user, rights from RBAC only), and reads back writes
from the audit log, RSS and CPU time from ``/proc`` and request counts from the API
server's /metrics.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from tests.support.actors.operators import install_crds
from tests.support.cluster import audit
from tests.support.cluster.localcluster import LocalCluster, build
from tests.support.waiting import wait_for, wait_for_default_service_account

REPO = Path(__file__).resolve().parents[2]
UNTHROTTLED_QPS = 10_000.0  # the controller-manager's --kube-api-qps when "unthrottled"
JOB_CONTROLLER_QPS = 20.0  # kube-controller-manager's --kube-api-qps default (burst 30)
JOB_CONTROLLER_BURST = 30
IMAGE = "busybox:1.36"  # never pulled: there is no node
OPERATOR_RESOURCES = frozenset({"agentruns", "slots", "launchspecs", "pods", "configmaps",
                                "leases", "namespaces", "secrets"})
READ_VERBS = frozenset({"GET", "LIST", "WATCH"})
Object = dict[str, Any]


def workflow_configs(*, nodes: int) -> list[Object]:
    """Revision 1 of a package, a workflow of ``nodes`` independent nodes, its bindings."""
    names = [f"n{i:03d}" for i in range(nodes)]
    texts = {"package": {"outcome": "a benchmark"},
             "workflow": {"nodes": [{"name": n, "workerClass": "cpu"} for n in names]},
             "bindings": {"nodes": [{"node": n, "agent": {"name": "bench", "revision": "1"}}
                                    for n in names]}}
    return [{"metadata": {"name": f"bench-{kind}-r1", "labels": {
        "agentrun.dev/config-kind": kind, "agentrun.dev/config-name": "bench",
        "agentrun.dev/revision": "1", "agentrun.dev/accepted": "true"}},
        "data": {f"{kind}.yaml": yaml.safe_dump(text)}} for kind, text in texts.items()]


def launch_spec_body() -> Object:
    """One LaunchSpec for every slot; a start deadline far past the benchmark's window, so
    slots whose pods never run stay Active while they are counted."""
    return {"apiVersion": "agentrun.dev/v1alpha1", "kind": "LaunchSpec",
            "metadata": {"name": "bench-workers"},
            "spec": {"claim": {"workerClasses": ["cpu"]}, "lease": {"durationSeconds": 30},
                     "startDeadlineSeconds": 86400,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [
                         {"name": "worker", "image": IMAGE}]}}}}


def run_body(index: int) -> Object:
    return {"apiVersion": "agentrun.dev/v1alpha1", "kind": "AgentRun",
            "metadata": {"name": f"run-{index:04d}"},
            "spec": {"package": {"name": "bench"}, "workflow": {"name": "bench"},
                     "bindings": {"name": "bench"}, "claimPolicy": "Automatic"}}


def job_body(*, units: int) -> Object:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "bench"},
            "spec": {"completionMode": "Indexed", "completions": units, "parallelism": units,
                     "backoffLimit": 0, "template": {"spec": {
                         "restartPolicy": "Never",
                         "containers": [{"name": "worker", "image": IMAGE}]}}}}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (``/proc/<pid>/stat`` utime + stime).

    Why from /proc: the API server, the controller manager and the operator are separate
    processes of ours; a delta of this over a measured window is the CPU each spent."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # after "pid (comm)": state is field 3, utime 14 and stime 15 (1-based, proc(5))
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def resource_key(write: audit.Write) -> str:
    return write.resource + (f"/{write.subresource}" if write.subresource else "")


class Bench:
    def __init__(self, *, workdir: Path, window: float,
                 job_controller_qps: float | None = None) -> None:
        self.workdir = workdir
        self.window = window
        self.job_controller_qps = job_controller_qps  # None: kube-controller-manager's 20
        self.cluster = LocalCluster(workdir=workdir / "cluster", binary=build(),
                                    controller_manager_qps=job_controller_qps)
        self.job_controller_user = "system:serviceaccount:kube-system:job-controller"
        self.names = 0

    # --- the cluster ----------------------------------------------------------------
    def start(self) -> None:
        self.cluster.start()
        api = kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.cluster.kubeconfig), context="admin")
        self.api = api
        self.core = kubernetes.client.CoreV1Api(api)
        self.custom = kubernetes.client.CustomObjectsApi(api)
        self.batch = kubernetes.client.BatchV1Api(api)
        install_crds(self.cluster.kubectl)
        for path in ("rbac", "local", "admission/stamp-actors.yaml"):
            self.kubectl("apply", "--server-side", "-f", str(REPO / "manifests" / path))
        subprocess.run([sys.executable, "-m", "agentrun.cli", "stamping", "--context",
                        "operator", "--timeout", "60"], env=self.env(), check=True,
                       capture_output=True)

    @property
    def apiserver_pid(self) -> int:
        """kube-apiserver, the first process the cluster spawns (etcd is embedded in it)."""
        return self.cluster.processes[0].pid

    @property
    def controller_manager_pid(self) -> int:
        return self.cluster.processes[1].pid

    def stop_cluster(self) -> None:
        self.cluster.stop()

    def kubectl(self, *args: str) -> None:
        result = self.cluster.kubectl(*args)
        if result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr}")

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig),
                "PYTHONPATH": os.pathsep.join(str(REPO / p) for p in ("operator", "sdk"))}

    def namespace(self, prefix: str) -> str:
        self.names += 1
        name = f"bench-{prefix}-{self.names}"
        self.core.create_namespace({"metadata": {"name": name,
                                                 "labels": {"agentrun.dev/tenant": name}}})
        wait_for_default_service_account(self.api, name)
        return name

    def drop(self, namespace: str) -> None:
        """Delete a finished size's namespace and wait for it to go, so that its garbage
        collection does not load the API server while the next size is measured."""
        self.core.delete_namespace(namespace)

        def gone() -> bool:
            try:
                self.core.read_namespace(namespace)
            except kubernetes.client.ApiException as error:
                return error.status == 404
            return False

        wait_for(gone, timeout=600, interval=1.0, message=f"namespace {namespace} deleted")

    # --- the operator ---------------------------------------------------------------
    def operator(self, namespace: str, *, flags: list[str]) -> subprocess.Popen[bytes]:
        """The operator on ``namespace`` with extra ``flags`` (``[]``: its own defaults)."""
        args = [sys.executable, "-m", "agentrun.cli", "run", "--namespace", namespace,
                "--context", "operator", "--metrics-port", "0", *flags]
        # --metrics-port 0: nothing here scrapes it, and a shared machine's 8080 may be taken
        log = open(self.workdir / f"operator-{namespace}.log", "wb")  # noqa: SIM115
        try:
            return subprocess.Popen(args, env=self.env(), stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()

    def wait_operator_up(self, process: subprocess.Popen[bytes], namespace: str) -> None:
        """Up once it has written the LaunchSpec's status (its first reconcile)."""
        def written() -> bool:
            if process.poll() is not None:
                log = self.workdir / f"operator-{namespace}.log"  # gone with the workdir
                tail = log.read_text(errors="replace").splitlines()[-5:]
                raise RuntimeError(f"the operator exited with {process.returncode}: "
                                   + " / ".join(tail))
            spec = self.custom.get_namespaced_custom_object(
                "agentrun.dev", "v1alpha1", namespace, "launchspecs", "bench-workers")
            return bool((spec.get("status") or {}).get("conditions"))

        wait_for(written, timeout=120, interval=0.2, message="the operator up")

    @staticmethod
    def stop(process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    @staticmethod
    def rss_mib(pid: int) -> float:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError(f"no VmRSS for process {pid}")

    # --- waiting and counting -------------------------------------------------------
    def count(self, path: str) -> list[Object]:
        """Items under ``path`` as metadata only (small answers while polling)."""
        response = self.api.call_api(*self.api.param_serialize(
            method="GET", resource_path=path, header_params={
                "Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"},
            auth_settings=["BearerToken"]))
        response.read()
        items: list[Object] = json.loads(response.data).get("items") or []
        return items

    def wait_pods(self, namespace: str, units: int, *, timeout: float) -> None:
        wait_for(lambda: len(self.count(f"/api/v1/namespaces/{namespace}/pods")) >= units,
                 timeout=timeout, interval=0.5, message=f"{units} pods in {namespace}")

    def wait_active(self, namespace: str, units: int, *, timeout: float) -> None:
        def active() -> bool:
            listed = self.custom.list_namespaced_custom_object(
                "agentrun.dev", "v1alpha1", namespace, "slots")
            return sum(1 for s in listed["items"]
                       if (s.get("status") or {}).get("state") == "Active") >= units

        wait_for(active, timeout=timeout, interval=1.0, message=f"{units} slots Active")

    def settle(self) -> None:
        """A moment for late writes (status updates, Events) to reach the audit log."""
        time.sleep(2.0)  # a measurement window, not synchronisation

    def writes_by(self, namespace: str, *, user_prefix: str,
                  since: datetime) -> dict[str, int]:
        found = audit.writes(self.cluster.audit_log, namespace=namespace, since=since)
        return dict(Counter(resource_key(w) for w in found
                            if w.user.startswith(user_prefix) and w.code < 400))

    def last_pod_created(self, namespace: str, *, since: datetime) -> float:
        """Seconds from ``since`` to the last pod create the audit log holds."""
        creates = [w.at for w in audit.writes(self.cluster.audit_log, namespace=namespace,
                                              since=since)
                   if w.resource == "pods" and w.verb == "create" and w.code < 400]
        return (max(creates) - since).total_seconds() if creates else 0.0

    def metrics(self) -> tuple[float, float]:
        """GET/LIST/WATCH requests the API server counted: all, and the operator's kinds."""
        request = urllib.request.Request(f"{self.cluster.server}/metrics", headers={
            "Authorization": f"Bearer {self.cluster.tokens['admin']}"})
        with urllib.request.urlopen(request, context=self.cluster._ssl_context()) as answer:
            text = answer.read().decode()
        total = own = 0.0
        for line in text.splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels_text, value = line[len("apiserver_request_total{"):].rsplit("} ", 1)
            labels = dict(part.split("=", 1) for part in labels_text.split(","))
            verb = labels.get("verb", "").strip('"')
            if verb in READ_VERBS:
                total += float(value)
                if labels.get("resource", "").strip('"') in OPERATOR_RESOURCES:
                    own += float(value)
        return total, own

    def reads_per_second(self) -> tuple[float, float, float]:
        """Reads/s over the window: all and the operator's kinds (from /metrics), and the
        operator user's own (from the audit log, which logs that one user's reads)."""
        before, since = self.metrics(), datetime.now(UTC)
        time.sleep(self.window)  # the measurement window itself
        after, until = self.metrics(), datetime.now(UTC)
        own = self.audited_reads(user="operator", since=since, until=until)
        return ((after[0] - before[0]) / self.window, (after[1] - before[1]) / self.window,
                own / self.window)

    def audited_reads(self, *, user: str, since: datetime, until: datetime) -> int:
        found = 0
        with open(self.cluster.audit_log, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if f'"username":"{user}"' not in line:
                    continue
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:  # a line being written right now
                    continue
                if event.get("verb") not in ("get", "list", "watch") or event.get(
                        "stage") != "ResponseComplete":
                    continue
                at = datetime.fromisoformat(event["requestReceivedTimestamp"].replace(
                    "Z", "+00:00"))
                found += since <= at < until
        return found
