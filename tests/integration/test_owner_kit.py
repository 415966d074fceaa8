"""The effect owner's kit on a real ASGI server (uvicorn on 127.0.0.1), checked by the
real ``agentrun-owner-check`` command (and its ``Checker``, for keys sent across a
restart).

Covers: an ASGI app behind ``EffectMiddleware`` (SQLite store) passes every check of
``agentrun-owner-check`` (exit 0, each check named ``ok``), and the app ran once per
applied key (a re-send answered by the kit, the app not called); after a restart over the
same SQLite file a re-send is answered with the first reply and a stale token refused,
the app never called; the same app without the
middleware fails the protocol's checks by name (exit 1); an unreachable URL is exit 2; a
store kept in SQLite still deduplicates after the service restarts; a request without
``Idempotency-Key`` passes through; malformed effect headers are a 400 naming the field.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agentrun.owner import REPLAYED, EffectMiddleware, Owner, SqliteStore
from agentrun.owner.check import Checker
from tests.support.actors.ownerapp import Publisher, serving
from tests.support.cluster.processes import free_port


def check(url: str) -> subprocess.CompletedProcess[str]:
    """The installed command, as a person runs it."""
    command = Path(sys.executable).parent / "agentrun-owner-check"
    return subprocess.run([str(command), url], capture_output=True, text=True, timeout=120)


def test_an_app_behind_the_middleware_keeps_the_protocol(tmp_path: Path) -> None:
    app = Publisher()
    store = tmp_path / "effects.db"
    with serving(EffectMiddleware(app, owner=Owner(store=SqliteStore(str(store))))) as url:
        done = check(url)
        assert done.returncode == 0, done.stdout + done.stderr
        for name in ("applies", "deduplicates", "answers-applied", "answers-not-applied",
                     "fences", "checks-approval"):
            assert f"ok   {name}" in done.stdout, done.stdout
        assert "6 of 6 checks passed" in done.stdout
        applied = len(app.calls)
        assert applied == 4  # K1, K11, K3 and the approved K5: never a re-send, never stale

        plain = urllib.request.Request(url, data=b"{}", method="POST")
        with urllib.request.urlopen(plain, timeout=30) as reply:  # not an effect: through
            assert reply.status == 201
        own = urllib.request.Request(url, data=b"{}", method="POST",  # a client's own key
                                     headers={"Idempotency-Key": "not-hex"})
        with urllib.request.urlopen(own, timeout=30) as reply:  # not the protocol's: through
            assert reply.status == 201
        bad = urllib.request.Request(url, data=b"{}", method="POST",
                                     headers={"Idempotency-Key": "not-hex",
                                              "Agentrun-Fencing-Token": "1"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(bad, timeout=30)
        answer = json.loads(refused.value.read())
        assert refused.value.code == 400 and "Idempotency-Key must be" in answer["message"]
        assert len(app.calls) == applied + 2
        before = Checker(url=url, nonce="restart")
        sent = before.send(before.effect(1, token=3), before.body(1))
        assert sent.status == 201

    again = Publisher()  # the service restarted over the same SQLite file
    with serving(EffectMiddleware(again, owner=Owner(store=SqliteStore(str(store))))) as url:
        after = Checker(url=url, nonce="restart")
        resent = after.send(after.effect(1, token=3), after.body(1, phrased="otherwise"))
        assert (resent.status, resent.body) == (sent.status, sent.body)
        assert resent.headers[REPLAYED.lower()] == "true"
        stale = after.send(after.effect(2, token=2), after.body(2))
        assert stale.status == 409 and stale.json()["error"] == "StaleFencingToken"
    assert again.calls == []  # what it kept, it kept across the restart


def test_an_app_without_the_kit_fails_the_checks_by_name() -> None:
    app = Publisher()
    with serving(app) as url:
        done = check(url)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ok   applies" in done.stdout
    for name in ("deduplicates", "answers-applied", "fences", "checks-approval"):
        assert f"FAIL {name}" in done.stdout, done.stdout


def test_an_unreachable_owner_is_exit_2() -> None:
    done = check(f"http://127.0.0.1:{free_port()}/effects")
    assert done.returncode == 2 and "unreachable" in done.stderr
