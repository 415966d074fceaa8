"""The plugin's command line without a cluster: flags bounded where parsed, exit codes,
and the one re-send of a command whose stamping could not be proven.

The API calls are replaced by a recorder here (the integration test,
tests/integration/operator/test_plugin.py, runs them against a real API server).
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import pytest

from agentrun import rest
from agentrun.api.slots import CommandKind
from agentrun.plugin import cli, client, requests, terminal


def parse(*argv: str) -> Any:
    return cli.parser().parse_args(list(argv))


def test_kubectl_flags_go_before_or_after_the_command() -> None:
    before = parse("-n", "team-a", "--context", "alice", "--kubeconfig", "/k", "status", "r")
    after = parse("status", "r", "-n", "team-a", "--context", "alice", "--kubeconfig", "/k")
    for args in (before, after):
        assert (args.namespace, args.context, args.kubeconfig) == ("team-a", "alice", "/k")
    assert parse("-o", "json", "history", "s").output == "json"
    assert parse("history", "s").output == "text"


@pytest.mark.parametrize(("argv", "says"), [
    (["reassign", "s", "--reason", "r", "--class", "GPU"], "--class must match"),
    (["reassign", "s", "--reason", "x" * 1025], "--reason is 1025 bytes"),
    (["reassign", "s"], "--reason"),
    (["hold", "s"], "--reason"),
    (["resolve-effect", "s", "--key", "k", "--outcome", "maybe", "--reason", "r"], "maybe"),
    (["resolve-effect", "s", "--key", "K", "--outcome", "applied", "--reason", "r"],
     "--key must match"),
    (["resolve-effect", "s", "--key", "k", "--outcome", "applied", "--reason", "r",
      "--result", "x" * 513], "--result is 513 bytes"),
    (["answer", "s", "--key", "plan", "--value", '"' + "v" * 511 + '"', "--reason", "r"],
     "--value is 513 bytes"),
    (["answer", "s", "--key", "plan", "--value", "yes please", "--reason", "r"],
     "--value must be JSON text"),
    (["answer", "s", "--key", "plan", "--reason", "r"], "--file"),
    (["answer", "s", "--key", "plan", "--file", "/nonexistent/x", "--reason", "r"],
     "cannot read '/nonexistent/x'"),
    (["claim", "s", "--timeout", "0"], "--timeout must be between 1 and 3600"),
    (["claim", "s", "--timeout", "nan"], "--timeout must be between"),
    (["claim", "s", "--timeout", "soon"], "--timeout must be seconds"),
    (["claim", "Not_A_Name"], "the name must match"),
    (["status", "r", "-n", "x" * 254], "the name is 254 characters"),
    (["status"], "RUN"),
    (["fork", "study", "--reason", "r"], "--name"),
    (["fork", "study", "--name", "study-b"], "--reason"),
    (["fork", "study", "--name", "study-b", "--reason", " "], "--reason must match"),
    (["fork", "study", "--name", "Study_B", "--reason", "r"], "the name must match"),
    (["fork", "study", "--name", "b", "--at", "draft", "--reason", "r"], "--at must match"),
    (["fork", "study", "--name", "b", "--at", "draft:out.line", "--reason", "r"],
     "--at must match"),
    (["fork", "study", "--name", "b", "--at", "d:" + "s" * 49, "--reason", "r"],
     "--at must match"),  # a step key is at most 48 characters
    (["fork", "study", "--name", "b", "--at", "n" * 64 + ":s", "--reason", "r"],
     "--at must match"),
    (["frobnicate", "s"], "invalid choice"),
    (["ui", "--port", "65536"], "--port must be a number from 0 to 65535"),
    (["ui", "--port", "-1"], "--port must be a number from 0 to 65535"),
    (["ui", "--port", "\uff18\uff10"], "--port must be a number from 0 to 65535"),  # fullwidth 80
    (["ui", "-n", "Team_A"], "the name must match"),
])
def test_bad_input_exits_2_and_says_why(argv: list[str], says: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(argv)
    assert stopped.value.code == requests.USAGE == 2
    assert says in capsys.readouterr().err


def test_help_has_examples_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["reassign", "--help"]):
        with pytest.raises(SystemExit) as stopped:
            cli.main(argv)
        assert stopped.value.code == 0
        shown = capsys.readouterr().out
        assert "kubectl agentrun reassign" in shown and "--reason" in shown
        assert "exit codes: 0 accepted, 1 rejected" in shown


def test_fields_fill_the_run_from_the_slot_only_for_reassign() -> None:
    args = parse("reassign", "s", "--class", "gpu", "--reason", "oom")
    assert cli.fields(args, run="study") == {"reason": "oom", "worker_class": "gpu",
                                              "run": "study"}
    assert cli.fields(parse("claim", "s"), run="study") == {}
    assert cli.fields(parse("give-up", "s", "--reason", "gone"), run="study") == {
        "reason": "gone"}
    resolve = parse("resolve-effect", "s", "--key", "publish", "--outcome", "not-applied",
                    "--reason", "checked", "--result", '{"id": 1}')
    assert cli.fields(resolve, run="study") == {
        "effect_key": "publish", "outcome": "not-applied", "reason": "checked",
        "result": '{"id": 1}'}


class Recorder:
    """Stands in for the API: the slot, and the ledger entries decided per request id."""

    def __init__(self, decide: list[dict[str, str]]) -> None:
        self.decide = decide
        self.sent: list[requests.Request] = []

    def get(self, conn: object, plural: str, name: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"run": "study"}}

    def send(self, conn: object, slot: str, request: requests.Request) -> dict[str, Any]:
        self.sent.append(request)
        return {}

    def wait_entry(self, conn: object, slot: str, request: requests.Request, *,
                   timeout: float) -> dict[str, Any]:
        return {"requestId": request.request_id, "kind": "Reassign",
                **self.decide[len(self.sent) - 1]}


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(*decide: dict[str, str]) -> Recorder:
        fake = Recorder(list(decide))
        conn = client.Connection(rest=None, namespace="team-a")  # type: ignore[arg-type]
        monkeypatch.setattr(client, "connect", lambda **_: conn)
        for name in ("get", "send", "wait_entry"):
            monkeypatch.setattr(client, name, getattr(fake, name))
        return fake
    return install


REASSIGN = ["reassign", "study-research-1", "--class", "gpu", "--reason", "oom"]


@pytest.mark.parametrize("predicate", ["CommandsRefused", "Unstamped", "StaleEpoch"])
def test_an_unproven_command_is_resent_once_as_the_same_request(
        recorder: Any, predicate: str, capsys: pytest.CaptureFixture[str]) -> None:
    fake = recorder({"outcome": "Rejected", "predicate": predicate, "message": "not yet"},
                    {"outcome": "Accepted", "actor": "alice"})
    assert cli.main([*REASSIGN, "-o", "json"]) == 0
    first, again = fake.sent
    assert again.request_id == requests.resend_id(first.request_id)
    assert again.fields == first.fields == {"reason": "oom", "worker_class": "gpu",
                                            "run": "study"}
    out = capsys.readouterr()
    printed = json.loads(out.out)
    assert printed["entry"]["outcome"] == "Accepted" and printed["exitCode"] == 0
    assert printed["firstAttempt"]["predicate"] == predicate
    assert "re-sending once" in out.err


def test_a_second_unproven_refusal_is_the_answer(recorder: Any,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    refused = {"outcome": "Rejected", "predicate": "CommandsRefused", "message": "binding gone"}
    fake = recorder(refused, refused)
    assert cli.main(REASSIGN) == 1
    assert len(fake.sent) == 2
    assert "Rejected (CommandsRefused): binding gone" in capsys.readouterr().out


def test_a_rejection_is_not_resent_and_exits_1(recorder: Any,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    fake = recorder({"outcome": "Rejected", "predicate": "BlankReason",
                     "message": "a reason is required"})
    assert cli.main(REASSIGN) == 1
    assert len(fake.sent) == 1
    assert fake.sent[0].kind is CommandKind.REASSIGN
    assert "Rejected (BlankReason): a reason is required" in capsys.readouterr().out


def test_a_failure_prints_its_message_and_exit_code(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def unreachable(**_: object) -> client.Connection:
        raise requests.Failure("cannot load the kubeconfig: nope", code=requests.USAGE)
    monkeypatch.setattr(client, "connect", unreachable)
    assert cli.main(["-o", "json", "claim", "s"]) == 2
    out = capsys.readouterr()
    assert json.loads(out.out) == {"error": "cannot load the kubeconfig: nope", "exitCode": 2}
    assert "error: cannot load the kubeconfig" in out.err


def test_a_kubeconfig_that_does_not_exist_is_bad_input(tmp_path: Any) -> None:
    with pytest.raises(requests.Failure) as failed:
        client.connect(kubeconfig=str(tmp_path / "none"), context=None, namespace=None)
    assert failed.value.code == requests.USAGE


def test_the_namespace_defaults_to_the_contexts(tmp_path: Any) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "a",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u",
                                               "namespace": "team-a"}},
                     {"name": "b", "context": {"cluster": "c", "user": "u"}}]}))
    assert client.connect(kubeconfig=str(config), context=None, namespace=None).namespace == (
        "team-a")
    assert client.connect(kubeconfig=str(config), context="b", namespace=None).namespace == (
        "default")
    assert client.connect(kubeconfig=str(config), context="b", namespace="x").namespace == "x"
    with pytest.raises(requests.Failure) as failed:
        client.connect(kubeconfig=str(config), context="missing", namespace=None)
    assert failed.value.code == requests.USAGE


class FakeRest:
    """Answers like the API server's REST layer: queued answers or errors per method."""

    def __init__(self, *, gets: list[Any], patches: list[Any] | None = None) -> None:
        self.gets = gets
        self.patches = patches or []
        self.bodies: list[Any] = []

    @staticmethod
    def _next(queue: list[Any]) -> Any:
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def get(self, path: str, *, query: dict[str, str] | None = None) -> Any:
        return self._next(self.gets)

    def request(self, method: str, path: str, *, body: Any = None, query: Any = None,
                content_type: str = "") -> Any:
        assert (method, content_type) == ("PATCH", "application/merge-patch+json")
        self.bodies.append(body)
        return self._next(self.patches)


def conn(fake: FakeRest) -> client.Connection:
    return client.Connection(rest=fake, namespace="team-a")  # type: ignore[arg-type]


def api_error(status: int, message: str) -> rest.ApiError:
    return rest.ApiError(status, json.dumps({"reason": "x", "message": message}))


SLOT: dict[str, Any] = {"metadata": {"name": "s", "resourceVersion": "7", "annotations": {}},
        "spec": {"run": "study"}, "status": {"commands": []}}
HOLD = requests.Request(kind=CommandKind.HOLD, request_id="r1", fields={"reason": "look"})


def test_a_conflict_rereads_and_patches_with_the_new_version() -> None:
    newer = {**SLOT, "metadata": {**SLOT["metadata"], "resourceVersion": "8"}}
    fake = FakeRest(gets=[SLOT, newer], patches=[api_error(409, "changed"), {}])
    client.send(conn(fake), "s", HOLD)
    assert [b["metadata"]["resourceVersion"] for b in fake.bodies] == ["7", "8"]
    assert fake.bodies[-1]["metadata"]["annotations"] == {
        "agentrun.dev/hold-id": "r1", "agentrun.dev/hold-reason": "look"}


def test_a_slot_that_keeps_changing_is_an_api_error() -> None:
    fake = FakeRest(gets=[SLOT], patches=[api_error(409, "changed")])
    with pytest.raises(requests.Failure, match="kept changing") as failed:
        client.send(conn(fake), "s", HOLD)
    assert failed.value.code == requests.FAILED and len(fake.bodies) == client.CONFLICT_RETRIES


def test_a_command_of_the_same_kind_waiting_is_not_overwritten() -> None:
    waiting = {**SLOT, "metadata": {**SLOT["metadata"],
                                    "annotations": {"agentrun.dev/hold-id": "earlier"}}}
    fake = FakeRest(gets=[waiting])
    with pytest.raises(requests.Failure, match="request id earlier") as failed:
        client.send(conn(fake), "s", HOLD)
    assert failed.value.code == requests.USAGE and fake.bodies == []


@pytest.mark.parametrize(("error", "code", "says"), [
    (api_error(422, "hold-reason is required"), requests.REJECTED, "admission or RBAC"),
    (api_error(403, "forbidden: patch slots"), requests.REJECTED, "forbidden"),
    (api_error(500, "etcd down"), requests.FAILED, "etcd down"),
    (ConnectionRefusedError("refused"), requests.FAILED, "cannot reach the API server"),
])
def test_a_refused_write_is_a_rejection_and_a_failed_one_an_api_error(
        error: Exception, code: int, says: str) -> None:
    fake = FakeRest(gets=[SLOT], patches=[error])
    with pytest.raises(requests.Failure, match=says) as failed:
        client.send(conn(fake), "s", HOLD)
    assert failed.value.code == code


def test_a_missing_slot_is_bad_input() -> None:
    namespace = {"metadata": {"name": "team-a"}}  # there: the slot is what is missing
    with pytest.raises(requests.Failure, match="slots/s not found in namespace 'team-a'") as failed:
        client.get(conn(FakeRest(gets=[None, namespace])), "slots", "s")
    assert failed.value.code == requests.USAGE


def test_waiting_returns_the_entry_once_decided_and_removed_and_times_out_otherwise() -> None:
    ledger = {"commands": [{"requestId": "r1", "outcome": "Accepted"}]}
    decided = {**SLOT, "metadata": {**SLOT["metadata"],
                                    "annotations": {"agentrun.dev/hold-id": "r1"}},
               "status": ledger}
    removed = {**SLOT, "status": ledger}
    fake = FakeRest(gets=[SLOT, decided, removed])
    assert client.wait_entry(conn(fake), "s", HOLD, timeout=5)["outcome"] == "Accepted"
    assert fake.gets == [removed]  # it read until the annotations were gone
    with pytest.raises(requests.Failure, match="no decision on request r1 within 0s") as failed:
        client.wait_entry(conn(FakeRest(gets=[decided])), "s", HOLD, timeout=0)
    assert failed.value.code == requests.FAILED


def test_unreadable_leases_are_skipped() -> None:
    fake = FakeRest(gets=[api_error(403, "no"), {"spec": {}}])
    assert client.leases(conn(fake), {"a-1", "b-1"}) == {"b-1": {"spec": {}}}


HOSTILE = "owned\n`- GiveUp  r9  alice  Accepted\x1b[2J\x9b1;1H\u202eevil"


def one_safe_line(text: str) -> str:
    """The one line ``text`` holds, checked to carry nothing a terminal would obey."""
    [line] = text.splitlines()
    assert not [c for c in line if unicodedata.category(c) in terminal.UNSAFE_CATEGORIES]
    assert "\\x1b[2J" in line and "\\u202eevil" in line
    return line


def test_a_ledger_entry_is_one_escaped_line_and_exact_as_json(
        recorder: Any, capsys: pytest.CaptureFixture[str]) -> None:
    recorder({"outcome": "Rejected", "predicate": "NotOwner", "message": HOSTILE})
    assert cli.main(REASSIGN) == 1
    line = one_safe_line(capsys.readouterr().out)
    assert line.startswith("Reassign ") and "Rejected (NotOwner): owned\\n`- GiveUp" in line
    recorder({"outcome": "Rejected", "predicate": "NotOwner", "message": HOSTILE})
    assert cli.main([*REASSIGN, "-o", "json"]) == 1
    out = capsys.readouterr().out
    assert json.loads(out)["entry"]["message"] == HOSTILE and out.isascii()


def test_the_resend_notice_and_an_error_are_escaped(
        recorder: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    recorder({"outcome": "Rejected", "predicate": "Unstamped", "message": HOSTILE},
             {"outcome": "Accepted", "actor": HOSTILE})
    assert cli.main(REASSIGN) == 0
    out = capsys.readouterr()
    one_safe_line(out.out)
    first, again = out.err.splitlines()
    assert one_safe_line(first) and again.startswith("re-sending once as ")

    def refused(**_: object) -> client.Connection:
        raise requests.Failure(f"reading slots/s failed: {HOSTILE}", code=requests.FAILED)
    monkeypatch.setattr(client, "connect", refused)
    assert cli.main(["history", "s"]) == 3
    assert one_safe_line(capsys.readouterr().err).startswith("error: reading slots/s failed")


def test_a_usage_error_quoting_what_was_typed_is_escaped(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(["history", "s", HOSTILE])
    assert stopped.value.code == requests.USAGE
    error = capsys.readouterr().err.splitlines()[-1]
    assert one_safe_line(error).startswith("kubectl agentrun: error: unrecognized arguments")


def test_status_and_history_print_hostile_objects_one_row_each(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    attempt = {"number": 1, "pod": HOSTILE, "lease": HOSTILE, "outcome": HOSTILE,
               "reason": HOSTILE, "ownerActor": HOSTILE, "workerClass": HOSTILE}
    slot = {"metadata": {"name": HOSTILE}, "spec": {"run": HOSTILE, "node": HOSTILE},
            "status": {"state": HOSTILE, "attempts": [attempt], "conditions": [
                {"type": HOSTILE, "status": "True"}], "commands": [
                {"requestId": HOSTILE, "kind": HOSTILE, "actor": HOSTILE, "reason": HOSTILE,
                 "message": HOSTILE, "outcome": HOSTILE, "time": HOSTILE}]}}
    objects = {"agentruns": {"metadata": {"name": HOSTILE, "namespace": HOSTILE}},
               "slots": slot}
    conn = client.Connection(rest=None, namespace="team-a")  # type: ignore[arg-type]
    monkeypatch.setattr(client, "connect", lambda **_: conn)
    monkeypatch.setattr(client, "get", lambda _c, plural, _n: objects[plural])
    monkeypatch.setattr(client, "slots_of", lambda _c, _r: [slot])
    monkeypatch.setattr(client, "leases", lambda _c, _w: {})
    monkeypatch.setattr(client, "journal", lambda _c, _s, limit: {"error": "no\n\x1b[2J"})
    for command, rows in (("status", 4), ("history", 11)):
        assert cli.main([command, "s"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == rows, lines
        for line in lines:
            assert not [c for c in line if unicodedata.category(c) in
                        terminal.UNSAFE_CATEGORIES]
        assert sum("\\x1b[2J" in line for line in lines) >= 2
