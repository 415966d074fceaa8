"""``kubectl_complete-agentrun`` without a cluster: cobra's ``__complete`` answer (the
candidates one a line, ``candidate<TAB>description``, then ``:<directive>``) for the words
kubectl passes (the plugin's words, the last being completed, empty for a new word).

Subcommands and flags come from the plugin's parser (the registry's commands included);
run and slot names from one LIST with the person's kubeconfig, in the namespace typed so
far; any error there gives the directive alone, and nothing on stderr."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentrun import rest
from agentrun.core.commands import registry
from agentrun.plugin import client, completion, requests

NO_FILES = ":4"


def answer(capsys: pytest.CaptureFixture[str], *words: str) -> list[str]:
    assert completion.main(list(words)) == 0
    out = capsys.readouterr()
    assert out.err == ""  # kubectl passes stderr to the terminal, mid-line
    return out.out.splitlines()


def test_subcommands_are_every_command_with_a_description(
        capsys: pytest.CaptureFixture[str]) -> None:
    *candidates, directive = answer(capsys, "")
    assert directive == NO_FILES
    words = [line.split("\t")[0] for line in candidates]
    assert set(words) == {"list", "status", "history", "fork", "budget", "ui",
                          *(spec.word for spec in registry.COMMANDS)}
    assert all("\t" in line and "\n" not in line for line in candidates)
    found = [line.split("\t")[0] for line in answer(capsys, "re")[:-1]]
    assert sorted(found) == ["reassign", "release", "rerun", "resolve-effect"]


def test_flags_of_the_command_and_their_choices(capsys: pytest.CaptureFixture[str]) -> None:
    flags = [line.split("\t")[0] for line in answer(capsys, "list", "--")[:-1]]
    assert {"--all-namespaces", "--selector", "--watch", "--timeout", "--output",
            "--namespace", "--context", "--kubeconfig", "--help"} == set(flags)
    assert "--version" in [line.split("\t")[0] for line in answer(capsys, "--v")[:-1]]
    assert answer(capsys, "status", "study", "-o", "") == [
        "text", "wide", "json", "yaml", NO_FILES]
    assert answer(capsys, "-n", "team-a", "status", "--output=y") == ["--output=yaml", NO_FILES]
    assert answer(capsys, "resolve-effect", "s", "--outcome", "not") == [
        "not-applied", NO_FILES]
    assert answer(capsys, "answer", "s", "--file", "") == [":0"]  # a file name fits
    assert answer(capsys, "--kubeconfig", "") == [":0"]
    assert answer(capsys, "reassign", "s", "--reason", "") == [NO_FILES]


class Names:
    """One LIST's answer (or error), and what was asked."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[tuple[str, Any]] = []

    def request(self, method: str, path: str, *, query: Any = None, **_: Any) -> Any:
        self.asked.append((path, query))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(answer: Any) -> tuple[Names, list[dict[str, Any]]]:
        fake = Names(answer)
        connected: list[dict[str, Any]] = []

        def connect(**kwargs: Any) -> client.Connection:
            connected.append(kwargs)
            if isinstance(answer, requests.Failure):
                raise answer
            return client.Connection(rest=fake,  # type: ignore[arg-type]
                                     namespace=kwargs["namespace"] or "default")
        monkeypatch.setattr(client, "connect", connect)
        return fake, connected
    return install


def names(*found: str) -> dict[str, Any]:
    return {"items": [{"metadata": {"name": name}} for name in found]}


def test_a_run_or_slot_argument_completes_to_names_in_the_namespace_typed(
        api: Any, capsys: pytest.CaptureFixture[str]) -> None:
    fake, connected = api(names("study", "study-b", "other", "Bad\x1b[2J", "x\ny"))
    assert answer(capsys, "-n", "team-a", "--context", "alice", "status", "stu") == [
        "study", "study-b", NO_FILES]
    assert fake.asked == [("/apis/agentrun.dev/v1alpha1/namespaces/team-a/agentruns",
                           {"limit": "500"})]
    assert connected[0]["context"] == "alice" and connected[0]["timeout"] == completion.TIMEOUT
    assert answer(capsys, "claim", "--namespace=team-b", "") == [
        "other", "study", "study-b", NO_FILES]  # never a name that is not one
    assert fake.asked[-1][0] == "/apis/agentrun.dev/v1alpha1/namespaces/team-b/slots"
    assert answer(capsys, "status", "study", "") == [NO_FILES]  # the run is given
    assert answer(capsys, "list", "") == [NO_FILES]  # list takes no name
    assert answer(capsys, "claim", "-n", "") == ["other", "study", "study-b", NO_FILES]
    assert fake.asked[-1][0] == "/api/v1/namespaces"


@pytest.mark.parametrize("error", [
    requests.Failure("no kubeconfig: set KUBECONFIG", code=3),
    rest.ApiError(403, json.dumps({"message": "forbidden"})),
    ConnectionRefusedError("refused"),
])
def test_any_error_gives_no_names_only_the_directive(
        error: Exception, api: Any, capsys: pytest.CaptureFixture[str]) -> None:
    api(error)
    assert answer(capsys, "history", "") == [NO_FILES]
    assert answer(capsys, "-n", "Bad_Namespace", "status", "") == [NO_FILES]


def test_contexts_come_from_the_kubeconfig(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config"
    config.write_text(json.dumps({"contexts": [{"name": "alice", "context": {}},
                                               {"name": "bob", "context": {}}]}))
    monkeypatch.setenv("KUBECONFIG", str(config))
    assert answer(capsys, "--context", "") == ["alice", "bob", NO_FILES]
    assert answer(capsys, "--kubeconfig", str(tmp_path / "none"), "--context", "") == [
        NO_FILES]


def test_a_context_name_that_would_forge_a_candidate_is_left_out(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config"
    config.write_text(json.dumps({"contexts": [{"name": "a\tfake", "context": {}},
                                               {"name": "b\n:0", "context": {}},
                                               {"name": "c" * 254, "context": {}},
                                               {"name": "ok", "context": {}}]}))
    monkeypatch.setenv("KUBECONFIG", str(config))
    assert answer(capsys, "--context", "") == ["ok", NO_FILES]
