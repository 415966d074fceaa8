"""The lease keeper against the real API server, as the pod's service account, via a proxy.

The pod, its bound token, its RBAC and its Lease (6 s) are made as in
``test_worker_renewer.py`` (no node: nothing runs the pod). The keeper runs in this
process with the in-cluster configuration a pod has (the kubernetes client's own
in-cluster loader, reading the token and CA files the kubelet would project), but its
requests go through a TCP proxy on 127.0.0.1 that the test can stop forwarding: stopped,
it closes every connection and holds new ones unanswered (an unreachable API server, as
the worker sees it), so the shared API server itself is never stopped.

Covers: the keeper renews (renewTime changes, nothing else) and is live; an operator's
tombstone stops it for good (``LeaseLost``, told once) and it never writes again; with
its requests failing it pauses before the lease could expire on the server's record
(``LeaseLapsed``, not lost, through an outage longer than the lease), and resumes when
they pass again, renewing the same untombstoned Lease.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes.config.incluster_config import InClusterConfigLoader

from agentrun import rest
from agentrun.api import names
from agentrun.worker import _keeper as keeper
from agentrun.worker import _renewer as renewer
from agentrun.worker import _sdk as sdk
from agentrun.worker._keeper import LeaseLapsed, LeaseLost
from agentrun.worker._renewals import Standing
from tests.integration import test_worker_renewer as renewer_test
from tests.support.cluster.clusters import Cluster
from tests.support.waiting import wait_for

POD = renewer_test.POD
DURATION = renewer_test.DURATION  # 6 s: renewals every 2 s, lapse point 4.8 s after a send
TIMEOUT = 30.0


@dataclass
class Proxy:
    """<upstream host>:<port> → ``upstream``, byte for byte (TLS passes through), until
    stopped. It listens on the API server's own address (127.0.0.1, or the node bridge's
    10.244.0.1 when the node runs), which the server's certificate names."""

    upstream: tuple[str, int]
    forwarding: bool = True
    held: int = 0  # connections accepted while stopped, never answered
    _listener: socket.socket = field(init=False)
    _open: list[socket.socket] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._listener = socket.create_server((self.upstream[0], 0))
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def port(self) -> int:
        port: int = self._listener.getsockname()[1]
        return port

    def stop_forwarding(self) -> None:
        with self._lock:
            self.forwarding = False
            self._close_all()

    def resume(self) -> None:
        with self._lock:
            self.forwarding = True
            self._close_all()  # the held ones: their clients give up and reconnect

    def close(self) -> None:
        with self._lock:
            self._close_all()
        self._listener.close()

    def _close_all(self) -> None:
        for conn in self._open:
            _shut(conn)
            conn.close()
        self._open.clear()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                self._open.append(client)
                if not self.forwarding:
                    self.held += 1
                    continue
                upstream = socket.create_connection(self.upstream, timeout=5)
                upstream.settimeout(None)
                self._open.append(upstream)
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        for conn in (source, target):
            _shut(conn)


def _shut(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        conn.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def worker(cluster: Cluster, namespace: str, tmp_path: Path) -> renewer_test.Worker:
    return renewer_test._make_worker(cluster, namespace, tmp_path, bound=True)


@pytest.fixture
def proxy(worker: renewer_test.Worker) -> Iterator[Proxy]:
    found = Proxy(upstream=(str(worker.server.hostname), int(worker.server.port or 443)))
    yield found
    found.close()


@dataclass
class Told:
    lapsed: threading.Event = field(default_factory=threading.Event)
    resumed: threading.Event = field(default_factory=threading.Event)
    lost: list[str] = field(default_factory=list)
    lapsed_at: datetime | None = None

    def on_lapse(self, _reason: str) -> None:
        self.lapsed_at = datetime.now(UTC)
        self.lapsed.set()

    def on_resume(self, _reason: str) -> None:
        self.resumed.set()

    def on_lost(self, reason: str) -> None:
        self.lost.append(reason)


@pytest.fixture
def kept(worker: renewer_test.Worker, proxy: Proxy) -> Iterator[tuple[keeper.Keeper, Told]]:
    """A started keeper, in-cluster configured as the pod, through ``proxy``."""
    configuration = kubernetes.client.Configuration()
    InClusterConfigLoader(  # type: ignore[no-untyped-call]
        token_filename=str(worker.secrets / "token"),
        cert_filename=str(worker.secrets / "ca.crt"),
        environ={"KUBERNETES_SERVICE_HOST": str(worker.server.hostname),
                 "KUBERNETES_SERVICE_PORT": str(proxy.port)},
    ).load_and_set(configuration)
    configuration.retries = False
    timeout = rest.Timeout(connect=sdk.REQUEST_TIMEOUT_SECONDS, read=sdk.REQUEST_TIMEOUT_SECONDS)
    api = rest.Rest(kubernetes.client.ApiClient(configuration), timeout=timeout)
    found = keeper.Keeper(renewer=renewer.Renewer(
        api=api, namespace=worker.namespace, lease=POD, identity=POD))
    told = Told()
    assert found.first_renewal(timeout=TIMEOUT).verdict == "Renew"
    found.start(on_lapse=told.on_lapse, on_resume=told.on_resume, on_lost=told.on_lost)
    yield found, told
    found.stop()


def renew_time(worker: renewer_test.Worker) -> str | None:
    found: str | None = worker.lease()["spec"].get("renewTime")
    return found


def test_the_keeper_renews_as_the_pod(worker: renewer_test.Worker,
                                      kept: tuple[keeper.Keeper, Told]) -> None:
    the_keeper, told = kept
    first = wait_for(lambda: renew_time(worker), timeout=TIMEOUT, message="a renewal")
    wait_for(lambda: renew_time(worker) not in (None, first), timeout=TIMEOUT,
             message="another renewal")
    the_keeper.ensure_live()
    assert the_keeper.standing() is Standing.LIVE
    spec = worker.lease()["spec"]
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == (POD, DURATION)
    assert not told.lapsed.is_set() and told.lost == []


def test_a_tombstone_stops_the_keeper_for_good(worker: renewer_test.Worker,
                                                kept: tuple[keeper.Keeper, Told]) -> None:
    the_keeper, told = kept
    lease = worker.lease()  # the operator's tombstone, under the version it read
    lease["metadata"]["annotations"][names.OUTCOME_ANNOTATION] = "Lost"
    lease["spec"]["holderIdentity"] = None
    tombstone: Any = worker.coordination.replace_namespaced_lease(POD, worker.namespace, lease)
    wait_for(lambda: told.lost, timeout=TIMEOUT, message="the keeper to see the tombstone")
    assert told.lost == ["the attempt has ended (its lease is tombstoned)"]
    with pytest.raises(LeaseLost, match="tombstoned"):
        the_keeper.ensure_live()
    the_keeper.stop()  # its threads have ended: nothing can write after this
    after = worker.lease()
    assert after["metadata"]["resourceVersion"] == tombstone.metadata.resource_version
    assert told.lost == ["the attempt has ended (its lease is tombstoned)"]  # told once


def test_failing_requests_pause_effects_and_passing_ones_resume(
        worker: renewer_test.Worker, proxy: Proxy,
        kept: tuple[keeper.Keeper, Told]) -> None:
    the_keeper, told = kept
    wait_for(lambda: renew_time(worker), timeout=TIMEOUT, message="a renewal")
    proxy.stop_forwarding()
    stopped = time.monotonic()
    assert told.lapsed.wait(timeout=TIMEOUT), "the keeper to tell the lapse"
    # Paused before the server's record of the lease could have expired.
    last = datetime.fromisoformat(str(renew_time(worker)))  # the client's serialization
    assert told.lapsed_at is not None
    assert told.lapsed_at < last + timedelta(seconds=DURATION)
    with pytest.raises(LeaseLapsed) as raised:
        the_keeper.ensure_live()
    assert not isinstance(raised.value, LeaseLost)
    # An outage longer than the lease, renewal attempts going on: paused, never lost.
    wait_for(lambda: time.monotonic() > stopped + 2 * DURATION and proxy.held >= 2,
             timeout=TIMEOUT, message="an outage of two lease durations, renewals trying")
    assert the_keeper.standing() is Standing.LAPSED and told.lost == []
    before = renew_time(worker)
    proxy.resume()
    assert told.resumed.wait(timeout=TIMEOUT), "the keeper to resume"
    the_keeper.ensure_live()
    assert renew_time(worker) != before
    lease = worker.lease()
    assert lease["spec"]["holderIdentity"] == POD
    assert names.OUTCOME_ANNOTATION not in (lease["metadata"].get("annotations") or {})
