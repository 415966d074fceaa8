"""The sidecar's effect protocol over the fake worker (tests/unit/worker/sidecarfakes.py), the
ledger real: call → done; a call reply with an error → stop; an intent without outcome →
reconcile first (no call before it) → applied (done, never called) / not-applied (call
with the same key and this attempt's token) / in-progress then applied / unknown → stop
AmbiguousEffect; a repeated request returns the kept answer (never a second call); a main
container that never replies ends with a stop (NoReply); replies that do not fit are 400
and the instruction stands; a lapsed lease is 503 and the effect may be asked again.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentrun.worker._renewals import Standing
from agentrun.worker._sidecar import Sidecar
from agentrun.worker._sidecarsessions import Reply

from .sidecarfakes import ATTEMPT, IDEM, FakeWorker, intent, make, send


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
    # Asked again in this attempt: the kept stop, never a second call instruction.
    assert send(sidecar, "POST", "/v1/effects/publish", {"name": "publish"}) == stop
    # The sidecar forgets a session only after a lapse before its call; forgotten by hand
    # here, a new session's ledger finds the intent in this attempt's own view and asks
    # first, as a successor would.
    sidecar.sessions.clear()
    again = send(sidecar, "POST", "/v1/effects/publish", {"name": "publish"})
    assert again.body == {"do": "reconcile", "idempotencyKey": IDEM}


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
