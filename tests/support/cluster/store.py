"""The object store inside the local cluster: SeaweedFS, where the slots' journals live.

Why: workers write their journals through the S3 API, so the local cluster (``make
cluster``, ``make test``'s session, ``make demo``) runs a real S3-compatible store in it,
the very objects ``agentrun.bundledstore.store`` ships (``manifests/store/store.yaml``),
from the image :func:`~tests.support.cluster.images.seaweedfs_image` builds.

What the local cluster adds to those objects, and why:

- a *fixed* ClusterIP, :data:`STORE_CLUSTER_IP`: the node's pods have no cluster DNS, so
  a worker is given the address itself (:data:`STORE_ENDPOINT`), known before the
  cluster starts; kube-proxy (iptables mode) carries it to the store pod. It lies in
  the low band of the Service range, which the API server hands out last when it picks
  addresses itself, so no other Service takes it first;
- a PersistentVolume of its own (the node has no volume provisioner): a ``hostPath``
  directory under the cluster's folder, owned by the store's uid, bound to the claim
  ``agentrun-store`` (``claimRef``), so the data survives the pod, not the cluster:
  each start of the cluster begins with an empty store, as its API state does;
- the bucket :data:`~agentrun.bundledstore.STORE_BUCKET`, created over HTTP from this host
  once the store answers (an S3 CreateBucket; "already yours" counts as done).

A host process (a test, the operator run on the host) reaches the store at the same
ClusterIP: kube-proxy's ``nat OUTPUT`` rules translate a local connection to a Service
too, and the host routes the Service range over the bridge from the node IP
(``nodehost.setup_network``), so the pod's reply is addressed to the node IP, which our
INPUT chain lets in from the bridge. (By the default route the connection left from the
outward address; kube-proxy masqueraded it, and the reply, translated back to that
address, was dropped: measured, the host timed out while pods were answered.)
:func:`host_endpoint` says so in code.

No identities are configured: SeaweedFS accepts anonymous requests (see
``agentrun.bundledstore.STORE_ARGS``); kept so for now on this machine-local cluster.
"""

from __future__ import annotations

import http.client
import os
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from agentrun import bundledstore, manifests
from tests.support.cluster.images import seaweedfs_image
from tests.support.cluster.imagestore import ImageArchive
from tests.support.cluster.localcluster import NODE_NAME, LocalCluster
from tests.support.cluster.nodehost import SERVICE_RANGE

STORE_CLUSTER_IP = str(SERVICE_RANGE.network_address + 83)  # 10.96.0.83
STORE_ENDPOINT = f"http://{STORE_CLUSTER_IP}:{bundledstore.STORE_PORT}"
BUCKET = bundledstore.STORE_BUCKET
STORE_VOLUME = "agentrun-store-local"  # the PersistentVolume (cluster-scoped)
STORE_CLASS = ""  # no StorageClass: the claim binds the volume made for it, by name
FIELD_MANAGER = "agentrun-local-store"
READY_TIMEOUT = 120.0  # a cold start on a busy 2-core node: image import, pod, weed


def store_endpoint() -> str:
    """The S3 API's URL for a pod of the local cluster (no DNS: the fixed ClusterIP)."""
    return STORE_ENDPOINT


def host_endpoint() -> str:
    """The S3 API's URL for a process on this host: the same ClusterIP (the host routes
    the Service range over the node bridge; see the module's docstring)."""
    return STORE_ENDPOINT


def data_dir(cluster: LocalCluster) -> Path:
    """The host directory behind the store's volume, under the cluster's own folder."""
    return cluster.workdir / "store"


def persistent_volume(*, path: Path, size: str = bundledstore.STORE_SIZE) -> dict[str, Any]:
    """The claim's volume: ``path`` on the one node, reserved for ``agentrun-store``.

    Retain: the binder never tries to delete a host directory (the cluster's stop does).
    """
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": STORE_VOLUME, "labels": dict(bundledstore.STORE_SELECTOR)},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": STORE_CLASS,
            "hostPath": {"path": str(path), "type": "Directory"},
            "claimRef": {"namespace": manifests.OPERATOR_NAMESPACE, "name": bundledstore.STORE},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In",
                 "values": [NODE_NAME]}]}]}},
        },
    }


def objects(*, image: str, path: Path) -> list[dict[str, Any]]:
    """Everything the local cluster applies: the namespace, the volume, and the shipped
    store with the local image (never pulled), the claim on that volume, the fixed IP."""
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": manifests.OPERATOR_NAMESPACE}}
    return [namespace, persistent_volume(path=path),
            *bundledstore.store(image=image, pull_policy="Never", storage_class=STORE_CLASS,
                             cluster_ip=STORE_CLUSTER_IP)]


def prepare(cluster: LocalCluster) -> ImageArchive:
    """Build (or find) the image, make an empty data directory, apply the store; the image
    archive, for the node to import before its kubelet starts (``LocalNode.start``).

    Before the node, so that the store's pod starts as soon as the node is Ready; then
    :func:`wait_ready` waits for it.
    """
    archive = seaweedfs_image()
    path = data_dir(cluster)
    shutil.rmtree(path, ignore_errors=True)  # a new cluster, a new store
    path.mkdir(mode=0o700, parents=True)
    os.chown(path, bundledstore.STORE_UID, bundledstore.STORE_UID)
    applied = cluster.kubectl("apply", "--server-side", f"--field-manager={FIELD_MANAGER}",
                              "-f", "-", input=yaml.safe_dump_all(
                                  objects(image=archive.ref, path=path)))
    if applied.returncode != 0:
        raise RuntimeError(f"applying the store failed: {applied.stderr.strip()}")
    return archive


def answers(endpoint: str, *, timeout: float = 5.0) -> bool:
    """Whether the S3 API answers ``GET /`` (ListBuckets) with 200."""
    try:
        with urllib.request.urlopen(f"{endpoint}/", timeout=timeout) as response:
            status: int = response.status
            return status == 200
    except (OSError, http.client.HTTPException):
        return False


def create_bucket(endpoint: str, bucket: str = bundledstore.STORE_BUCKET) -> None:
    """S3 CreateBucket, idempotent: a bucket already ours (409) is the same outcome."""
    request = urllib.request.Request(f"{endpoint}/{bucket}", method="PUT")
    try:
        with urllib.request.urlopen(request, timeout=10):
            return
    except urllib.error.HTTPError as error:
        body = error.read().decode(errors="replace")
        if error.code == 409 and "BucketAlreadyOwnedByYou" in body:
            return
        raise RuntimeError(f"CreateBucket {bucket}: {error.code} {body[:300]}") from None


def bucket_exists(endpoint: str, bucket: str = bundledstore.STORE_BUCKET) -> bool:
    """S3 HeadBucket answers 200."""
    request = urllib.request.Request(f"{endpoint}/{bucket}", method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            status: int = response.status
            return status == 200
    except (OSError, http.client.HTTPException):
        return False


def wait_ready(*, timeout: float = READY_TIMEOUT) -> float:
    """Wait until the store answers from this host, make sure of the bucket; the seconds.

    Answering at the ClusterIP means the pod is Ready (only then is it an endpoint) and
    kube-proxy has synced it: what a worker needs too.
    """
    started = time.monotonic()
    deadline = started + timeout
    endpoint = host_endpoint()
    while not answers(endpoint):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"the store at {endpoint} did not answer within {timeout:.0f}s "
                               f"(kubectl -n {manifests.OPERATOR_NAMESPACE} describe pod -l "
                               f"app.kubernetes.io/name={bundledstore.STORE})")
        time.sleep(0.25)  # poll interval of a wait-for-condition
    create_bucket(endpoint)
    if not bucket_exists(endpoint):
        raise RuntimeError(f"bucket {bundledstore.STORE_BUCKET} missing after CreateBucket")
    return time.monotonic() - started

