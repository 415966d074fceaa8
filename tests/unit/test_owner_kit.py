"""The effect owner's kit's plain function form, over both stores (SQLite is real).

What is claimed (``agentrun.owner``): a key is applied once and its 2xx reply replayed,
marked; a key being applied is answered 409 EffectInProgress without calling again; a
``do`` that raised or answered non-2xx applied nothing (the key can be sent again); a
token lower than the scope's highest is refused before anything, a status query answers
applied / in-progress / not-applied; a body other than the approved one is 422; a reply
too large to keep is kept without its body; the protocol's fields are read from headers
(any case) or MCP metadata, each malformed one refused by name.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import pytest

from agentrun.owner import (
    REPLAYED,
    Effect,
    MemoryStore,
    Owner,
    ProtocolError,
    Reply,
    SqliteStore,
)
from agentrun.owner import _owner as owner_module
from agentrun.owner._protocol import canonical

KEY = "a" * 64


def effect(token: int = 1, *, key: str = KEY, digest: str | None = None) -> Effect:
    return Effect(key=key, token=token, scope="uid/slot", digest=digest)


@pytest.fixture(params=["memory", "sqlite"])
def owner(request: pytest.FixtureRequest, tmp_path: Path) -> Owner:
    store = MemoryStore() if request.param == "memory" else SqliteStore(str(tmp_path / "e.db"))
    return Owner(store=store)


def answer(owner: Owner, key: str = KEY) -> object:
    return json.loads(owner.status(Effect(key=key, query=True)).body)["answer"]


def test_a_key_is_applied_once_and_its_reply_replayed(owner: Owner) -> None:
    calls: list[int] = []

    def do() -> Reply:
        calls.append(1)
        return Reply.json(201, {"n": len(calls)})

    first = owner.apply(effect(), body=b"{}", do=do)
    again = owner.apply(effect(), body=b'{"other": 1}', do=do)
    assert calls == [1] and (again.status, again.body) == (first.status, first.body)
    assert (REPLAYED, "true") in again.headers and first.headers == ()
    status = json.loads(owner.status(Effect(key=KEY, query=True)).body)
    assert status == {"answer": "applied", "result": {"n": 1}}


def test_a_key_being_applied_is_in_progress_and_not_called_again(owner: Owner) -> None:
    inside, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def slow() -> Reply:
        calls.append(1)
        inside.set()
        assert release.wait(timeout=30)
        return Reply.json(200, {})

    first = threading.Thread(target=owner.apply, args=(effect(),),
                             kwargs={"body": b"{}", "do": slow})
    first.start()
    assert inside.wait(timeout=30)
    busy = owner.apply(effect(), body=b"{}", do=slow)
    assert busy.status == 409 and json.loads(busy.body)["error"] == "EffectInProgress"
    assert answer(owner) == "in-progress"
    release.set()
    first.join(timeout=30)
    assert calls == [1] and answer(owner) == "applied"


def crashed() -> Reply:
    raise RuntimeError("crashed")


def test_a_failed_apply_applied_nothing(owner: Owner) -> None:
    later = owner.apply(effect(), body=b"{}", do=lambda: Reply.json(503, {"error": "later"}))
    assert later.status == 503 and answer(owner) == "not-applied"
    with pytest.raises(RuntimeError, match="crashed"):
        owner.apply(effect(), body=b"{}", do=crashed)
    assert answer(owner) == "not-applied"
    assert owner.apply(effect(), body=b"{}", do=lambda: Reply.json(200, {})).status == 200
    assert answer(owner) == "applied"


def test_a_stale_token_is_refused_before_anything(owner: Owner) -> None:
    assert owner.apply(effect(2, key="b" * 64), body=b"{}",
                       do=lambda: Reply.json(200, {})).status == 200
    stale = owner.apply(effect(1), body=b"{}", do=lambda: pytest.fail("fenced"))
    assert stale.status == 409 and json.loads(stale.body)["highest"] == 2
    assert answer(owner) == "not-applied"
    other = Effect(key=KEY, token=1, scope="uid/other")  # another slot's tokens are its own
    assert owner.apply(other, body=b"{}", do=lambda: Reply.json(200, {})).status == 200


def test_a_body_other_than_the_approved_one_is_refused(owner: Owner) -> None:
    approved = hashlib.sha256(canonical({"to": "all"})).hexdigest()
    refused = owner.apply(effect(digest=approved), body=b'{"to": "some"}',
                          do=lambda: pytest.fail("not approved"))
    assert refused.status == 422 and answer(owner) == "not-applied"
    assert owner.apply(effect(digest=approved), body=b'{ "to" : "all" }',
                       do=lambda: Reply.json(200, {})).status == 200  # canonical: same


def test_a_reply_too_large_to_keep_is_kept_without_its_body(
        owner: Owner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(owner_module, "KEPT_BODY_BYTES", 10)
    first = owner.apply(effect(), body=b"{}", do=lambda: Reply.json(200, {"big": "x" * 20}))
    again = owner.apply(effect(), body=b"{}", do=lambda: pytest.fail("applied"))
    assert len(first.body) > 10 and again.status == 200 and b"omitted" in again.body


def test_the_fields_come_from_headers_in_any_case_or_mcp_metadata() -> None:
    headers = {"idempotency-key": KEY, "AGENTRUN-FENCING-TOKEN": "3",
               "Agentrun-Fencing-Scope": "uid/s", "Agentrun-Approval-Digest": "sha256:" + KEY}
    found = Effect.from_fields(headers)
    assert found == Effect(key=KEY, token=3, scope="uid/s", digest=KEY)
    assert Effect.from_fields(found.headers()) == found  # type: ignore[union-attr]
    meta = {"dev.agentrun/idempotency-key": KEY, "dev.agentrun/fencing-token": 3,
            "dev.agentrun/fencing-scope": "uid/s"}
    assert Effect.from_mcp(meta) == Effect(key=KEY, token=3, scope="uid/s")
    assert Effect.from_fields({"Content-Type": "x"}) is None  # not an effect request
    assert Effect.from_fields({"Idempotency-Key": "a client's own"}) is None  # nor this
    with pytest.raises(ProtocolError, match="given twice"):
        Effect.from_headers([*found.headers().items(),  # type: ignore[union-attr]
                             ("idempotency-key", "b" * 64)])
    assert Effect.from_fields({"Idempotency-Key": KEY, "Agentrun-Query": "status"}) == Effect(
        key=KEY, query=True)


@pytest.mark.parametrize(("fields", "message"), [
    ({"Idempotency-Key": "A" * 64, "Agentrun-Fencing-Token": "1"}, "64 lower-case hex"),
    ({"Agentrun-Fencing-Token": "1"}, "needs Idempotency-Key"),
    ({"Idempotency-Key": KEY, "Agentrun-Fencing-Token": "\u00b2",
      "Agentrun-Fencing-Scope": "s"}, "Token must be a whole"),
    ({"Idempotency-Key": KEY, "Agentrun-Query": "all"}, "must be 'status'"),
    ({"Idempotency-Key": KEY, "Agentrun-Fencing-Scope": "s"}, "Token must be a whole"),
    ({"Idempotency-Key": KEY, "Agentrun-Fencing-Token": "-1",
      "Agentrun-Fencing-Scope": "s"}, "Token must be a whole"),
    ({"Idempotency-Key": KEY, "Agentrun-Fencing-Token": str(2**53),
      "Agentrun-Fencing-Scope": "s"}, "Token must be a whole"),
    ({"Idempotency-Key": KEY, "Agentrun-Fencing-Token": "1"}, "Scope must be 1 to 256"),
    ({"Idempotency-Key": KEY, "Agentrun-Fencing-Token": "1",
      "Agentrun-Fencing-Scope": "s" * 257}, "Scope must be 1 to 256"),
    ({"Idempotency-Key": KEY, "Agentrun-Fencing-Token": "1", "Agentrun-Fencing-Scope": "s",
      "Agentrun-Approval-Digest": "md5:x"}, "sha256:<64"),
])
def test_a_malformed_field_is_refused_by_name(fields: dict[str, str], message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        Effect.from_fields(fields)


def test_a_key_begun_by_a_service_that_restarted_is_unknown_never_applied_again(
        tmp_path: Path) -> None:
    path = str(tmp_path / "e.db")
    before = Owner(store=SqliteStore(path))
    assert before.begin(effect(), body=b"{}") is None  # then the service died mid-apply
    after = Owner(store=SqliteStore(path))
    assert answer(after) == "unknown"
    refused = after.apply(effect(), body=b"{}", do=lambda: pytest.fail("maybe applied"))
    assert refused.status == 409 and json.loads(refused.body)["error"] == "EffectOutcomeUnknown"


def test_a_failed_begin_commits_nothing(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "e.db"))
    store.db.execute("CREATE TRIGGER no BEFORE INSERT ON effects BEGIN "
                     "SELECT RAISE(ABORT, 'refused'); END")
    with pytest.raises(Exception, match="refused"):
        store.begin(key=KEY, scope="other", token=7)
    assert store.db.execute("SELECT * FROM fences").fetchall() == []


def test_a_replay_carries_the_first_replys_headers(owner: Owner) -> None:
    owner.apply(effect(), body=b"{}", do=lambda: Reply(status=201, body=b"{}",
                                                       headers=(("location", "/r/1"),)))
    again = owner.apply(effect(), body=b"{}", do=lambda: pytest.fail("applied"))
    assert again.headers == (("location", "/r/1"), (REPLAYED, "true"))
