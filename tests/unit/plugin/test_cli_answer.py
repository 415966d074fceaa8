"""The answer command's flags in the plugin, without a cluster: the digest filled in from
the slot read (the latest Pending question under the key) unless given, and ``--file``
read no further than its bound, trailing blanks dropped, checked as the operator will
(JSON, size, depth), exclusive with ``--value``."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from agentrun.api import bounds
from agentrun.plugin import cli, client, requests


def parse(*argv: str) -> Any:
    return cli.parser().parse_args(list(argv))


def test_an_answers_digest_is_the_question_the_plugin_read() -> None:
    slot = {"status": {"questions": [
        {"key": "plan", "state": "Answered", "digest": "a" * 64},
        {"key": "plan", "state": "Pending", "digest": "b" * 64},
        {"key": "other", "state": "Pending", "digest": "c" * 64}]}}
    args = parse("answer", "s", "--key", "plan", "--value", "1", "--reason", "ok")
    assert cli.fields(args, run="study", slot=slot)["digest"] == "b" * 64
    given = parse("answer", "s", "--key", "plan", "--value", "1", "--reason", "ok",
                  "--digest", "d" * 64)
    assert cli.fields(given, run="study", slot=slot)["digest"] == "d" * 64
    assert "digest" not in cli.fields(args, run="study", slot={"status": {}})


def test_an_answer_is_read_from_a_file_within_its_bound(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    given = tmp_path / "answer.json"
    given.write_text('{"publish": true, "note": "é"}\n')
    args = parse("answer", "s", "--key", "plan", "--file", str(given), "--reason", "ok")
    assert cli.fields(args, run="study") == {
        "question_key": "plan", "value": '{"publish": true, "note": "é"}', "reason": "ok",
        "run": "study"}
    big = bounds.ANSWER_FILE_BYTES  # past --value's 512 bytes, a file travels by reference
    for text, says in (('"' + "v" * big + '"', f"--file is {big + 2} bytes long"),
                       ('"' + "v" * (big + 5000) + '"', f"holds more than {big + 4096} bytes"),
                       ("[" * 20 + "]" * 20, "--file nests deeper than 16"),
                       ("[NaN]", "--file: a record's payload must be plain JSON"),
                       ("not json", "--file must be JSON text")):
        given.write_text(text)
        with pytest.raises(SystemExit) as stopped:
            cli.main(["answer", "s", "--key", "plan", "--file", str(given), "--reason", "r"])
        assert stopped.value.code == requests.USAGE
        assert says in capsys.readouterr().err
    given.write_text('"' + "v" * (big - 2) + '"\n\n')  # at its bound, trailing newlines
    args = parse("answer", "s", "--key", "plan", "--file", str(given), "--reason", "ok")
    assert len(cli.fields(args, run="study")["value"]) == big
    given.write_text("1")
    with pytest.raises(SystemExit):
        cli.main(["answer", "s", "--key", "plan", "--value", "1", "--file", str(given),
                  "--reason", "r"])
    assert "not allowed with argument" in capsys.readouterr().err
    given.write_bytes(b"\xff\xfe")
    with pytest.raises(SystemExit):
        cli.main(["answer", "s", "--key", "plan", "--file", str(given), "--reason", "r"])
    assert "is not UTF-8 text" in capsys.readouterr().err


@pytest.mark.parametrize("outcome", ["Accepted", "Rejected"])
def test_an_answer_past_its_field_is_sent_by_reference(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        outcome: str) -> None:
    """Written to a ConfigMap first, then the command names it with the value's sha256; a
    rejected command's ConfigMap is deleted (nothing names it)."""
    value = json.dumps({"publish": True, "note": "n" * 3000})
    given = tmp_path / "answer.json"
    given.write_text(value)
    conn = client.Connection(rest=None, namespace="team-a")  # type: ignore[arg-type]
    log: list[tuple[str, Any]] = []
    monkeypatch.setattr(client, "connect", lambda **_: conn)
    monkeypatch.setattr(client, "get", lambda _c, _p, name: {
        "metadata": {"name": name}, "spec": {"run": "study"}, "status": {}})
    monkeypatch.setattr(client, "put_value", lambda _c, *, name, value: (
        log.append(("put", (name, value))) or name))
    monkeypatch.setattr(client, "send", lambda _c, _s, request: log.append(
        ("send", request)) or {})
    monkeypatch.setattr(client, "wait_entry", lambda _c, _s, request, **_: {
        "requestId": request.request_id, "kind": "Answer", "outcome": outcome})
    monkeypatch.setattr(client, "delete_values", lambda _c, names: log.append(
        ("delete", list(names))))
    code = cli.main(["answer", "s", "--key", "plan", "--file", str(given), "--reason", "ok"])
    assert code == (0 if outcome == "Accepted" else 1)
    assert [kind for kind, _ in log] == ["put", "send"] + (
        [] if outcome == "Accepted" else ["delete"])
    (name, stored), request = log[0][1], log[1][1]
    assert stored == value and name == f"agentrun-answer-{request.request_id}"
    assert "value" not in request.fields
    assert request.fields["value_from"] == (
        f"{name}/value@sha256:{hashlib.sha256(value.encode()).hexdigest()}")
    assert "sent by reference" in capsys.readouterr().err


def test_no_configmap_is_written_while_an_answer_waits_on_the_slot(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    given = tmp_path / "answer.json"
    given.write_text(json.dumps({"note": "n" * 3000}))
    conn = client.Connection(rest=None, namespace="team-a")  # type: ignore[arg-type]
    monkeypatch.setattr(client, "connect", lambda **_: conn)
    monkeypatch.setattr(client, "get", lambda _c, _p, name: {
        "metadata": {"name": name, "annotations": {"agentrun.dev/answer-id": "other"}},
        "spec": {"run": "study"}, "status": {}})
    written: list[str] = []
    monkeypatch.setattr(client, "put_value", lambda _c, *, name, value: written.append(name))
    assert cli.main(["answer", "s", "--key", "plan", "--file", str(given),
                     "--reason", "ok"]) == requests.USAGE
    assert written == []
