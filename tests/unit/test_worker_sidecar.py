"""The sidecar's protocol over a fake worker, and its check-in window as the keeper's gate.

The worker is fake where it would talk to the API server (its prefix and commits are in
memory; the real pod is tests/integration/node/test_sidecar_worker.py), but effects run
through the real ledger (``effects.Ledger``) so the instruction sequence is the ledger's.

Covers: the window on an injected clock (open from the start, a check-in reopens it,
overdue says why); the keeper sends no renewal while the gate says no, says so once,
lapses on time, and renews again when it says yes; steps: 404 then PUT 201, the same
content again 200, other content 409, bad keys, bodies and sizes 400 changing nothing;
lost → 410, not yet renewed → 503 for ready; effects: call → done; a call reply with an
error → stop; an intent without outcome → reconcile first (no call before it) →
applied (done, never called) / not-applied (call with the same key and this attempt's
token) / in-progress then applied / unknown → stop AmbiguousEffect; a repeated request
returns the kept answer (never a second call); a main container that never replies
ends with a stop (NoReply); replies that do not fit are 400 and the instruction stands.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentrun.worker import effects, keeper, prefix, records, renewer
from agentrun.worker.renewals import Standing
from agentrun.worker.sidecar import CheckIns, Sidecar
from agentrun.worker.sidecarsessions import Reply

UID, SLOT, ATTEMPT = "uid-run", "study-research", 2
POD = f"{SLOT}-{ATTEMPT}"


@dataclass
class Clock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


class Memory:
    """The attempt's Lease records, in memory (write-once like LeaseRecords)."""

    def __init__(self) -> None:
        self.committed: dict[str, records.Record] = {}

    def commit(self, record: records.Record) -> records.Record:
        found = self.committed.get(record.key)
        if found is not None and found != record:
            raise records.RecordConflict(f"record {record.key} is already committed")
        self.committed[record.key] = record
        return record


@dataclass
class FakeKeeper:
    state: Standing = Standing.LIVE

    def standing(self) -> Standing:
        return self.state

    def ensure_live(self) -> None:
        if self.state is Standing.LOST:
            raise keeper.LeaseLost("lost")
        if self.state is not Standing.LIVE:
            raise keeper.LeaseLapsed("lapsed")


@dataclass
class FakeWorker:
    """A Worker whose prefix is ``earlier`` records and whose commits go to ``memory``."""

    earlier: dict[str, records.Record] = field(default_factory=dict)
    keeper: FakeKeeper = field(default_factory=FakeKeeper)
    memory: Memory = field(default_factory=Memory)
    owners: list[str | None] = field(default_factory=list)  # what each effect was given
    _steps: prefix.Steps | None = None

    @property
    def steps(self) -> prefix.Steps:
        if self._steps is None:
            self._steps = prefix.Steps(prefix=prefix.Prefix(attempt=ATTEMPT,
                                                            committed=self.earlier),
                                       ledger=self.memory)
        return self._steps

    def step(self, key: str, *, do: Callable[[], Any],
             kind: records.Kind = records.Kind.STEP_RESULT) -> Any:
        return self.steps.step(key, do=do, kind=kind)

    def effect(self, name: str, *, key: str, call: effects.Call,
               reconcile: effects.Reconcile | None = None, owner: str | None = None) -> Any:
        self.owners.append(owner)
        return effects.Ledger(steps=self.steps, keeper=self.keeper, run_uid=UID, slot=SLOT,
                              sleep=lambda _: None).effect(name, key=key, call=call,
                                                          reconcile=reconcile, owner=owner)


def make(worker: FakeWorker | None = None, **kw: Any) -> tuple[Sidecar, FakeWorker]:
    worker = worker or FakeWorker()
    return Sidecar(worker=worker, check_ins=CheckIns(window_seconds=30), **kw), worker


def send(sidecar: Sidecar, method: str, path: str, body: Any = None) -> Reply:
    data = b"" if body is None else json.dumps(body).encode()
    return sidecar.handle(method, path, data)


def intent(key: str, attempt: int = 1) -> records.Record:
    idem = effects.idempotency_key(run_uid=UID, slot=SLOT, key=key)
    return records.make(key=f"{key}.intent", kind=records.Kind.EFFECT_INTENT, attempt=attempt,
                        payload={"effect": "publish", "idempotencyKey": idem,
                                 "fencingToken": attempt})


IDEM = effects.idempotency_key(run_uid=UID, slot=SLOT, key="publish")


# -- the check-in window and the keeper's gate -----------------------------------------------


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
    ("PUT", "/v1/steps/gather", b" " * 2049, 400, "at most 2048"),
    ("DELETE", "/v1/steps/gather", b"", 405, "use PUT"),
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


# -- effects ----------------------------------------------------------------------------------


def test_an_effect_is_call_then_done_and_a_repeat_is_the_kept_answer() -> None:
    sidecar, worker = make()
    first = send(sidecar, "POST", "/v1/effects/publish", {"name": "publish", "owner": "o"})
    assert first == Reply(status=200, body={"do": "call", "idempotencyKey": IDEM,
                                            "fencingToken": ATTEMPT})
    assert "publish.intent" in worker.memory.committed  # intent before the call
    assert worker.owners == ["o"]  # the owner named in the request reaches the ledger
    assert worker.memory.committed["publish.intent"].inline["owner"] == "o"
    again = send(sidecar, "POST", "/v1/effects/publish", {"name": "publish"})
    assert again == first  # the same instruction while it waits for the reply
    done = send(sidecar, "POST", "/v1/effects/publish/reply", {"result": {"url": "u"}})
    assert done == Reply(status=200, body={"do": "done", "result": {"url": "u"}})
    assert worker.memory.committed["publish.outcome"].inline["result"] == {"url": "u"}
    assert send(sidecar, "POST", "/v1/effects/publish", {"name": "publish"}) == done
    assert send(sidecar, "POST", "/v1/effects/publish/reply", {"result": 1}) == done
    clash = send(sidecar, "POST", "/v1/effects/publish", {"name": "other"})
    assert clash.status == 409


def test_a_failed_call_stops_the_attempt_with_the_intent_left_for_a_successor() -> None:
    sidecar, worker = make()
    send(sidecar, "POST", "/v1/effects/publish", {"name": "publish"})
    stop = send(sidecar, "POST", "/v1/effects/publish/reply", {"error": "503 from the owner"})
    assert stop.body["do"] == "stop" and stop.body["error"] == "CallFailed"
    assert set(worker.memory.committed) == {"publish.intent"}


def ambiguous() -> tuple[Sidecar, FakeWorker, Reply]:
    sidecar, worker = make(FakeWorker(earlier={"publish.intent": intent("publish")}))
    first = send(sidecar, "POST", "/v1/effects/publish", {"name": "publish"})
    return sidecar, worker, first


def test_an_ambiguous_effect_is_reconciled_first_applied_is_never_called() -> None:
    sidecar, worker, first = ambiguous()
    assert first.body == {"do": "reconcile", "idempotencyKey": IDEM}
    assert worker.memory.committed == {}  # nothing before the owner's answer
    done = send(sidecar, "POST", "/v1/effects/publish/reply",
                {"answer": "applied", "result": {"url": "u"}})
    assert done.body == {"do": "done", "result": {"url": "u"}}
    outcome = worker.memory.committed["publish.outcome"].inline
    assert outcome == {"answer": "applied", "result": {"url": "u"}, "via": "reconcile"}


def test_not_applied_is_sent_again_with_the_same_key_and_this_attempts_token() -> None:
    sidecar, worker, _ = ambiguous()
    call = send(sidecar, "POST", "/v1/effects/publish/reply", {"answer": "not-applied"})
    assert call.body == {"do": "call", "idempotencyKey": IDEM, "fencingToken": ATTEMPT}
    assert worker.memory.committed["publish.intent"].attempt == ATTEMPT
    done = send(sidecar, "POST", "/v1/effects/publish/reply", {"result": 7})
    assert done.body == {"do": "done", "result": 7}


def test_in_progress_is_asked_again_without_a_call_then_applied() -> None:
    sidecar, _, _ = ambiguous()
    for _ in range(3):
        again = send(sidecar, "POST", "/v1/effects/publish/reply", {"answer": "in-progress"})
        assert again.body == {"do": "reconcile", "idempotencyKey": IDEM}
    done = send(sidecar, "POST", "/v1/effects/publish/reply",
                {"answer": "applied", "result": 1})
    assert done.body == {"do": "done", "result": 1}


def test_unknown_stops_and_is_recorded_unresolved() -> None:
    sidecar, worker, _ = ambiguous()
    stop = send(sidecar, "POST", "/v1/effects/publish/reply", {"answer": "unknown"})
    assert stop.body["do"] == "stop" and stop.body["error"] == "AmbiguousEffect"
    assert "the owner answered unknown" in stop.body["message"]
    assert set(worker.memory.committed) == {"publish.unresolved"}


@pytest.mark.parametrize(("reply", "says"), [
    ({"answer": "maybe"}, '"answer" must be one of'), ({"result": 1}, '"answer" must be'),
    ({"answer": "applied", "result": "x" * 1000}, "at most 1024"),
    ([1], "a reply is a JSON object")])
def test_a_bad_reply_is_400_and_the_instruction_stands(reply: Any, says: str) -> None:
    sidecar, worker, first = ambiguous()
    bad = send(sidecar, "POST", "/v1/effects/publish/reply", reply)
    assert bad.status == 400 and says in bad.body["message"]
    assert send(sidecar, "POST", "/v1/effects/publish", {"name": "publish"}) == first
    assert worker.memory.committed == {}


def test_a_main_container_that_never_replies_gets_a_stop() -> None:
    sidecar, worker = make(reply_timeout=0.05)
    send(sidecar, "POST", "/v1/effects/publish", {"name": "publish"})
    session = sidecar.sessions["publish"]
    with session.cond:
        assert session.cond.wait_for(lambda: session.final is not None, timeout=10)
    stop = send(sidecar, "POST", "/v1/effects/publish", {"name": "publish"})
    assert stop.body["do"] == "stop" and stop.body["error"] == "NoReply"
    assert set(worker.memory.committed) == {"publish.intent"}  # ambiguous for a successor


def test_a_lapsed_lease_is_503_and_the_effect_may_be_asked_again() -> None:
    sidecar, worker = make()
    worker.keeper.state = Standing.LAPSED
    lapsed = send(sidecar, "POST", "/v1/effects/publish", {"name": "publish"})
    assert lapsed.status == 503 and lapsed.body["error"] == "LeaseLapsed"
    assert worker.memory.committed == {} and sidecar.sessions == {}
    worker.keeper.state = Standing.LIVE
    assert send(sidecar, "POST", "/v1/effects/publish", {"name": "publish"}).body["do"] == "call"


# -- the server: bytes on 127.0.0.1 only ------------------------------------------------------


def test_the_server_listens_on_localhost_and_moves_json() -> None:
    import http.client
    import threading

    from agentrun.worker import sidecarserver

    sidecar, worker = make()
    server = sidecarserver.Server(port=0, sidecar=sidecar)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"

        def ask(method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, Any]:
            connection = http.client.HTTPConnection(str(host), int(port), timeout=10)
            connection.request(method, path, body=body, headers=headers or {})
            answer = connection.getresponse()
            data = answer.read()
            connection.close()
            return answer.status, json.loads(data) if data else None

        assert ask("POST", "/v1/check-in") == (204, None)
        assert ask("PUT", "/v1/steps/gather", b'{"n": 1}') == (201, {"result": {"n": 1}})
        status, body = ask("PUT", "/v1/steps/other", b"1",
                           {"Content-Length": str(10**9)})  # never read
        assert status == 400 and "at most 2048" in body["message"]
        status, body = ask("GET", "/v1/steps/nothing")
        assert status == 404 and body["error"] == "NotCommitted"
        assert set(worker.memory.committed) == {"gather"}
        assert sidecarserver.ready(port=int(port)) == 0
        worker.keeper.state = Standing.STARTING
        assert sidecarserver.ready(port=int(port)) == 1
    finally:
        server.shutdown()
        server.server_close()


def test_a_restarted_sidecar_reconciles_its_own_attempts_intent_first() -> None:
    # The old process committed this attempt's intent and died before the reply: the new
    # one has no session, so the old reply is a conflict, and the effect is asked about.
    sidecar, worker = make(FakeWorker(earlier={"publish.intent": intent("publish", ATTEMPT)}))
    stale = send(sidecar, "POST", "/v1/effects/publish/reply", {"result": 1})
    assert stale.status == 409
    first = send(sidecar, "POST", "/v1/effects/publish", {"name": "publish"})
    assert first.body == {"do": "reconcile", "idempotencyKey": IDEM}
    assert worker.memory.committed == {}
