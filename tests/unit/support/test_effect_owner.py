"""The tests' effect owner (tests/support/actors/effectowner.py) over real HTTP on loopback,
with the kit's headers: deduplication by key, fencing by token per scope, the status
answers, a re-send while applying, and what it refuses."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from agentrun.owner import REPLAYED, Effect, ProtocolError
from agentrun.owner.check import CHECKS, Checker
from agentrun.worker import Answer, Reconciled
from tests.integration.node import stale
from tests.support.actors.effectowner import EffectOwner, Request, word_key
from tests.support.waiting import wait_for

K1, K2, K3 = (word_key(f"k{n}") for n in (1, 2, 3))


@pytest.fixture
def owner() -> Iterator[EffectOwner]:
    found = EffectOwner().start()
    yield found
    found.stop()


def send(owner: EffectOwner, headers: dict[str, str], *, body: Any = None,
         method: str = "POST", path: str = "/effects") -> tuple[int, Any, dict[str, str]]:
    """One exchange: status, the reply's JSON and its headers (by lower-case name)."""
    request = urllib.request.Request(
        owner.url + path, method=method, headers=headers,
        data=None if method == "GET" else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return (answer.status, json.loads(answer.read()),
                    {k.lower(): v for k, v in answer.headers.items()})
    except urllib.error.HTTPError as error:
        return (error.code, json.loads(error.read()),
                {k.lower(): v for k, v in error.headers.items()})


def post(owner: EffectOwner, key: str, token: int, fence: str,
         payload: Any = None) -> tuple[int, Any, dict[str, str]]:
    return send(owner, Effect(key=key, token=token, scope=fence).headers(), body=payload)


def ask(owner: EffectOwner, key: str) -> Any:
    status, found, _ = send(owner, Effect(key=key, query=True).headers(), method="GET")
    assert status == 200, (status, found)
    return found


def test_a_key_is_applied_once_and_a_lower_token_is_fenced(owner: EffectOwner) -> None:
    assert ask(owner, K1) == {"answer": "not-applied"}
    status, first, _ = post(owner, K1, 1, "s", "report")
    assert status == 200 and first == {"published": K1[:12], "payload": "report"}
    again = post(owner, K1, 2, "s", "other")
    assert again[:2] == (200, first) and again[2].get(REPLAYED.lower()) == "true"
    assert owner.applied == {K1: 1} and owner.highest == {"s": 2}
    status, fenced, _ = post(owner, K2, 1, "s", "late")
    assert status == 409 and (fenced["error"], fenced["highest"]) == ("StaleFencingToken", 2)
    assert ask(owner, K2) == {"answer": "not-applied"}
    assert post(owner, K2, 1, "another-slot", "x")[0] == 200
    assert ask(owner, K1) == {"answer": "applied", "result": first}
    owner.unknown.add(K3)
    assert ask(owner, K3) == {"answer": "unknown"}
    assert owner.requests == [
        Request(method="GET", key=K1, status=200),
        Request(method="POST", key=K1, token=1, fence="s", status=200),
        Request(method="POST", key=K1, token=2, fence="s", status=200),
        Request(method="POST", key=K2, token=1, fence="s", status=409),
        Request(method="GET", key=K2, status=200),
        Request(method="POST", key=K2, token=1, fence="another-slot", status=200),
        Request(method="GET", key=K1, status=200),
        Request(method="GET", key=K3, status=200)]


def test_a_held_apply_is_in_progress_and_a_resend_is_refused_until_released() -> None:
    hold = threading.Event()
    owner = EffectOwner(hold=hold).start()
    try:
        sent = threading.Thread(target=post, args=(owner, K1, 1, "s", 1))
        sent.start()
        wait_for(lambda: owner.posts(key=K1), timeout=10, message="the first post")
        assert ask(owner, K1) == {"answer": "in-progress"}
        status, busy, headers = post(owner, K1, 1, "s")
        assert (status, busy["error"], headers.get("retry-after")) == (
            409, "EffectInProgress", "1")  # not applied again
        hold.set()
        sent.join(timeout=10)
        assert ask(owner, K1)["answer"] == "applied" and owner.applied == {K1: 1}
        assert [r.status for r in owner.posts()] == [200, 409]
    finally:
        owner.stop()


def test_an_apply_stands_when_its_requester_is_gone() -> None:
    """The apply runs in its own thread: a request that gave up waiting (a worker killed
    mid-call) leaves the key applied once the hold lifts."""
    hold = threading.Event()
    owner = EffectOwner(hold=hold).start()
    try:
        request = urllib.request.Request(owner.url + "/effects", data=b"1", method="POST",
                                         headers=Effect(key=K1, token=1, scope="s").headers())
        with pytest.raises(TimeoutError):
            urllib.request.urlopen(request, timeout=0.2)
        hold.set()
        wait_for(lambda: owner.applied.get(K1) == 1, timeout=10, message="applied")
        assert ask(owner, K1) == {"answer": "applied",
                                  "result": {"published": K1[:12], "payload": 1}}
    finally:
        owner.stop()


@pytest.mark.parametrize(("headers", "path", "status", "error"), [
    ({"Idempotency-Key": "k1", "Agentrun-Fencing-Token": "1", "Agentrun-Fencing-Scope": "s"},
     "/effects", 400, "BadEffectHeaders"),
    ({"Idempotency-Key": K1, "Agentrun-Fencing-Scope": "s"}, "/effects", 400,
     "BadEffectHeaders"),
    ({"Idempotency-Key": K1}, "/effects", 400, "NotAnEffect"),  # a client's own key
    (Effect(key=K1, query=True).headers(), f"/effects/{K1}", 404, "NotFound")])
def test_what_is_not_an_effect_request_is_refused_and_not_logged(
        owner: EffectOwner, headers: dict[str, str], path: str, status: int,
        error: str) -> None:
    found = send(owner, headers, body={}, path=path)
    assert found[:1] == (status,) and found[1]["error"] == error, found
    assert owner.requests == []


def test_a_test_word_needs_a_key_the_kit_takes(owner: EffectOwner) -> None:
    with pytest.raises(ProtocolError, match="64 lower-case hex"):
        owner.effect(key="finish", token=0, fence="test", payload=None)
    assert owner.effect(key=word_key("finish"), token=0, fence="test", payload=None) == (
        200, {"published": word_key("finish")[:12], "payload": None})


def test_it_passes_the_kits_own_check(owner: EffectOwner) -> None:
    """What agentrun-owner-check asks of a service (the approval's digest too: the kit
    checks it): this owner keeps the protocol."""
    checker = Checker(url=owner.url + "/effects")
    assert {name: run(checker) for name, run in CHECKS} == dict.fromkeys(
        (name for name, _ in CHECKS), None)


def test_the_worker_scripts_client_speaks_to_it(owner: EffectOwner,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-pod side, run here: the node tests' prelude (``stale.PRELUDE``, which starts
    with ``effectowner.CLIENT``): its effect's call and reconcile, and a test's word."""
    monkeypatch.setenv("EFFECT_OWNER", owner.url)
    script: dict[str, Any] = {}
    exec(compile(stale.PRELUDE, "prelude", "exec"), script)
    worker = SimpleNamespace(context=SimpleNamespace(run_uid="uid", slot="slot"),
                             keeper=SimpleNamespace(ensure_live=lambda: None))
    assert script["ask"](K1) == Reconciled(answer=Answer.NOT_APPLIED)
    result = {"published": K1[:12], "payload": None}
    assert script["sender"](worker)(K1, 1) == result
    assert script["ask"](K1) == Reconciled(answer=Answer.APPLIED, result=result)
    assert owner.posts() == [Request(method="POST", key=K1, token=1, fence="uid/slot",
                                     status=200)]
    assert script["said"]("go") is False
    stale.release(owner, "go")
    assert script["said"]("go") is True
    script["wait_released"](worker, "go", timeout=0)  # said: it returns at once
