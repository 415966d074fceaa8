"""The operator's runtime (its queue and stores' timeouts) against the real API server.

- A hung API request stops no other slot: a pod create of one slot hangs in the API
  server (a validating webhook whose listener accepts the connection and never answers),
  and with a single worker (``--workers 1``) another run's slot is still claimed while it
  hangs, because the reconcile timeout frees the worker;
- ``--qps`` bounds the request rate of the whole process: every request the operator
  user makes in the test's namespace (Kopf's lists and watches, our reads, writes and
  Events), counted in the audit log, stays under ``qps * window + burst`` in every window
  while the operator lays out and claims a wide run, and the limit is reached (the
  operator was held back, not idle);
- Events are posted by our own client, a repeat folded into the first Event's ``series``
  (as the operator's own user, so its ``patch events`` right is the one used).
"""

from __future__ import annotations

import base64
import json
import logging
import socket
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import kubernetes
import pytest
import yaml

from agentrun import rest
from agentrun.core.base.events import Event
from agentrun.kube import events
from tests.support.actors.operators import OperatorProcess
from tests.support.cluster.clusters import Cluster
from tests.support.plays.scenarios import Scenario, holds_throughout
from tests.support.waiting import wait_for, wait_for_default_service_account

pytestmark = pytest.mark.integration
WEBHOOK = "agentrun-test-hang"


class SilentListener:
    """A TCP listener that accepts connections and never says a word (nor closes them)."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.port = self.socket.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:  # closed
                return
            self.accepted.append(connection)

    def close(self) -> None:
        self.socket.close()
        for connection in self.accepted:
            connection.close()


def cluster_ca(cluster: Cluster) -> str:
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    data: str = config["clusters"][0]["cluster"]["certificate-authority-data"]
    base64.b64decode(data, validate=True)
    return data


@pytest.fixture
def hanging_webhook(cluster: Cluster, namespace: str, installed: None) -> Iterator[SilentListener]:
    """Pod creates of node ``stuck`` in the test's namespace hang for the webhook's 30 s."""
    listener = SilentListener()
    body = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK},
        "webhooks": [{
            "name": "hang.agentrun.test", "admissionReviewVersions": ["v1"],
            "sideEffects": "None", "timeoutSeconds": 30, "failurePolicy": "Ignore",
            "clientConfig": {"url": f"https://127.0.0.1:{listener.port}/",
                             "caBundle": cluster_ca(cluster)},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                       "operations": ["CREATE"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "objectSelector": {"matchLabels": {"agentrun.dev/node": "stuck"}},
        }]}
    applied = cluster.kubectl("apply", "-f", "-", input=json.dumps(body))
    assert applied.returncode == 0, applied.stderr
    yield listener
    cluster.kubectl("delete", "validatingwebhookconfiguration", WEBHOOK, "--ignore-not-found")
    listener.close()


@pytest.mark.serial
def test_a_hung_request_stops_no_other_slot(cluster: Cluster, namespace: str, tmp_path: Path,
                                            hanging_webhook: SilentListener) -> None:
    scenario = Scenario(cluster=cluster, namespace=namespace)
    scenario.configs(name="one", nodes=(("stuck", "cpu", []),))
    scenario.configs(name="two", nodes=(("free", "cpu", []),))
    scenario.launch_spec("cpu-workers", classes=["cpu"])
    wait_for_default_service_account(scenario.core.api_client, namespace)
    operator = OperatorProcess(cluster=cluster, namespace=namespace, log=tmp_path / "op.log",
                               args=["--workers", "1", "--reconcile-timeout", "3"]).start()
    try:
        scenario.run("one", config="one")
        stuck = scenario.slot_name_eventually("one", "stuck")
        wait_for(lambda: hanging_webhook.accepted, timeout=30,
                 message=f"the stuck slot's pod create to reach the webhook; {operator.tail()}")
        hung_at = datetime.now().astimezone()
        scenario.run("two", config="two")
        free = scenario.slot_name_eventually("two", "free")
        scenario.wait_state(free, "Active", timeout=20)
        took = (datetime.now().astimezone() - hung_at).total_seconds()
        assert took < 25, f"the free slot was claimed only after {took:.1f} s"
        # The create that hangs has not come back: the other slot did not wait for it.
        assert scenario.pod(f"{stuck}-1") is None
        assert "took over 3 s" in operator.tail(200), operator.tail()
    finally:
        operator.stop()


def requests_of(log: Path, *, namespace: str, user: str,
                since: datetime) -> list[tuple[datetime, str]]:
    """When each request of ``user`` in ``namespace`` reached the API server (any verb),
    and its client's user agent (Kopf's session says ``kopf/<version>``)."""
    seen: dict[str, tuple[datetime, str]] = {}
    with open(log, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if namespace not in line:
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if (event.get("user") or {}).get("username") != user:
                continue
            if (event.get("objectRef") or {}).get("namespace") != namespace:
                continue
            at = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
            if at >= since:
                seen.setdefault(event["auditID"], (at, str(event.get("userAgent") or "")))
    return sorted(seen.values())


def test_qps_bounds_the_request_rate(cluster: Cluster, namespace: str, tmp_path: Path,
                                     installed: None) -> None:
    if cluster.audit_log is None:
        pytest.skip("requests are counted in the audit log of the suite's own control plane")
    qps, burst, window = 10, 10, 2.0
    scenario = Scenario(cluster=cluster, namespace=namespace)
    nodes = tuple((f"n{i}", "cpu", []) for i in range(10))
    scenario.configs(nodes=nodes)
    scenario.launch_spec("cpu-workers", classes=["cpu"])
    wait_for_default_service_account(scenario.core.api_client, namespace)
    started = datetime.now().astimezone()
    operator = OperatorProcess(cluster=cluster, namespace=namespace, log=tmp_path / "op.log",
                               args=["--qps", str(qps), "--burst", str(burst)]).start()
    try:
        scenario.run()
        wait_for(lambda: len(scenario.slot_names("study")) == len(nodes), timeout=120,
                 message=f"the run's {len(nodes)} slots; {operator.tail()}")
        for slot in scenario.slot_names("study"):
            scenario.wait_state(slot, "Active", timeout=120)
    finally:
        operator.stop()
    found = requests_of(cluster.audit_log, namespace=namespace, user="operator", since=started)
    # Kopf's lists and watches are among what the bucket held back (its session is ours).
    assert any(agent.startswith("kopf/") for _, agent in found), {a for _, a in found}
    times = [at for at, _ in found]
    busiest = max(sum(1 for t in times[i:] if (t - start).total_seconds() < window)
                  for i, start in enumerate(times))
    assert busiest <= qps * window + burst + 1, (busiest, len(times))
    span = (times[-1] - times[0]).total_seconds()
    print(f"{len(times)} requests in {span:.1f} s; busiest {window:g} s: {busiest} "
          f"(bound {qps * window + burst:g})")
    # Held at the limit, not idle: more than one window's allowance in all, at least at
    # half the allowed rate throughout.
    assert len(times) > qps * window + burst, len(times)
    assert len(times) >= 0.5 * qps * span, (len(times), span)


def test_a_repeated_event_is_folded_into_one_series(cluster: Cluster, namespace: str,
                                                    installed: None) -> None:
    core = kubernetes.client.CoreV1Api(cluster.client())
    subject = kubernetes.client.ApiClient().sanitize_for_serialization(
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "subject"}}))
    subject = {"apiVersion": "v1", "kind": "ConfigMap", **subject}
    poster = events.Poster(rest.Rest(cluster.client("operator")),
                           logger=logging.getLogger("test"))
    again = Event(type="Warning", reason="ClaimFailed", message="the same words")
    for _ in range(3):
        poster.post(subject, again)
    poster.post(subject, Event(type="Warning", reason="ClaimFailed", message="other"))

    def posted() -> list[kubernetes.client.CoreV1Event] | None:
        found = [e for e in core.list_namespaced_event(namespace).items
                 if e.involved_object.name == "subject"]
        return found if len(found) == 2 else None

    found = wait_for(posted, timeout=10, message="two Events about the ConfigMap")
    folded = next(e for e in found if e.message == "the same words")
    assert folded.count == 3
    assert folded.series is not None and folded.series.count == 3
    assert folded.involved_object.uid == subject["metadata"]["uid"]
    single = next(e for e in found if e.message == "other")
    assert single.count == 1 and single.series is None
    holds_throughout(lambda: posted() is not None, seconds=1.0,
                     message="no third Event appears")
