"""``kubectl agentrun list`` and ``-o text|wide|json|yaml`` without a cluster: the rows
and their columns (kubectl get's), ``-A`` and ``-l`` as the LIST asks for them, pages,
the bounds of what is typed, and every format exact (JSON, YAML) or escaped (text)."""

from __future__ import annotations

import json
import unicodedata
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from agentrun import rest
from agentrun.plugin import cli, client, lists, requests, terminal

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HOSTILE = "x\n`- forged  Succeeded\x1b[2J\u202eevil"


def run(name: str, *, namespace: str = "team-a", age: timedelta = timedelta(minutes=5),
        **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace,
                         "creationTimestamp": (NOW - age).isoformat().replace("+00:00", "Z"),
                         "labels": {"agentrun.dev/tenant": "acme"}},
            "spec": {"workflow": {"name": "study"}, "claimPolicy": "Manual"},
            "status": status}


PINNED = {"type": "Pinned", "status": "True"}


def test_a_row_has_kubectl_gets_columns_and_wide_ones() -> None:
    done = run("study", done="2/3", creator="alice", conditions=[PINNED],
               fork={"run": "first"})
    assert lists.row(done, now=NOW) == {
        "namespace": "team-a", "name": "study", "state": "Running", "slots": "2/3",
        "age": "5m", "tenant": "acme", "workflow": "study", "claimPolicy": "Manual",
        "creator": "alice", "forkedFrom": "first", "conditions": "Pinned"}
    counted = lists.row(run("b", slots={"total": 4, "succeeded": 1}), now=NOW)
    assert (counted["slots"], counted["state"]) == ("1/4", "Pending")
    bare = lists.row({"metadata": {"name": "c"}, "spec": "?", "status": []}, now=NOW)
    assert (bare["slots"], bare["tenant"], bare["age"], bare["claimPolicy"]) == (
        "-", "-", "-", "Automatic")
    assert [title for title, _ in lists.columns(all_namespaces=False, wide=False)] == [
        "NAME", "STATE", "SLOTS", "AGE", "TENANT"]
    assert [title for title, _ in lists.columns(all_namespaces=True, wide=True)] == [
        "NAMESPACE", "NAME", "STATE", "SLOTS", "AGE", "TENANT", "WORKFLOW", "CLAIM",
        "CREATOR", "FORKED-FROM", "CONDITIONS"]


class Pages:
    """The API server's LIST: the pages it answers, and each query it was asked."""

    def __init__(self, *pages: Any) -> None:
        self.pages = list(pages)
        self.asked: list[tuple[str, dict[str, str]]] = []

    def request(self, method: str, path: str, *, query: dict[str, str] | None = None,
                **_: Any) -> Any:
        assert method == "GET"
        self.asked.append((path, dict(query or {})))
        answer = self.pages.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def get(self, path: str, *, query: Any = None) -> Any:
        assert path == "/api/v1/namespaces/team-a"
        answer = self.pages.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(*pages: Any) -> Pages:
        fake = Pages(*pages)
        conn = client.Connection(rest=fake, namespace="team-a")  # type: ignore[arg-type]
        monkeypatch.setattr(client, "connect", lambda **_: conn)
        return fake
    return install


def page(*items: Any, more: str | None = None) -> dict[str, Any]:
    return {"items": list(items), "metadata": {"resourceVersion": "41",
                                               **({"continue": more} if more else {})}}


def test_list_reads_every_page_with_the_selector_and_prints_a_table(
        api: Any, capsys: pytest.CaptureFixture[str]) -> None:
    fake = api(page(run("zeta", done="1/1"), more="t1"), page(run("alpha")))
    assert cli.main(["list", "-l", "team=a,tier!=test"]) == 0
    path = "/apis/agentrun.dev/v1alpha1/namespaces/team-a/agentruns"
    assert fake.asked == [
        (path, {"labelSelector": "team=a,tier!=test", "limit": "500"}),
        (path, {"labelSelector": "team=a,tier!=test", "limit": "500", "continue": "t1"})]
    header, first, second = capsys.readouterr().out.splitlines()
    assert header.split() == ["NAME", "STATE", "SLOTS", "AGE", "TENANT"]
    assert first.split()[:3] == ["alpha", "Pending", "-"]  # sorted by name
    assert second.split()[:3] == ["zeta", "Pending", "1/1"]
    assert first.index("Pending") == header.index("STATE")  # aligned under its title


def test_list_all_namespaces_and_wide(api: Any, capsys: pytest.CaptureFixture[str]) -> None:
    fake = api(page(run("b", namespace="team-b"), run("a", namespace="team-a")))
    assert cli.main(["list", "-A", "-o", "wide"]) == 0
    assert fake.asked == [("/apis/agentrun.dev/v1alpha1/agentruns", {"limit": "500"})]
    header, first, _ = capsys.readouterr().out.splitlines()
    assert header.split()[:2] == ["NAMESPACE", "NAME"] and header.split()[-1] == "CONDITIONS"
    assert first.split()[:2] == ["team-a", "a"] and "Manual" in first


def test_no_runs_is_said_and_an_unknown_namespace_is_bad_input(
        api: Any, capsys: pytest.CaptureFixture[str]) -> None:
    api(page(), {"metadata": {"name": "team-a"}})
    assert cli.main(["list"]) == 0
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", "No runs found in namespace team-a.\n")
    api(page(), None)  # the namespace: 404
    assert cli.main(["list"]) == 2
    assert "namespace 'team-a' does not exist" in capsys.readouterr().err
    api(page())
    assert cli.main(["list", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"namespace": "team-a", "runs": []}


def test_a_selector_the_api_server_refuses_is_bad_input(
        api: Any, capsys: pytest.CaptureFixture[str]) -> None:
    api(rest.ApiError(400, json.dumps({"message": "unable to parse requirement"})))
    assert cli.main(["list", "-l", "a=(b"]) == 2
    assert "refused the list: unable to parse requirement" in capsys.readouterr().err
    api(rest.ApiError(500, json.dumps({"message": "etcd down"})))
    assert cli.main(["list"]) == 3


@pytest.mark.parametrize(("argv", "says"), [
    (["list", "-l", "x" * 1025], "--selector is 1025 characters long; at most 1024"),
    (["list", "-l", "a=\x1b[2J"], "--selector must match"),
    (["list", "-l", "  "], "--selector must match"),
    (["list", "-w", "--timeout", "0"], "--timeout must be between 1 and 604800"),
    (["status", "s", "-w", "--timeout", "soon"], "--timeout must be seconds"),
    (["list", "-o", "table"], "invalid choice"),
    (["list", "--context", "x" * 1025], "--context is 1025 characters long"),
    (["list", "--kubeconfig", "x" * 4097], "--kubeconfig is 4097 characters long"),
])
def test_list_flags_are_bounded(argv: list[str], says: str,
                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(argv)
    assert stopped.value.code == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("form", ["json", "yaml"])
def test_json_and_yaml_are_exact_ascii_and_one_value_a_line(
        form: str, api: Any, capsys: pytest.CaptureFixture[str]) -> None:
    hostile = run("study", creator=HOSTILE, conditions=[{"type": HOSTILE, "status": "True"}])
    api(page(hostile))
    assert cli.main(["list", "-o", form]) == 0
    out = capsys.readouterr().out
    assert out.isascii() and "\x1b" not in out
    parsed = json.loads(out) if form == "json" else yaml.safe_load(out)
    assert parsed["runs"][0]["creator"] == parsed["runs"][0]["conditions"] == HOSTILE
    if form == "yaml":  # the newline escaped: no line of it starts a forged key
        assert not any(line.startswith("`- forged") for line in out.splitlines())


def test_text_escapes_every_cell_and_keeps_one_row_a_line(
        api: Any, capsys: pytest.CaptureFixture[str]) -> None:
    api(page(run("study", creator=HOSTILE)))
    assert cli.main(["list", "-o", "wide"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "x\\n`- forged" in lines[1]
    for line in lines:
        assert not [c for c in line if unicodedata.category(c) in terminal.UNSAFE_CATEGORIES]


@pytest.mark.parametrize("form", ["json", "yaml"])
def test_an_error_is_a_document_too(form: str, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    def refused(**_: object) -> client.Connection:
        raise requests.Failure(f"no kubeconfig: {HOSTILE}", code=3)
    monkeypatch.setattr(client, "connect", refused)
    assert cli.main(["status", "study", "-o", form]) == 3
    out = capsys.readouterr()
    parsed = json.loads(out.out) if form == "json" else yaml.safe_load(out.out)
    assert parsed == {"error": f"no kubeconfig: {HOSTILE}", "exitCode": 3}
    assert "\x1b" not in out.err and out.err.startswith("error: no kubeconfig")


def test_status_wide_is_its_text_and_yaml_its_tree_exact(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    conn = client.Connection(rest=None, namespace="team-a")  # type: ignore[arg-type]
    monkeypatch.setattr(client, "connect", lambda **_: conn)
    monkeypatch.setattr(client, "get", lambda _c, _p, _n: run("study", creator=HOSTILE))
    monkeypatch.setattr(client, "slots_of", lambda _c, _r: [])
    monkeypatch.setattr(client, "leases", lambda _c, _w: {})
    shown = {}
    for form in ("text", "wide", "yaml"):
        assert cli.main(["status", "study", "-o", form]) == 0
        shown[form] = capsys.readouterr().out
    assert shown["wide"] == shown["text"] and shown["text"].startswith("AgentRun team-a/study")
    tree = yaml.safe_load(shown["yaml"])
    assert (tree["run"], tree["namespace"], tree["slots"]) == ("study", "team-a", [])
