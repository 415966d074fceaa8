"""The sidecar's protocol over a fake worker, and its check-in window as the keeper's gate.

The worker is fake where it would talk to the API server (its prefix and commits are in
memory; the real pod is tests/integration/node/test_sidecar_worker.py), but effects run
through the real ledger (``effects.Ledger``) so the instruction sequence is the ledger's.

Covers: the window on an injected clock (open from the start, a check-in reopens it,
overdue says why); the keeper sends no renewal while the gate says no, says so once,
lapses on time, and renews again when it says yes; steps: 404 then PUT 201, the same
content again 200, other content 409, bad keys, bodies and sizes 400 changing nothing;
lost → 410, not yet renewed → 503 for ready; a full Lease (RecordLimit) → 422, not the
410 of a refusal that means the lease is lost; the server on localhost moving JSON; a
restarted sidecar reconciles its own attempt's intent first. The effect protocol is in
test_sidecar_effects.py; the fakes in sidecarfakes.py.
"""

from __future__ import annotations

import copy
import json
import logging
from typing import Any

import pytest

from agentrun.worker import _journal as journals
from agentrun.worker import _keeper as keeper
from agentrun.worker import _records as records
from agentrun.worker import _renewer as renewer
from agentrun.worker import _sidecarprobe as sidecarprobe
from agentrun.worker._renewals import Standing
from agentrun.worker._sidecar import CheckIns
from agentrun.worker._sidecarsessions import MAX_BODY_BYTES, RESULT_BYTES, Reply
from tests.support.actors.sidecarhttp import serving

from .sidecarfakes import ATTEMPT, IDEM, POD, Clock, FakeWorker, Payloads, intent, make, send


def test_the_window_opens_at_start_and_at_each_check_in() -> None:
    clock = Clock()
    window = CheckIns(window_seconds=30, monotonic=clock)
    clock.now += 30
    assert window.overdue() is None
    clock.now += 0.5
    assert window.overdue() == ("the main container has not checked in for 30s since the "
                                "sidecar started (the window is 30s)")
    window.check_in()
    clock.now += 29
    assert window.overdue() is None
    clock.now += 2
    assert "since its last check-in" in (window.overdue() or "")


class ScriptedApi:
    def __init__(self, clock: Clock) -> None:
        self.clock, self.puts = clock, 0
        self.lease: dict[str, Any] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                      "metadata": {"name": POD, "namespace": "ns", "resourceVersion": "1"},
                      "spec": {"holderIdentity": POD, "leaseDurationSeconds": 10}}

    def request(self, method: str, path: str, *, body: Any = None) -> Any:
        if method == "PUT":
            self.puts += 1
            return body
        return copy.deepcopy(self.lease)


def test_the_keeper_renews_only_while_the_main_container_checks_in(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    api = ScriptedApi(clock)
    window = CheckIns(window_seconds=5, monotonic=clock)
    kept = keeper.Keeper(renewer=renewer.Renewer(api=api, namespace="ns", lease=POD,  # type: ignore[arg-type]
                                                 identity=POD, monotonic=clock),
                         should_renew=window.overdue)
    assert kept.first_renewal(timeout=1).verdict == "Renew"
    assert api.puts == 1
    clock.now += 4
    kept.renew()
    assert api.puts == 2  # within the first window
    with caplog.at_level(logging.INFO, logger="agentrun.worker"):
        for _ in range(6):  # 12 s without a check-in
            clock.now += 2
            kept.renew()
    assert api.puts == 2  # nothing sent once overdue
    stops = [r.getMessage() for r in caplog.records if "renewals stop" in r.getMessage()]
    assert len(stops) == 1 and "has not checked in for 6s" in stops[0]
    assert kept.standing() is Standing.LAPSED  # 8 s after the last renewal's send
    with pytest.raises(keeper.LeaseLapsed):
        kept.ensure_live()
    window.check_in()
    with caplog.at_level(logging.INFO, logger="agentrun.worker"):
        kept.renew()
    assert api.puts == 3 and kept.standing() is Standing.LIVE
    assert any("renewals resume" in r.getMessage() for r in caplog.records)
    api.lease["spec"]["holderIdentity"] = None  # tombstoned meanwhile: lost, not revived
    clock.now += 2
    kept.renew()
    assert kept.standing() is Standing.LOST and api.puts == 3


# -- steps ------------------------------------------------------------------------------------


def test_a_step_is_404_then_committed_once() -> None:
    sidecar, worker = make()
    assert send(sidecar, "POST", "/v1/check-in").status == 204
    missing = send(sidecar, "GET", "/v1/steps/gather")
    assert missing.status == 404 and missing.body["error"] == "NotCommitted"
    assert send(sidecar, "PUT", "/v1/steps/gather", {"n": 1}) == Reply(
        status=201, body={"result": {"n": 1}})
    assert worker.memory.committed["gather"].inline == {"n": 1}
    assert worker.memory.committed["gather"].attempt == ATTEMPT
    assert send(sidecar, "GET", "/v1/steps/gather").body == {"result": {"n": 1}}
    assert send(sidecar, "PUT", "/v1/steps/gather", {"n": 1}).status == 200
    other = send(sidecar, "PUT", "/v1/steps/gather", {"n": 2})
    assert other.status == 409 and "write-once" in other.body["message"]
    assert worker.memory.committed["gather"].inline == {"n": 1}


def test_a_step_is_staged_unless_asked_durable_and_a_flush_makes_all_durable() -> None:
    sidecar, worker = make()
    assert send(sidecar, "PUT", "/v1/steps/a", 1).status == 201
    assert send(sidecar, "PUT", "/v1/steps/b?durable=true", 2).status == 201
    assert send(sidecar, "PUT", "/v1/steps/c?durable=false", 3).status == 201
    assert worker.durables == [False, True, False] and worker.flushes == 0
    assert send(sidecar, "POST", "/v1/flush") == Reply(status=204)
    assert worker.flushes == 1
    worker.keeper.state = Standing.LOST
    assert send(sidecar, "POST", "/v1/flush").status == 410 and worker.flushes == 1


def test_a_step_committed_by_an_earlier_attempt_is_found() -> None:
    done = records.make(key="gather", kind=records.Kind.STEP_RESULT, attempt=1, payload="x")
    sidecar, worker = make(FakeWorker(earlier={"gather": done}))
    assert send(sidecar, "GET", "/v1/steps/gather").body == {"result": "x"}
    assert send(sidecar, "PUT", "/v1/steps/gather", "y").status == 409
    assert worker.memory.committed == {}


@pytest.mark.parametrize(("method", "path", "body", "status", "says"), [
    ("PUT", "/v1/steps/Bad_Key", b"1", 400, "step key"),
    ("PUT", "/v1/steps/a.b", b"1", 400, "step key"),
    ("PUT", "/v1/steps/gather", b"{nope", 400, "not JSON"),
    ("PUT", "/v1/steps/gather", json.dumps("x" * 1100).encode(), 400, "at most 1024"),
    ("PUT", "/v1/steps/gather", b" " * (MAX_BODY_BYTES + 1), 400, f"at most {MAX_BODY_BYTES}"),
    ("DELETE", "/v1/steps/gather", b"", 405, "use PUT"),
    ("PUT", "/v1/steps/gather?durable=yes", b"1", 400, "durable=true or durable=false"),
    ("GET", "/v1/flush", b"", 405, "use POST"),
    ("GET", "/v1/check-in", b"", 405, "use POST"),
    ("GET", "/v2/steps/gather", b"", 404, "docs/worker-sidecar.md"),
    ("POST", "/v1/effects/publish", b'{"name": ""}', 400, '"name"'),
    ("POST", "/v1/effects/publish", b'{"owner": "x"}', 400, '"name"'),
    ("POST", "/v1/effects/publish", b'{"name": "p", "to": 1}', 400, "an effect request"),
    ("POST", "/v1/effects/publish/reply", b'{"result": 1}', 409, "POST /v1/effects/publish"),
])
def test_bad_requests_say_why_and_change_nothing(method: str, path: str, body: bytes,
                                                 status: int, says: str) -> None:
    sidecar, worker = make()
    reply = sidecar.handle(method, path, body)
    assert reply.status == status and says in reply.body["message"], reply
    assert worker.memory.committed == {} and sidecar.sessions == {}


def test_a_lost_lease_is_410_and_ready_waits_for_the_first_renewal() -> None:
    sidecar, worker = make()
    worker.keeper.state = Standing.STARTING
    assert send(sidecar, "GET", "/v1/ready").status == 503
    worker.keeper.state = Standing.LIVE
    assert send(sidecar, "GET", "/v1/ready") == Reply(status=200, body={"standing": "Live"})
    worker.keeper.state = Standing.LOST
    for method, path, body in (("POST", "/v1/check-in", None), ("GET", "/v1/ready", None),
                               ("PUT", "/v1/steps/gather", 1),
                               ("POST", "/v1/effects/publish", {"name": "publish"})):
        reply = send(sidecar, method, path, body)
        assert reply.status == 410 and reply.body["error"] == "LeaseLost", (path, reply)
    assert worker.memory.committed == {}


class Refusing:
    """A Lease that refuses every record with ``error`` (what LeaseRecords raises)."""

    def __init__(self, error: records.RecordError) -> None:
        self.error = error

    def commit(self, record: records.Record) -> records.Record:
        raise self.error

    stage = commit

    def flush(self) -> None:
        raise self.error

    close = flush


@pytest.mark.parametrize(("refusal", "status"), [
    (records.RecordLimit("Lease s-2 holds 64 records"), 422),
    (records.RecordRefused("Lease s-2 is tombstoned"), 410)])
def test_a_full_lease_is_not_a_lost_lease(refusal: records.RecordError, status: int) -> None:
    sidecar, worker = make()
    worker.steps.ledger = Refusing(refusal)
    reply = send(sidecar, "PUT", "/v1/steps/gather", 1)
    assert (reply.status, reply.body["error"]) == (status, type(refusal).__name__), reply
    first = send(sidecar, "POST", "/v1/effects/publish", {"name": "publish"})
    assert first.body["do"] == "stop" and first.body["error"] == type(refusal).__name__


# -- effects ----------------------------------------------------------------------------------


def test_the_server_listens_on_localhost_and_moves_json() -> None:
    sidecar, worker = make()
    with serving(sidecar) as (ask, (host, port)):
        assert host == "127.0.0.1"
        assert ask("POST", "/v1/check-in") == (204, None)
        assert ask("PUT", "/v1/steps/gather", b'{"n": 1}') == (201, {"result": {"n": 1}})
        status, body = ask("PUT", "/v1/steps/other", b"1",
                           {"Content-Length": str(10**9)})  # never read
        assert status == 400 and f"at most {MAX_BODY_BYTES}" in body["message"]
        status, body = ask("GET", "/v1/steps/nothing")
        assert status == 404 and body["error"] == "NotCommitted"
        assert set(worker.memory.committed) == {"gather"}
        assert not sidecar.told_ready
        assert sidecarprobe.ready(port=port) == 0
        assert sidecar.told_ready  # a SIGTERM from now on is the pod's end: it releases
        worker.keeper.state = Standing.STARTING
        assert sidecarprobe.ready(port=port) == 1


def test_a_restarted_sidecar_reconciles_its_own_attempts_intent_first() -> None:
    # The old process committed this attempt's intent and died before the reply: the new
    # one has no session, so the old reply is a conflict, and the effect is asked about.
    sidecar, worker = make(FakeWorker(earlier={"publish.intent": intent("publish", ATTEMPT)}))
    stale = send(sidecar, "POST", "/v1/effects/publish/reply", {"result": 1})
    assert stale.status == 409
    first = send(sidecar, "POST", "/v1/effects/publish", {"name": "publish"})
    assert first.body == {"do": "reconcile", "idempotencyKey": IDEM}
    assert worker.memory.committed == {}


def test_with_a_journal_a_large_result_is_stored_by_reference() -> None:
    sidecar, worker = make(FakeWorker(store=Payloads()))
    large = {"text": "x" * (3 * 1024 * 1024)}
    reply = sidecar.handle("PUT", "/v1/steps/gather", json.dumps(large).encode())
    assert reply.status == 201 and reply.body == {"result": large}
    record = worker.memory.committed["gather"]
    assert record.inline is None and record.ref is not None and record.size > 3 * 1024 * 1024
    assert sidecar.handle("GET", "/v1/steps/gather").body == {"result": large}
    too_large = json.dumps("y" * RESULT_BYTES).encode()
    refused = sidecar.handle("PUT", "/v1/steps/other", too_large)
    assert refused.status == 400 and f"at most {RESULT_BYTES}" in refused.body["message"]
    assert set(worker.memory.committed) == {"gather"}
    # without a journal the same result is refused, saying why
    plain, _ = make()
    without = plain.handle("PUT", "/v1/steps/gather", json.dumps(large).encode())
    assert without.status == 400 and "no journal" in without.body["message"]


def test_a_silent_journal_store_is_a_503_that_commits_nothing() -> None:
    class Silent(FakeWorker):
        def step(self, key: str, *, do: Any, kind: records.Kind = records.Kind.STEP_RESULT,
                 durable: bool = False) -> Any:
            raise journals.JournalUnavailable("storing x: the journal's store did not answer")

    sidecar, worker = make(Silent(store=Payloads()))
    reply = sidecar.handle("PUT", "/v1/steps/gather", b'{"n": 1}')
    assert reply.status == 503 and reply.body["error"] == "JournalUnavailable"
    assert "nothing was committed" in reply.body["message"] and worker.memory.committed == {}


def test_a_silent_store_is_never_taken_for_a_step_not_committed() -> None:
    """A committed result the store cannot give back now: GET and PUT answer 503, never a
    404 that would have the step done and committed again with other content."""
    class Silenced(Payloads):
        silent = False

        def get(self, uri: str, *, size: int) -> bytes:
            if self.silent:
                raise journals.JournalUnavailable("reading x: the journal's store did not answer")
            return super().get(uri, size=size)

    store = Silenced()
    sidecar, worker = make(FakeWorker(store=store))
    large = {"text": "x" * 4000}
    assert sidecar.handle("PUT", "/v1/steps/gather", json.dumps(large).encode()).status == 201
    fresh, _ = make(FakeWorker(store=store, earlier=dict(worker.memory.committed)))
    store.silent = True
    got = fresh.handle("GET", "/v1/steps/gather")
    assert got.status == 503 and got.body["error"] == "JournalUnavailable"
    other = fresh.handle("PUT", "/v1/steps/gather", b'{"text": "other"}')
    assert other.status == 503
    store.silent = False
    assert fresh.handle("GET", "/v1/steps/gather").body == {"result": large}
