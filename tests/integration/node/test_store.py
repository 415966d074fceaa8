"""The object store in the local cluster (tests/support/cluster/store.py): what workers need.

Covers: the store answers this host at its fixed ClusterIP and its bucket exists; a pod
on the node (no DNS) reaches it at that same address and writes through it; a
conditional PUT (``If-None-Match: *``) of an existing key is refused 412 and the first
content stays; the data survives the store's pod being deleted (its Deployment makes a
new one on the same claim; its objects readable within seconds of it answering).
Serial: it deletes the store every test shares.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

import kubernetes
import pytest

from agentrun import bundledstore, manifests
from tests.support.cluster import store
from tests.support.cluster.clusters import Cluster
from tests.support.waiting import wait_for

from .conftest import wait_phase

pytestmark = [pytest.mark.kubelet, pytest.mark.serial]
RESTART_TIMEOUT = 120.0


@pytest.fixture
def endpoint(cluster: Cluster) -> str:
    """The store's URL from this host; only the local cluster with its node runs one."""
    if cluster.node is None:
        pytest.fail("the object store runs on the local node; this cluster has none",
                    pytrace=False)
    found = store.host_endpoint()
    assert store.answers(found), f"the store does not answer at {found}"
    return found


def put(url: str, body: bytes, *, if_none_match: bool = True) -> int:
    """PUT an object; its status (a refusal's too)."""
    headers = {"If-None-Match": "*"} if if_none_match else {}
    request = urllib.request.Request(url, data=body, method="PUT", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as error:
        return error.code


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
        return body


def key_url(endpoint: str) -> str:
    return f"{endpoint}/{store.BUCKET}/test-store/{uuid.uuid4().hex}"


def test_the_store_answers_at_its_fixed_address_with_its_bucket(
        cluster: Cluster, endpoint: str) -> None:
    assert endpoint == store.store_endpoint() == store.STORE_ENDPOINT
    assert store.bucket_exists(endpoint)
    service = json.loads(cluster.kubectl(
        "-n", manifests.OPERATOR_NAMESPACE, "get", "service", bundledstore.STORE,
        "-o", "json").stdout)
    assert service["spec"]["clusterIP"] == store.STORE_CLUSTER_IP


def test_a_conditional_put_of_an_existing_key_is_refused_and_keeps_the_first(
        endpoint: str) -> None:
    url = key_url(endpoint)
    assert put(url, b"first") == 200
    assert put(url, b"second") == 412
    assert get(url) == b"first"


# What a worker does: no DNS, only the address it is given (urllib: the project image
# has no S3 client, and needs none for this).
POD_SCRIPT = """
import sys, urllib.error, urllib.request
url = sys.argv[1]
def put(body):
    request = urllib.request.Request(url, data=body, method="PUT",
                                     headers={"If-None-Match": "*"})
    try:
        return urllib.request.urlopen(request, timeout=10).status
    except urllib.error.HTTPError as error:
        return error.code
print(put(b"from a pod"), put(b"again"), urllib.request.urlopen(url, timeout=10).read().decode())
"""


def test_a_pod_reaches_the_store_at_the_cluster_ip(
        cluster: Cluster, namespace: str, endpoint: str,
        run_pod: Callable[..., dict[str, Any]]) -> None:
    path = key_url(endpoint).removeprefix(endpoint)
    run_pod("store-client", ["python3", "-c", POD_SCRIPT, store.store_endpoint() + path])
    pod = wait_phase(cluster, namespace, "store-client", {"Succeeded", "Failed"})
    logs = cluster.kubectl("logs", "-n", namespace, "store-client")
    assert pod["status"]["phase"] == "Succeeded", logs.stdout + logs.stderr
    assert logs.stdout.strip() == "200 412 from a pod"
    assert get(endpoint + path) == b"from a pod"


def store_pods(core: kubernetes.client.CoreV1Api) -> list[Any]:
    return list(core.list_namespaced_pod(
        manifests.OPERATOR_NAMESPACE,
        label_selector=f"app.kubernetes.io/name={bundledstore.STORE}").items)


def test_the_data_survives_the_store_pod_being_deleted(
        cluster: Cluster, endpoint: str) -> None:
    url = key_url(endpoint)
    assert put(url, b"kept") == 200
    core = kubernetes.client.CoreV1Api(cluster.client())
    (old,) = store_pods(core)
    started = time.monotonic()
    core.delete_namespaced_pod(old.metadata.name, manifests.OPERATOR_NAMESPACE)

    def replaced_and_ready() -> bool:
        pods = [p for p in store_pods(core) if p.metadata.uid != old.metadata.uid]
        return any(c.type == "Ready" and c.status == "True"
                   for p in pods for c in p.status.conditions or [])

    wait_for(replaced_and_ready, timeout=RESTART_TIMEOUT, interval=0.25,
             message="a new store pod, Ready")
    wait_for(lambda: store.answers(endpoint), timeout=RESTART_TIMEOUT, interval=0.25,
             message=f"the store answering at {endpoint} again")
    answering = time.monotonic()
    # Answering is not yet serving every object: until the volume server's first
    # heartbeat reaches the restarted master, a read answers 500 (S3 clients retry it).
    assert wait_for(lambda: get(url), timeout=30, interval=0.25,
                    message="the object readable again") == b"kept"
    print(f"store pod replaced and answering in {answering - started:.1f}s, "
          f"the object readable {time.monotonic() - answering:.1f}s later")
    assert store.bucket_exists(endpoint)
    assert put(url, b"overwritten?") == 412
