"""The answer command's flags in the plugin, without a cluster: the digest filled in from
the slot read (the latest Pending question under the key) unless given, and ``--file``
read no further than its bound, trailing blanks dropped, checked as the operator will
(JSON, size, depth), exclusive with ``--value``."""

from __future__ import annotations

from typing import Any

import pytest

from agentrun.plugin import cli, requests


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
    for text, says in (('"' + "v" * 600 + '"', "--file is 602 bytes long"),
                       ('"' + "v" * 5000 + '"', "holds more than 4608 bytes"),
                       ("[" * 20 + "]" * 20, "--file nests deeper than 16"),
                       ("[NaN]", "--file: a record's payload must be plain JSON"),
                       ("not json", "--file must be JSON text")):
        given.write_text(text)
        with pytest.raises(SystemExit) as stopped:
            cli.main(["answer", "s", "--key", "plan", "--file", str(given), "--reason", "r"])
        assert stopped.value.code == requests.USAGE
        assert says in capsys.readouterr().err
    given.write_text('"' + "v" * 510 + '"\n\n')  # at its bound, with trailing newlines
    args = parse("answer", "s", "--key", "plan", "--file", str(given), "--reason", "ok")
    assert len(cli.fields(args, run="study")["value"]) == 512
    given.write_text("1")
    with pytest.raises(SystemExit):
        cli.main(["answer", "s", "--key", "plan", "--value", "1", "--file", str(given),
                  "--reason", "r"])
    assert "not allowed with argument" in capsys.readouterr().err
    given.write_bytes(b"\xff\xfe")
    with pytest.raises(SystemExit):
        cli.main(["answer", "s", "--key", "plan", "--file", str(given), "--reason", "r"])
    assert "is not UTF-8 text" in capsys.readouterr().err
