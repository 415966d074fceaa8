"""Records over real attempt Leases, written by the SDK with pod-bound tokens.

With the shipped validating policies in force (``serial``), no operator and no node: the
admin plays the operator (creates the attempt Leases, tombstones one), each attempt's Pod
exists unscheduled, and its service account (bound to the generated ``agentrun-worker``
ClusterRole only, so that role is shown to be enough) gets a token bound to that Pod.
Covers: the holder commits records (``LeaseRecords``: merge patch under the version read),
a repeat is a no-op and other content a conflict; a raw client cannot change, delete,
forge (another attempt's number, another key), oversize or overfill records, nor touch
other annotations, each refusal naming the policy; a renewal by merge patch of
``spec.renewTime`` alone still passes; through the attempt's sidecar (its real HTTP
server over a real ``Worker``) a body nested deeper than a record may hold is a 400 (1,000
levels too), one nested as deep is committed and read back by the successor, the 64th
record is committed and the 65th is a 422
``RecordLimit`` while the lease is fine, then, once tombstoned, a 410 ``RecordRefused``;
after the tombstone the stale attempt, its Pod still there and its token still
authenticating, cannot add a record to its own Lease nor to the successor's; the
successor lists the slot's Leases and its prefix holds the predecessor's records, so
``Steps.step`` skips what was committed and commits the rest.
"""

from __future__ import annotations

import contextlib
import json
import threading
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from agentrun import manifests, rest
from agentrun.api import bounds, names
from agentrun.examples.publisher import Publisher
from agentrun.owner import Effect
from agentrun.worker import _effects as effects
from agentrun.worker import _keeper as keeper
from agentrun.worker import _prefix as prefix
from agentrun.worker import _records as records
from agentrun.worker import _renewer as renewer
from agentrun.worker import _sdk as sdk
from agentrun.worker._context import Context
from agentrun.worker._renewals import Verdict
from agentrun.worker._sdk import Worker
from agentrun.worker._sidecar import CheckIns, Sidecar
from tests.support.actors.effectowner import EffectOwner
from tests.support.actors.sidecarhttp import Ask, serving
from tests.support.cluster.clusters import Cluster
from tests.support.waiting import wait_for, wait_for_default_service_account

pytestmark = pytest.mark.serial
SLOT, RUN, ACCOUNT = "s", "r", "worker"
POLICY = "agentrun-attempt-leases"
Kind = records.Kind
DEEPEST: Any = 0
for _ in range(bounds.PAYLOAD_DEPTH):  # a result nested as deep as a record may hold
    DEEPEST = [DEEPEST]


class Attempt:
    """Attempt ``number``'s Pod and Lease (``s-<n>``) and a client with its pod's token."""

    def __init__(self, cluster: Cluster, namespace: str, number: int, *, slot: str = SLOT,
                 annotations: dict[str, str] | None = None) -> None:
        admin = cluster.client("admin")
        self.core = kubernetes.client.CoreV1Api(admin)
        self.leases = kubernetes.client.CoordinationV1Api(admin)
        self.namespace, self.number, self.name = namespace, number, f"{slot}-{number}"
        self.slot = slot
        pod = self.pod = self.core.create_namespaced_pod(namespace, {
            "metadata": {"name": self.name},
            "spec": {"serviceAccountName": ACCOUNT, "restartPolicy": "Never",
                     "schedulerName": "agentrun-test-unserved",
                     "containers": [{"name": "w", "image": "localhost/agentrun/unused:0"}]}})
        self.leases.create_namespaced_lease(namespace, {"metadata": {
            "name": self.name, "annotations": annotations or {},
            "labels": {names.ATTEMPT_LABEL: str(number), names.SLOT_LABEL: slot,
                       names.RUN_LABEL: RUN}},
            "spec": {"holderIdentity": self.name, "leaseDurationSeconds": 30}})
        self.token = self.core.create_namespaced_service_account_token(ACCOUNT, namespace, {
            "spec": {"expirationSeconds": 600, "boundObjectRef": {
                "apiVersion": "v1", "kind": "Pod", "name": self.name,
                "uid": pod.metadata.uid}}}).status.token
        configuration = kubernetes.client.Configuration()
        configuration.host = admin.configuration.host
        configuration.ssl_ca_cert = admin.configuration.ssl_ca_cert
        configuration.verify_ssl = admin.configuration.verify_ssl
        configuration.api_key = {"authorization": f"Bearer {self.token}"}
        self.api = rest.Rest(kubernetes.client.ApiClient(configuration))

    def records(self, lease: Attempt | None = None) -> records.LeaseRecords:
        """This attempt's worker writing to ``lease``'s Lease (its own by default)."""
        target = lease or self
        return records.LeaseRecords(api=self.api, namespace=self.namespace, lease=target.name,
                                    attempt=self.number)

    def lease(self) -> dict[str, Any]:
        found: dict[str, Any] = self.leases.api_client.sanitize_for_serialization(
            self.leases.read_namespaced_lease(self.name, self.namespace))
        return found

    def raw_patch(self, body: dict[str, Any], lease: Attempt | None = None) -> str:
        """A merge patch with this pod's token; the refusal's message ('' if accepted)."""
        try:
            self.api.request("PATCH", (lease or self).records().path, body=body,
                             content_type=rest.MERGE_PATCH)
        except rest.ApiError as error:
            return error.message
        return ""

    def tombstone(self) -> None:
        lease = self.lease()
        lease["metadata"]["annotations"] = {**(lease["metadata"].get("annotations") or {}),
                                            names.OUTCOME_ANNOTATION: "Failed",
                                            names.POD_UID_ANNOTATION: self.pod.metadata.uid}
        lease["spec"]["holderIdentity"] = None
        self.leases.replace_namespaced_lease(self.name, self.namespace, lease)


@pytest.fixture
def attempts(cluster: Cluster, namespace: str, installed: None,
             validating: None) -> Callable[..., Attempt]:
    api = cluster.client("admin")
    wait_for_default_service_account(api, namespace)
    kubernetes.client.CoreV1Api(api).create_namespaced_service_account(
        namespace, {"metadata": {"name": ACCOUNT}})
    kubernetes.client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(namespace, {
        "metadata": {"name": manifests.WORKER_ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": manifests.WORKER_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}]})
    return lambda number, **given: Attempt(cluster, namespace, number, **given)


@contextlib.contextmanager
def served(attempt: Attempt) -> Iterator[Ask]:
    """The sidecar's real HTTP server on 127.0.0.1 over a real ``Worker`` of ``attempt``
    (its pod's token; not started: no renewal, the records alone are under test)."""
    context = Context(namespace=attempt.namespace, run=RUN, run_uid="uid-r", slot=SLOT,
                      node="n", attempt=attempt.number, fencing_token=attempt.number,
                      lease=attempt.name, config_dir=Path("/nonexistent"), pinned={})
    worker = sdk.Worker(context=context, api=attempt.api, keeper=keeper.Keeper(
        renewer=renewer.Renewer(api=attempt.api, namespace=attempt.namespace,
                                lease=attempt.name, identity=attempt.name)))
    with serving(Sidecar(worker=worker, check_ins=CheckIns(window_seconds=30))) as (ask, _):
        yield ask


def record(attempt: int, key: str, payload: Any) -> records.Record:
    return records.make(key=key, kind=Kind.STEP_RESULT, attempt=attempt, payload=payload)


def annotation(key: str, value: str | None) -> dict[str, Any]:
    return {"metadata": {"annotations": {bounds.RECORD_ANNOTATION_PREFIX + key: value}}}


def test_records_are_write_once_bounded_and_sealed_by_the_tombstone(
        attempts: Callable[[int], Attempt], tmp_path: Path) -> None:
    first = attempts(1)
    ledger = first.records()
    gather = record(1, "gather", {"sources": ["a", "b"]})
    assert ledger.commit(gather) == gather
    assert ledger.commit(gather) == gather  # the retry after a lost answer: a no-op
    assert ledger.read() == {"gather": gather}
    with pytest.raises(records.RecordConflict, match="write-once"):
        ledger.commit(record(1, "gather", {"sources": ["c"]}))

    committed = first.lease()["metadata"]["annotations"]
    changed = record(1, "gather", "other")
    for body in (annotation("gather", records.encode(changed)), annotation("gather", None)):
        refused = first.raw_patch(body)
        assert POLICY in refused and "records are write-once" in refused, refused
    forged = records.encode(record(2, "decide", "x"))
    assert "starts with the Lease's attempt number" in first.raw_patch(
        annotation("decide", forged))
    assert "names its own key" in first.raw_patch(
        annotation("decide", records.encode(record(1, "other", "x"))))
    oversize = '{"attempt":1,"key":"big","pad":"' + "x" * bounds.RECORD_BYTES + '"}'
    assert f"at most {bounds.RECORD_BYTES} bytes" in first.raw_patch(
        annotation("big", oversize))
    assert "not change other annotations" in first.raw_patch(
        {"metadata": {"annotations": {"agentrun.dev/outcome": "Succeeded"}}})
    assert first.lease()["metadata"]["annotations"] == committed  # nothing got through

    # The keeper's cheap renewal: a merge patch of renewTime alone, under the version read.
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    version = first.lease()["metadata"]["resourceVersion"]
    assert first.raw_patch({"metadata": {"resourceVersion": version},
                            "spec": {"renewTime": now}}) == ""

    for n in range(bounds.MAX_RECORDS - 3):  # with "gather": two short of full
        ledger.commit(record(1, f"note-{n}", n))
    with served(first) as ask:  # attempt 1's sidecar, its worker on the real Lease
        for depth in (bounds.PAYLOAD_DEPTH + 1, 1000):  # a parser's recursion: not a 500
            status, body = ask("PUT", "/v1/steps/deep", b"[" * depth + b"]" * depth)
            assert status == 400 and "levels" in body["message"], body
        assert ask("PUT", "/v1/steps/deep", json.dumps(DEEPEST).encode()) == (
            201, {"result": DEEPEST})
        assert ask("PUT", "/v1/steps/last", b"63") == (201, {"result": 63})  # the 64th
        status, body = ask("PUT", "/v1/steps/one-too-many", b"0")
        assert (status, body["error"]) == (422, "RecordLimit"), body  # the lease is fine
        assert f"at most {bounds.MAX_RECORDS}" in body["message"]
        assert ask("POST", "/v1/check-in", b"") == (204, None)
        assert f"at most {bounds.MAX_RECORDS} records" in first.raw_patch(annotation(
            "one-too-many", records.encode(record(1, "one-too-many", 0))))  # admission too
        first.tombstone()
        status, body = ask("PUT", "/v1/steps/late", b"0")
        assert (status, body["error"]) == (410, "RecordRefused"), body  # now: exit
        assert POLICY in body["message"] and "tombstoned" in body["message"]

    review = first.api.request(  # the stale token still authenticates (its Pod is there)
        "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert review["status"]["userInfo"]["extra"][
        "authentication.kubernetes.io/pod-name"] == [first.name]
    second = attempts(2)
    late = records.make(key="late", kind=Kind.DECISION, attempt=1, payload="stale")
    with pytest.raises(records.RecordRefused, match=f"{POLICY}.*tombstoned"):
        ledger.commit(late)
    refused = first.raw_patch(annotation("late", records.encode(
        record(2, "late", "stale"))), lease=second)
    assert POLICY in refused and f"held by pod {second.name}" in refused, refused

    leases = prefix.list_leases(api=second.api, namespace=second.namespace, slot=SLOT,
                                run=RUN)
    assert sorted(lease["metadata"]["name"] for lease in leases) == ["s-1", "s-2"]
    found = prefix.prefix(leases=leases, attempt=2)
    assert found.unsealed == () and found.problems == ()
    assert found.get("gather") == gather and found.get("late") is None
    store = records.FsspecStore(f"file://{tmp_path}/payloads")
    steps = prefix.Steps(prefix=found, ledger=second.records(), store=store)
    assert steps.step("gather", do=lambda: pytest.fail("committed: skipped")) == {
        "sources": ["a", "b"]}
    assert steps.step("deep", do=lambda: pytest.fail("committed: skipped")) == DEEPEST
    report = {"text": "r" * (2 * bounds.INLINE_PAYLOAD_BYTES)}
    assert steps.step("write", do=lambda: report) == report
    assert steps.done == ["gather", "deep"]
    stored = second.records().read()["write"]
    assert stored.attempt == 2 and stored.ref is not None
    assert records.payload(stored, store=store) == report


def worker_of(attempt: Attempt, tmp_path: Path) -> Worker:
    """The SDK's Worker of ``attempt`` as its pod, its keeper renewed once (live)."""
    context = Context(namespace=attempt.namespace, run=RUN, run_uid="uid-1", slot=attempt.slot,
                      node="n", attempt=attempt.number, fencing_token=attempt.number,
                      lease=attempt.name, config_dir=tmp_path, pinned={})
    found = Worker(context=context, api=attempt.api, keeper=keeper.Keeper(
        renewer=renewer.Renewer(api=attempt.api, namespace=attempt.namespace,
                                lease=attempt.name, identity=attempt.name)))
    assert found.keeper.first_renewal(timeout=10).verdict is Verdict.RENEW
    return found


def test_an_effect_whose_call_raised_is_asked_about_before_it_is_sent_again(
        attempts: Callable[[int], Attempt], tmp_path: Path) -> None:
    owner = EffectOwner(hold=threading.Event()).start()
    try:
        first = attempts(1)
        worker = worker_of(first, tmp_path)

        publisher = Publisher(url=owner.url, fence="s")  # the example's client of the kit
        ask = publisher.reconcile

        def send(idem: str, token: int, *, timeout: float = 10) -> Any:
            request = urllib.request.Request(
                publisher.endpoint, data=b"null", method="POST", headers={
                    **Effect(key=idem, token=token, scope="s").headers(),
                    "Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return json.loads(answer.read())

        def dropped(idem: str, token: int) -> Any:
            raise ConnectionResetError("the connection dropped before the owner got it")

        publish = effects.idempotency_key(run_uid="uid-1", slot=SLOT, key="publish")
        with pytest.raises(TimeoutError):  # the owner holds the apply: no answer in time
            worker.effect("publish", key="publish", reconcile=ask,
                          call=lambda idem, token: send(idem, token, timeout=0.5))
        assert owner.hold is not None
        owner.hold.set()
        wait_for(lambda: owner.applied.get(publish) == 1, timeout=10,
                 message="the owner applied the send that timed out")
        assert worker.effect("publish", key="publish", call=send, reconcile=ask) == \
            owner.results[publish]
        assert [(r.method, r.key) for r in owner.requests] == [("POST", publish),
                                                                ("GET", publish)]

        notify = effects.idempotency_key(run_uid="uid-1", slot=SLOT, key="notify")
        with pytest.raises(ConnectionResetError):
            worker.effect("notify", key="notify", call=dropped, reconcile=ask)
        worker.effect("notify", key="notify", call=send, reconcile=ask)
        assert [(r.method, r.key) for r in owner.requests[2:]] == [("GET", notify),
                                                                    ("POST", notify)]
        assert owner.applied == {publish: 1, notify: 1}
        committed = first.records().read()
        assert committed["publish.outcome"].inline["via"] == "reconcile"
        assert committed["notify.outcome"].inline["via"] == "call"
    finally:
        owner.stop()


def test_the_journal_usage_moves_only_with_the_head_and_in_its_shape(
        attempts: Callable[[int], Attempt]) -> None:
    """The usage beside the head (``journal.agentrun.dev/usage``): written in the head's
    own write, well formed, never alone, never smaller and never removed; through the real
    API server."""
    first = attempts(1)

    def heads(seq: int, usage: str | None) -> dict[str, Any]:
        return {"metadata": {"annotations": {names.JOURNAL_HEAD_ANNOTATION: f"{seq:010d}-"
                                             + "ab" * 32,
                                             names.JOURNAL_USAGE_ANNOTATION: usage}}}

    assert first.raw_patch(heads(1, "1 records, 120 bytes")) == ""
    alone = first.raw_patch({"metadata": {"annotations": {
        names.JOURNAL_USAGE_ANNOTATION: "9 records, 9 bytes"}}})
    assert POLICY in alone and "changes only in the write that advances" in alone, alone
    for bad in ("2 records", "2 records, -1 bytes", "2 records, 1 bytes\n", "x" * 5000):
        refused = first.raw_patch(heads(2, bad))
        assert "'<n> records, <n> bytes'" in refused, (bad, refused)
    removed = first.raw_patch(heads(2, None))
    assert POLICY in removed and "not change other annotations" in removed, removed
    for smaller in ("0 records, 0 bytes", "2 records, 100 bytes", "0 records, 900 bytes"):
        shrunk = first.raw_patch(heads(2, smaller))
        assert POLICY in shrunk and "never decreases" in shrunk, (smaller, shrunk)
    assert first.raw_patch(heads(2, "2 records, 250 bytes")) == ""
    annotations = first.lease()["metadata"]["annotations"]
    assert annotations[names.JOURNAL_USAGE_ANNOTATION] == "2 records, 250 bytes"
