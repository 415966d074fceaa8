"""The tests' effect owner (tests/support/actors/effectowner.py) over real HTTP on loopback:
deduplication by key, fencing by token per fence, and the reconcile answers."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.actors.effectowner import EffectOwner
from tests.support.waiting import wait_for


@pytest.fixture
def owner() -> Iterator[EffectOwner]:
    found = EffectOwner().start()
    yield found
    found.stop()


def post(owner: EffectOwner, **body: Any) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"{owner.url}/effects", data=json.dumps(body).encode(),
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def ask(owner: EffectOwner, key: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{owner.url}/effects/{key}", timeout=10) as answer:
        found: dict[str, Any] = json.loads(answer.read())
        return found


def test_a_key_is_applied_once_and_a_lower_token_is_fenced(owner: EffectOwner) -> None:
    assert ask(owner, "k1") == {"answer": "not-applied"}
    status, first = post(owner, key="k1", token=1, fence="s", payload="report")
    assert status == 200 and first["result"]["payload"] == "report"
    assert post(owner, key="k1", token=2, fence="s", payload="other")[1]["duplicate"] is True
    assert owner.applied == {"k1": 1}
    status, fenced = post(owner, key="k2", token=1, fence="s", payload="late")
    assert (status, fenced) == (409, {"error": "fenced", "highest": 2})
    assert post(owner, key="k2", token=1, fence="another-slot", payload="x")[0] == 200
    assert ask(owner, "k1") == {"answer": "applied", "result": first["result"]}
    owner.unknown.add("k3")
    assert ask(owner, "k3") == {"answer": "unknown"}


def test_a_held_apply_is_in_progress_until_released() -> None:
    hold = threading.Event()
    owner = EffectOwner(hold=hold).start()
    try:
        sent = threading.Thread(target=post, args=(owner,),
                                kwargs={"key": "k", "token": 1, "fence": "s", "payload": 1})
        sent.start()
        wait_for(lambda: owner.posts(key="k"), timeout=10, message="the first post")
        assert ask(owner, "k") == {"answer": "in-progress"}
        assert post(owner, key="k", token=1, fence="s")[0] == 202  # not applied again
        hold.set()
        sent.join(timeout=10)
        assert ask(owner, "k")["answer"] == "applied" and owner.applied == {"k": 1}
    finally:
        owner.stop()
