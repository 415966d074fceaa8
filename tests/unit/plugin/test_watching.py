"""``-w`` on ``status`` and ``list`` without a cluster: the LIST and the watch streams are
scripted, and each scripted stream waits (with a timeout, never a sleep) until the plugin
printed what came before, so what is printed is deterministic.

What must hold: the first look, then a print per change that shows something new (none
for a change that shows nothing new); a watch goes on from the last resourceVersion; a
410 lists again (a run gone meanwhile printed as Deleted); an error ends it (exit 3, a
refusal 1); Ctrl-C and ``--timeout`` end it with exit 0; a deleted run ends ``status -w``.
"""

from __future__ import annotations

import _thread
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agentrun import rest
from agentrun.plugin import cli, client, output, watching

RUNS = "/apis/agentrun.dev/v1alpha1/namespaces/team-a/agentruns"
SLOTS = "/apis/agentrun.dev/v1alpha1/namespaces/team-a/slots"
PATIENCE = 10.0  # seconds a scripted stream waits for a print before the test fails


def run(name: str = "study", *, version: str = "1", done: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Pinned", "status": "True"}] + (
        [{"type": "Succeeded", "status": "True"}] if done else [])
    return {"metadata": {"name": name, "namespace": "team-a", "resourceVersion": version},
            "spec": {}, "status": {"conditions": conditions, "done": "1/1" if done else "0/1"}}


def slot(state: str, *, version: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": "study-research", "namespace": "team-a",
                         "resourceVersion": version},
            "spec": {"run": "study", "node": "research"}, "status": {"state": state}}


class Api:
    """The API server: LIST answers by path (in order), and watch sessions by path, each a
    list of events (``("print", n)``: wait until the plugin printed n times) or an error."""

    def __init__(self, *, lists: dict[str, list[Any]], watches: dict[str, list[Any]]) -> None:
        self.lists = lists
        self.watches = watches
        self.asked: list[tuple[str, dict[str, str]]] = []
        self.printed = 0
        self.changed = threading.Condition()
        self.released = threading.Event()  # the test is over: blocked streams return

    def request(self, method: str, path: str, *, query: Any = None, **_: Any) -> Any:
        return self.lists[path].pop(0)

    def get(self, path: str, *, query: Any = None) -> Any:
        return run() if path == f"{RUNS}/study" else None

    def emitted(self) -> None:
        with self.changed:
            self.printed += 1
            self.changed.notify_all()

    def stream(self, conn: Any, path: str, query: Any) -> Iterator[Any]:
        self.asked.append((path, dict(query)))
        sessions = self.watches[path]
        if not sessions:  # nothing more scripted: an idle watch, until the test ends
            self.released.wait(PATIENCE)
            return
        session = sessions.pop(0)
        if isinstance(session, Exception):
            raise session
        for event in session:
            if isinstance(event, tuple) and event[0] == "print":
                with self.changed:
                    assert self.changed.wait_for(lambda n=event[1]: self.printed >= n,
                                                 PATIENCE), f"never printed {event[1]} times"
            elif event == "ctrl-c":
                _thread.interrupt_main()
            else:
                yield event


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    made: list[Api] = []

    def install(**scripted: Any) -> Api:
        fake = Api(**scripted)
        made.append(fake)
        conn = client.Connection(rest=fake, namespace="team-a")  # type: ignore[arg-type]
        monkeypatch.setattr(client, "connect", lambda **_: conn)
        monkeypatch.setattr(client, "leases", lambda _c, _w: {})
        monkeypatch.setattr(watching, "stream", fake.stream)
        emit, write = output.emit, output.write

        def counted_emit(*args: Any, **kwargs: Any) -> None:
            emit(*args, **kwargs)
            fake.emitted()
        monkeypatch.setattr(output, "emit", counted_emit)
        monkeypatch.setattr(output, "write", write)
        return fake
    yield install
    for fake in made:
        fake.released.set()


def listed(*items: Any, version: str = "10") -> dict[str, Any]:
    return {"items": list(items), "metadata": {"resourceVersion": version}}


def event(kind: str, obj: Any) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def test_status_watch_prints_the_tree_again_on_each_change_and_ends_when_deleted(
        api: Any, capsys: pytest.CaptureFixture[str]) -> None:
    fake = api(lists={RUNS: [listed(run(), version="10")],
                      SLOTS: [listed(slot("Active"), version="11")]},
               watches={SLOTS: [[("print", 1), event("MODIFIED", slot("Succeeded", version="12")),
                                 ("print", 2), event("MODIFIED", slot("Succeeded", version="13"))]],
                        RUNS: [[("print", 2), event("MODIFIED", run(version="14", done=True)),
                                ("print", 3), event("DELETED", run(version="15", done=True))]]})
    assert cli.main(["status", "study", "-w"]) == 0
    trees = capsys.readouterr().out.split("\n\n")
    assert len(trees) == 4, trees  # the unchanged slot printed nothing
    assert "Running" in trees[0] and "Active" in trees[0]
    assert "Running" in trees[1] and "Succeeded" in trees[1]
    assert trees[2].startswith("AgentRun team-a/study  Succeeded")
    assert trees[3] == "run team-a/study was deleted\n"  # and the watch ended: exit 0
    watched: dict[str, dict[str, str]] = {}  # each path's first watch (a next one may start)
    for path, query in fake.asked:
        watched.setdefault(path, query)
    assert watched[RUNS]["fieldSelector"] == "metadata.name=study"
    assert watched[RUNS]["resourceVersion"] == "10"
    assert watched[SLOTS]["labelSelector"] == "agentrun.dev/run=study"
    assert watched[SLOTS]["resourceVersion"] == "11"
    assert watched[SLOTS]["watch"] == "true" and watched[SLOTS]["allowWatchBookmarks"] == "true"


def test_list_watch_prints_a_row_per_change_under_one_header_until_ctrl_c(
        api: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(watching, "TICK", 0.05)
    api(lists={RUNS: [listed(run("alpha"), run("beta"))]},
        watches={RUNS: [[("print", 2), event("MODIFIED", run("beta", version="2")),
                         event("ADDED", run("gamma", version="3", done=True)), ("print", 3),
                         event("DELETED", run("alpha", version="4")), ("print", 4),
                         "ctrl-c", event("MODIFIED", run("gamma", version="5"))]]})
    assert cli.main(["list", "-w"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] for line in lines] == [
        ["NAME", "STATE", "SLOTS"], ["alpha", "Running", "0/1"], ["beta", "Running", "0/1"],
        ["gamma", "Succeeded", "1/1"], ["alpha", "Deleted", "0/1"]]  # beta: nothing new
    assert all(line.index(line.split()[1]) == lines[0].index("STATE") for line in lines)


def test_a_410_lists_again_and_another_error_ends_the_watch(
        api: Any, capsys: pytest.CaptureFixture[str]) -> None:
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    refused = rest.ApiError(403, json.dumps({"message": "watch forbidden"}))
    fake = api(lists={RUNS: [listed(run("alpha"), run("beta")),
                             listed(run("beta", done=True), version="77")]},
               watches={RUNS: [[("print", 2), event("ERROR", gone)],
                               [("print", 4)], refused]})
    assert cli.main(["list", "-w", "-o", "json"]) == 1  # a refusal: exit 1
    out = capsys.readouterr()
    *rows, error = [json.loads(part)
                    for part in out.out.replace("}\n{", "}\n\x00{").split("\x00")]
    assert error["exitCode"] == 1 and "watch forbidden" in error["error"]
    assert [(r["name"], r["state"]) for r in rows] == [
        ("alpha", "Running"), ("beta", "Running"), ("alpha", "Deleted"), ("beta", "Succeeded")]
    assert [query.get("resourceVersion") for _, query in fake.asked] == ["10", "77", "77"]
    assert "error: watching " in out.err and "watch forbidden" in out.err


def test_a_watch_the_server_keeps_ending_at_once_is_an_api_error(
        api: Any, capsys: pytest.CaptureFixture[str]) -> None:
    api(lists={RUNS: [listed()]}, watches={RUNS: [[], [], [], []]})
    assert cli.main(["list", "-w"]) == 3
    assert "ended 3 watches at once" in capsys.readouterr().err


def test_timeout_ends_the_watch_with_exit_0(api: Any,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    api(lists={RUNS: [listed(run())], SLOTS: [listed()]}, watches={RUNS: [], SLOTS: []})
    assert cli.main(["status", "study", "-w", "--timeout", "1", "-o", "yaml"]) == 0
    out = capsys.readouterr().out  # one document: nothing changed
    assert out.count("state: Running") == 1 and "---" not in out


class Raw:
    """urllib3's response: its chunks, as the API server sends a watch."""

    def __init__(self, chunks: list[bytes], status: int = 200) -> None:
        self.chunks = chunks
        self.status = status
        self.closed = False

    def stream(self, amt: Any = None, decode_content: Any = None) -> Iterator[bytes]:
        yield from self.chunks

    def read(self, most: int) -> bytes:
        return b"".join(self.chunks)[:most]

    def close(self) -> None:
        self.closed = True


class Client:
    """:meth:`agentrun.rest.Rest.open`: the response, its body unread when streaming."""

    def __init__(self, raw: Raw) -> None:
        self.raw = raw
        self.opened: list[dict[str, Any]] = []

    def open(self, method: str, path: str, **options: Any) -> Raw:
        self.opened.append({"method": method, "path": path, **options})
        return self.raw


def test_a_stream_is_read_a_line_an_event_across_chunks_and_closed() -> None:
    lines = [json.dumps(event("ADDED", run(version=str(n)))).encode() for n in range(3)]
    data = b"\n".join(lines) + b"\n"
    raw = Raw([data[:7], data[7:150], data[150:]])
    api = Client(raw)
    conn = client.Connection(rest=api, namespace="team-a")  # type: ignore[arg-type]
    found = list(watching.stream(conn, RUNS, {"watch": "true"}))
    assert [e["object"]["metadata"]["resourceVersion"] for e in found] == ["0", "1", "2"]
    assert raw.closed and [(o["method"], o["stream"], o["timeout"]) for o in api.opened] == [
        ("GET", True, rest.Timeout(connect=watching.CONNECT_SECONDS, read=watching.READ_SECONDS))]
    assert watching.READ_SECONDS > watching.WATCH_SECONDS  # a quiet watch is not a dead one
    refused = Raw([json.dumps({"message": "forbidden: watch"}).encode()], status=403)
    conn = client.Connection(rest=Client(refused), namespace="team-a")  # type: ignore[arg-type]
    with pytest.raises(rest.ApiError, match="forbidden: watch"):
        list(watching.stream(conn, RUNS, {}))
    assert refused.closed
