"""The bundled object store (SeaweedFS) the slots' journals live in by default: its claim,
Deployment and Service, and the names the chart, the manifests and the local cluster use.

Apart from :mod:`agentrun.manifests` because it is its own component (the chart's
``store.enabled``; a production install points ``journal`` at its own store and leaves it
out), with its own image, arguments and reasons.
"""

from __future__ import annotations

from typing import Any

from agentrun.api import names

STORE = "agentrun-store"
STORE_IMAGE = "ghcr.io/agentrun/seaweedfs:4.48"
STORE_SELECTOR = {"app.kubernetes.io/name": STORE}
STORE_PORT = 8333  # the S3 API
STORE_PORT_NAME = "s3"
STORE_BUCKET = "agentrun-journal"  # S3's rules: 3 to 63 characters (SeaweedFS refuses "b1")
STORE_SIZE = "2Gi"


def store_endpoint(*, namespace: str = names.OPERATOR_NAMESPACE) -> str:
    """The bundled store's S3 URL by its Service's DNS name in ``namespace``, the
    operator's (what a cluster with DNS uses; the local cluster, which has none, pins its
    Service's fixed ClusterIP instead)."""
    return f"http://{STORE}.{namespace}.svc:{STORE_PORT}"


STORE_UID = 65532  # the image's user (tests/support/cluster/images.py)
STORE_RESOURCES: dict[str, dict[str, str]] = {"requests": {"cpu": "50m", "memory": "128Mi"},
                                              "limits": {"memory": "1Gi"}}
# `weed server`: master, volume server, filer and S3 gateway in one process. They find each
# other on 127.0.0.1 (-ip: the address each announces; inside the pod, so a new pod IP
# after a restart changes nothing stored) and listen on every address of the pod's own
# network namespace (-ip.bind), so the kubelet's probe and the Service reach the S3 port.
# Volumes of 256 MB (not 30 GB) fit a small claim; -volume.max=0 sizes their count to the
# free space. The Iceberg and Lance catalog servers are off: nothing here uses them. The
# one master waits -master.electionTimeout before it leads again on its stored Raft state:
# 1 s, not 10 (it has no peer to wait for), so a restarted store answers in ~3 s, not ~20.
# Telemetry off: nothing is to leave the cluster (its default reports to seaweedfs.com).
# No identities are configured (no -s3.config), so SeaweedFS accepts ANONYMOUS requests:
# anyone who reaches the Service may read and write every object. Kept so for now (the
# local cluster's pods and host only); credentials come with names.ENV_JOURNAL_CREDENTIALS.
STORE_ARGS = ["server", "-dir=/data", "-ip=127.0.0.1", "-ip.bind=0.0.0.0",
              "-s3", f"-s3.port={STORE_PORT}", "-s3.port.iceberg=0", "-s3.port.lance=0",
              "-master.volumeSizeLimitMB=256", "-volume.max=0",
              "-master.electionTimeout=1s", "-master.telemetry=false"]


def store(*, pull_policy: str, image: str = STORE_IMAGE,
          storage_class: str | None = None, size: str = STORE_SIZE,
          cluster_ip: str | None = None,
          namespace: str = names.OPERATOR_NAMESPACE) -> list[dict[str, Any]]:
    """The bundled object store (SeaweedFS) the slots' journals live in: its claim,
    Deployment and Service, in the operator's ``namespace``.

    One replica with Recreate: the data is one volume that only one ``weed`` may open, so
    an upgrade stops the old pod before the new one starts. The claim outlives the pod
    (a restarted or rescheduled store finds its objects). ``storage_class`` None leaves
    the cluster's default class; ``cluster_ip`` fixes the Service's address, for clusters
    whose pods have no DNS (the local one: tests/support/cluster/store.py).
    """
    metadata = {"name": STORE, "namespace": namespace, "labels": dict(STORE_SELECTOR)}
    claim_spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"],
                                  "resources": {"requests": {"storage": size}}}
    if storage_class is not None:
        claim_spec["storageClassName"] = storage_class
    service_spec: dict[str, Any] = {"type": "ClusterIP"}
    if cluster_ip is not None:
        service_spec["clusterIP"] = cluster_ip
    service_spec.update({"selector": dict(STORE_SELECTOR),
                         "ports": [{"name": STORE_PORT_NAME, "port": STORE_PORT,
                                    "targetPort": STORE_PORT_NAME, "protocol": "TCP"}]})
    return [
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": dict(metadata),
         "spec": claim_spec},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": dict(metadata),
         "spec": {
             "replicas": 1,
             "strategy": {"type": "Recreate"},
             "selector": {"matchLabels": dict(STORE_SELECTOR)},
             "template": {
                 "metadata": {"labels": dict(STORE_SELECTOR)},
                 "spec": {
                     # It calls no API: no token in the pod.
                     "automountServiceAccountToken": False,
                     # On SIGTERM weed waits on its gRPC servers' graceful stop, which its
                     # own streams never end (measured: still running after 20 s); its
                     # writes are in the kernel once acknowledged, so a SIGKILL soon after
                     # loses none. Soon matters: Recreate orders rollouts only, and a
                     # deleted or evicted pod's replacement starts beside it, exiting on the
                     # filer's lock in /data (restarted by the kubelet) until the old one is
                     # gone (measured: back in 8-10 s with 2 s here, 24 s with 5 s).
                     "terminationGracePeriodSeconds": 2,
                     "securityContext": {"runAsNonRoot": True, "runAsUser": STORE_UID,
                                         "runAsGroup": STORE_UID, "fsGroup": STORE_UID,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{
                         "name": "seaweedfs", "image": image, "imagePullPolicy": pull_policy,
                         "args": list(STORE_ARGS),
                         "ports": [{"name": STORE_PORT_NAME, "containerPort": STORE_PORT,
                                    "protocol": "TCP"}],
                         # GET / is S3's ListBuckets: 200 once the gateway reaches the filer.
                         "readinessProbe": {"httpGet": {"path": "/", "port": STORE_PORT_NAME},
                                            "periodSeconds": 2, "timeoutSeconds": 5,
                                            "failureThreshold": 3},
                         "resources": STORE_RESOURCES,
                         "securityContext": {"allowPrivilegeEscalation": False,
                                             "readOnlyRootFilesystem": True,
                                             "capabilities": {"drop": ["ALL"]}},
                         # /tmp: weed's unix sockets (whatever TMPDIR says).
                         "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                          {"name": "tmp", "mountPath": "/tmp"}],
                     }],
                     "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": STORE}},
                                 {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
                 }},
         }},
        {"apiVersion": "v1", "kind": "Service", "metadata": dict(metadata),
         "spec": service_spec},
    ]
