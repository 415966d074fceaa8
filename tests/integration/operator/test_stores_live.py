"""The operator's stores against the real API server (their request timeouts too).

The Reader and Writer are the operator's, as the ``operator`` user, over ``Stores`` primed
by LIST and fed by a real watch (tests/support/actors/watchfeed.py, the role Kopf's handlers play
in the operator). Covers: write-through (a status write read back at once, before the
watch delivered it, and the late, older watch events not regressing it); a deleted
object leaving the store; a tombstoned Lease leaving it and being read back from the API
on demand; an unprimed store asking the API for a LaunchSpec (the path the LaunchSpec
reconcile takes before its namespace is listed) and holding the answer; ``blind_time``
growing while requests get no answer (a listener on 127.0.0.1 that accepts and never
answers, so each request ends by its own timeout, once: no retries) and staying zero
against the real server.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import kubernetes
import pytest
import urllib3

from agentrun import rest
from agentrun.api import names
from agentrun.kube import reads, stores, writes
from agentrun.rest import clocks
from tests.support.actors.watchfeed import Feed
from tests.support.cluster.clusters import Cluster
from tests.support.plays.scenarios import Scenario
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration
TIMEOUT = 30


@pytest.fixture
def held(cluster: Cluster, namespace: str, installed: None) -> stores.Stores:
    primed = stores.Stores()
    primed.prime(client=rest.Rest(cluster.client("operator")), namespaces=[namespace])
    return primed


def operator_pair(cluster: Cluster, held: stores.Stores) -> tuple[reads.Reader, writes.Writer]:
    client = rest.Rest(cluster.client("operator"))
    return (reads.Reader(client, stores=held, operator_namespace=names.OPERATOR_NAMESPACE),
            writes.Writer(client, stores=held))


def test_an_unprimed_store_reads_a_launch_spec_from_the_api_and_holds_it(
        cluster: Cluster, namespace: str, installed: None) -> None:
    """A miss where the store was never primed is "not known": the reader asks the API (as
    the operator, with its role's ``get`` on launchspecs) and the store keeps what it got
    (observed: known from then on). Deterministic here; in the operator it happens only
    when a LaunchSpec's reconcile runs before its namespace was listed."""
    made = Scenario(cluster=cluster, namespace=namespace).launch_spec("cpu", classes=["cpu"])
    held = stores.Stores()
    assert not held.get(kind="LaunchSpec", namespace=namespace, name="cpu").known
    reader, _ = operator_pair(cluster, held)
    found = reader.custom_object("launchspecs", namespace, "cpu")
    assert found is not None
    assert found["metadata"]["uid"] == made["metadata"]["uid"]
    kept = held.get(kind="LaunchSpec", namespace=namespace, name="cpu")
    assert kept.known and kept.body is not None
    assert kept.body["metadata"]["uid"] == made["metadata"]["uid"]
    assert reader.custom_object("launchspecs", namespace, "absent") is None


def create_slot(api: kubernetes.client.ApiClient, namespace: str, name: str) -> None:
    kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, "slots",
        {"apiVersion": names.API_VERSION, "kind": "Slot",
         "metadata": {"name": name, "namespace": namespace},
         "spec": {"run": "r1", "node": name, "workerClass": "cpu"}})


def test_a_status_write_is_read_back_before_its_event_and_late_events_do_not_regress_it(
        cluster: Cluster, namespace: str, api_client: kubernetes.client.ApiClient,
        held: stores.Stores) -> None:
    reader, writer = operator_pair(cluster, held)
    with Feed(api=cluster.client("operator"), held=held, kind="Slot",
              namespace=namespace) as feed:
        feed.gate.clear()  # hold every event back
        create_slot(api_client, namespace, "s1")
        assert reader.slot(namespace, "s1") is None  # primed, and no event delivered yet
        fresh = reader.fresh().slot(namespace, "s1")  # a quorum GET, written through
        assert fresh is not None and reader.slot(namespace, "s1") is not None
        created = fresh.metadata.resource_version
        answer = writer.custom_status({
            "apiVersion": names.API_VERSION, "kind": "Slot",
            "metadata": {"name": "s1", "namespace": namespace, "resourceVersion": created},
            "status": {"state": "Pending"}}, point="test-status")
        written = answer["metadata"]["resourceVersion"]
        after = reader.slot(namespace, "s1")
        assert after is not None and after.status.state == "Pending"
        assert after.metadata.resource_version == written
        assert feed.delivered == []  # read-your-write, before the watch said anything
        feed.gate.set()
        wait_for(lambda: any(v == written for _, v, _ in feed.delivered), timeout=TIMEOUT,
                 message="the watch to deliver the status write")
        assert not feed.errors
        added = [row for row in feed.delivered if row[0] == "ADDED"]
        assert added and added[0][1] == created
        assert added[0][2] == written  # the older ADDED event left the newer state alone
        now = reader.slot(namespace, "s1")
        assert now is not None and now.metadata.resource_version == written

        kubernetes.client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, "slots", "s1")
        wait_for(lambda: held.get(kind="Slot", namespace=namespace, name="s1").known
                 and reader.slot(namespace, "s1") is None,
                 timeout=TIMEOUT, message="the deleted slot to leave the store")
        assert held.slots_of(namespace=namespace, run="r1") == []


def attempt_lease(namespace: str, name: str) -> dict[str, object]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {names.ATTEMPT_LABEL: "1", names.SLOT_LABEL: "s1"}},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 30}}


def test_a_tombstoned_lease_leaves_the_store_and_is_read_from_the_api_on_demand(
        cluster: Cluster, namespace: str, api_client: kubernetes.client.ApiClient,
        held: stores.Stores) -> None:
    reader, writer = operator_pair(cluster, held)
    leases = kubernetes.client.CoordinationV1Api(api_client)
    with Feed(api=cluster.client("operator"), held=held, kind="Lease", namespace=namespace,
              selector=names.ATTEMPT_LABEL) as feed:
        writer.create(attempt_lease(namespace, "s1-1"), point="test-lease")
        assert held.sizes()["Lease"] == 1  # written through, whatever the watch did yet
        live = leases.read_namespaced_lease("s1-1", namespace)
        live.spec.holder_identity = None
        live.metadata.annotations = {names.OUTCOME_ANNOTATION: "Failed"}
        leases.replace_namespaced_lease("s1-1", namespace, live)  # by someone else
        wait_for(lambda: held.sizes()["Lease"] == 0 and held.sizes()["away"] == 1,
                 timeout=TIMEOUT, message="the tombstoned lease to leave the store")
        assert not held.get(kind="Lease", namespace=namespace, name="s1-1").known
        found = reader.lease(namespace, "s1-1")  # on demand, from the API
        assert found is not None and not found["spec"].get("holderIdentity")
        assert found["metadata"]["annotations"][names.OUTCOME_ANNOTATION] == "Failed"
        assert held.sizes()["cold"] == 1
        leases.delete_namespaced_lease("s1-1", namespace)
        wait_for(lambda: held.get(kind="Lease", namespace=namespace, name="s1-1").known
                 and held.sizes()["cold"] == 0 and held.sizes()["away"] == 0,
                 timeout=TIMEOUT, message="the deleted lease to leave every trace")
        assert reader.lease(namespace, "s1-1") is None
        assert not feed.errors


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            held.append(connection)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    listener.close()
    for connection in held:
        connection.close()
    thread.join(timeout=5)


def test_blind_time_grows_while_requests_get_no_answer_and_is_zero_otherwise(
        cluster: Cluster, namespace: str, silent_server: int, installed: None) -> None:
    since = clocks.ticks()
    healthy = rest.Rest(cluster.client("operator"))
    reader = reads.Reader(healthy, stores=stores.Stores(),
                          operator_namespace=names.OPERATOR_NAMESPACE)
    assert reader.lease(namespace, "nothing") is None and reader.tenant(namespace) == namespace
    assert reader.blind_time(since=since) == timedelta(0)

    configuration = kubernetes.client.Configuration()
    configuration.host = f"http://127.0.0.1:{silent_server}"
    timeout = rest.Timeout(connect=1.0, read=1.0)
    silent = reads.Reader(rest.Rest(kubernetes.client.ApiClient(configuration),
                                    timeout=timeout), operator_namespace=names.OPERATOR_NAMESPACE)
    blind: list[timedelta] = []
    for _ in range(2):
        started = time.monotonic()
        with pytest.raises(urllib3.exceptions.TimeoutError):  # no answer at all
            silent.lease(namespace, "s1-1")
        took = time.monotonic() - started
        assert 0.9 < took < 2.5, f"one try of a 1 s read timeout took {took:.1f} s"
        blind.append(silent.blind_time(since=since))
    assert silent.rest.health.blind()
    assert timedelta(seconds=0.9) < blind[0] < blind[1] - timedelta(seconds=0.9)
    assert reader.blind_time(since=since) == timedelta(0)  # the healthy one saw all
