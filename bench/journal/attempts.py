"""What the journal's side of ``bench.journal`` runs on: a control plane and a store of its own,
and attempts made as the operator makes them.

A local control plane without a node (``bench.loop.support.Bench``) with the project's CRDs,
RBAC and every admission policy, etcd fsyncing (``AGENTRUN_ETCD_FSYNC=1``: the test
clusters skip it), and a loopback SeaweedFS (``tests/support/s3server.py``). An *attempt*
here is what the operator would make for one: an unscheduled Pod, the attempt's Lease
(labels, holder), and a token bound to that Pod for the ``agentrun-worker`` role, so each
head advance is admitted by the real Lease policy (fenced) exactly as in a worker pod.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes

from agentrun import manifests, rest
from agentrun.api import names
from agentrun.objectstore import ObjectStore
from agentrun.worker import _journal as journal
from agentrun.worker import _keeper as keeper
from agentrun.worker import _renewer as renewer
from agentrun.worker._context import Context
from agentrun.worker._sdk import Worker
from bench.loop.support import REPO, Bench
from tests.support.s3server import running_s3
from tests.support.waiting import wait_for_default_service_account

ACCOUNT, RUN = "worker", "bench"


def pids_with(argument: str) -> list[int]:
    """The processes whose command line holds ``argument`` (the store's data dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if argument in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@dataclass
class Attempt:
    """Attempt ``number`` of ``slot``: its Pod, Lease, and a client with its pod's token."""

    slot: str
    number: int
    name: str
    pod_uid: str
    api: rest.Rest
    token: str


@dataclass
class Place:
    """The cluster, its namespace for attempts, and the journal's location in the store."""

    bench: Bench
    namespace: str
    location: journal.Location
    store_pids: list[int]

    @property
    def core(self) -> Any:
        return kubernetes.client.CoreV1Api(self.bench.api)

    @property
    def leases(self) -> Any:
        return kubernetes.client.CoordinationV1Api(self.bench.api)

    def attempt(self, slot: str, number: int) -> Attempt:
        name = f"{slot}-{number}"
        pod = self.core.create_namespaced_pod(self.namespace, {
            "metadata": {"name": name},
            "spec": {"serviceAccountName": ACCOUNT, "restartPolicy": "Never",
                     "schedulerName": "agentrun-bench-unserved",
                     "containers": [{"name": "w", "image": "localhost/agentrun/unused:0"}]}})
        self.leases.create_namespaced_lease(self.namespace, {"metadata": {
            "name": name, "labels": {names.ATTEMPT_LABEL: str(number), names.SLOT_LABEL: slot,
                                     names.RUN_LABEL: RUN}},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 3600}})
        token = self.core.create_namespaced_service_account_token(ACCOUNT, self.namespace, {
            "spec": {"expirationSeconds": 7200, "boundObjectRef": {
                "apiVersion": "v1", "kind": "Pod", "name": name,
                "uid": pod.metadata.uid}}}).status.token
        admin = self.bench.api.configuration
        configuration = kubernetes.client.Configuration()
        configuration.host, configuration.ssl_ca_cert = admin.host, admin.ssl_ca_cert
        configuration.verify_ssl = admin.verify_ssl
        configuration.api_key = {"authorization": f"Bearer {token}"}
        return Attempt(slot=slot, number=number, name=name, pod_uid=pod.metadata.uid,
                       api=rest.Rest(kubernetes.client.ApiClient(configuration)), token=token)

    def worker(self, attempt: Attempt, *, delay: float | None = None) -> Worker:
        """The SDK's Worker of ``attempt`` as its pod would make it (``Worker.from_env``
        reads the same from the pod's environment and mounts, which a bench has not)."""
        context = Context(namespace=self.namespace, run=RUN, run_uid="bench-uid",
                          slot=attempt.slot, node="n", attempt=attempt.number,
                          fencing_token=attempt.number, lease=attempt.name,
                          config_dir=Path("/nonexistent"), pinned={})
        extra = {} if delay is None else {"commit_delay": delay}
        return Worker(context=context, api=attempt.api, journal=self.location, **extra,
                      keeper=keeper.Keeper(renewer=renewer.Renewer(
                          api=attempt.api, namespace=self.namespace, lease=attempt.name,
                          identity=attempt.name)))

    def lease(self, attempt: Attempt) -> dict[str, Any]:
        found: dict[str, Any] = self.bench.api.sanitize_for_serialization(
            self.leases.read_namespaced_lease(attempt.name, self.namespace))
        return found

    def seal(self, attempt: Attempt) -> None:
        """Tombstone the attempt's Lease as the operator does when its attempt ended."""
        lease = self.lease(attempt)
        lease["metadata"]["annotations"] = {**(lease["metadata"].get("annotations") or {}),
                                            names.OUTCOME_ANNOTATION: "Failed",
                                            names.POD_UID_ANNOTATION: attempt.pod_uid}
        lease["spec"]["holderIdentity"] = None
        self.leases.replace_namespaced_lease(attempt.name, self.namespace, lease)

    def head_seq(self, attempt: Attempt) -> int:
        head = journal.Head.on_lease(self.lease(attempt))
        return 0 if head is None else head.seq


@contextlib.contextmanager
def place() -> Iterator[Place]:
    """A control plane (etcd fsyncing) and a store, started here and removed on exit."""
    with (tempfile.TemporaryDirectory(prefix="bench-journal-") as work,
          contextlib.ExitStack() as stack):
        root = Path(work)
        endpoint = stack.enter_context(running_s3(root / "s3"))
        os.environ["AGENTRUN_ETCD_FSYNC"] = "1"  # the control plane inherits it
        bench = Bench(workdir=root, window=0)
        stack.callback(bench.stop_cluster)
        bench.start()
        bench.kubectl("apply", "--server-side", "-f", str(REPO / "manifests" / "admission"))
        namespace = bench.namespace("journal")
        wait_for_default_service_account(bench.api, namespace)
        core = kubernetes.client.CoreV1Api(bench.api)
        core.create_namespaced_service_account(namespace, {"metadata": {"name": ACCOUNT}})
        kubernetes.client.RbacAuthorizationV1Api(bench.api).create_namespaced_role_binding(
            namespace, {"metadata": {"name": manifests.WORKER_ROLE},
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                    "kind": "ClusterRole", "name": manifests.WORKER_ROLE},
                        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT,
                                      "namespace": namespace}]})
        bucket = f"bench-{uuid.uuid4().hex[:12]}"
        ObjectStore(endpoint=endpoint, bucket=bucket, credentials=lambda: None).ensure_bucket()
        yield Place(bench=bench, namespace=namespace, store_pids=pids_with(str(root / "s3")),
                    location=journal.Location(endpoint=endpoint, bucket=bucket,
                                              prefix=f"agentrun/{namespace}/bench-uid"))
