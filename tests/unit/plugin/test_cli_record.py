"""``kubectl agentrun history --record``: one record's bytes, checked, and its exit codes.

An effect's payload (``<key>.payload``) is checked against the journal's digest and
against the approval waiting under its key: bytes that are not what approval is asked for
exit 3 (never approve those); the history API's refusal is exit 1, no such slot or
record exit 2, anything else 3.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest

from agentrun.plugin import cli, client

DATA = b'{"to":"all"}'
DIGEST = hashlib.sha256(DATA).hexdigest()


def served(monkeypatch: pytest.MonkeyPatch, *, journal: dict[str, Any],
           waiting: str | None) -> None:
    conn = client.Connection(rest=None, namespace="team-a")  # type: ignore[arg-type]
    monkeypatch.setattr(client, "connect", lambda **_: conn)
    questions = [] if waiting is None else [
        {"key": "publish", "state": "Pending", "approvers": 1, "digest": waiting}]
    monkeypatch.setattr(client, "get", lambda _c, _p, name: {
        "metadata": {"name": name}, "status": {"questions": questions}})
    monkeypatch.setattr(client, "journal", lambda _c, _s, **_: journal)


RECORD = {"record": {"key": "publish.payload", "attempt": 1, "kind": "step-result",
                     "digest": DIGEST, "data": base64.b64encode(DATA).decode()}}


@pytest.mark.parametrize(("waiting", "code"), [(DIGEST, 0), (None, 0), ("1" * 64, 3)])
def test_a_payload_is_checked_against_the_approval_waiting(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        waiting: str | None, code: int) -> None:
    served(monkeypatch, journal=RECORD, waiting=waiting)
    assert cli.main(["history", "s", "--record", "publish.payload", "-o", "json"]) == code
    shown = json.loads(capsys.readouterr().out)
    assert shown["journalMatches"] and shown["approvalMatches"] is (code == 0)


@pytest.mark.parametrize(("status", "code"), [(403, 1), (404, 2), (410, 2), (503, 3)])
def test_a_refused_or_missing_record_has_its_exit_code(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        status: int, code: int) -> None:
    served(monkeypatch, journal={"error": "the history API answered", "status": status},
           waiting=None)
    assert cli.main(["history", "s", "--record", "publish.payload"]) == code
    assert "the history API answered" in capsys.readouterr().err


def test_a_bad_record_key_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["history", "s", "--record", "Not A Key"])
    assert exited.value.code == 2 and "--record must be a record's key" in (
        capsys.readouterr().err)
