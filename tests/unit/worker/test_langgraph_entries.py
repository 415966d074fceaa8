"""The LangGraph log's entries and the index they replay to (pure: no journal, no serializer).

What is claimed (``agentrun.worker.langgraph._entries``): entries sort by generation,
then sequence, numerically, value records left out; a new log's generation follows the
highest; every malformed or oversized entry is refused by name, never half-applied; a
task's regular write is kept as first written and a special one replaced; ids are a list,
never one string; ``copy-thread`` shares values by reference; ``prune`` keeps each
namespace's newest checkpoint with its writes and the values it names, or forgets the
thread;
``delete-runs`` forgets only the checkpoints of those runs, in every namespace, with their
writes and the values no kept checkpoint names.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentrun.worker.langgraph import _entries as entries

Typed = entries.Typed
VALUE = Typed("json", b'"v"')


def put(thread: str, checkpoint: str, *, ns: str = "", run: str | None = None,
        blobs: dict[str, Any] | None = None, parent: str | None = None,
        versions: dict[str, Any] | None = None) -> dict[str, Any]:
    named = versions if versions is not None else {c: v for c, (v, _) in (blobs or {}).items()}
    return entries.check({"op": "put", "thread": thread, "ns": ns, "id": checkpoint,
                          "parent": parent, "run": run, "checkpoint": VALUE.to_json(),
                          "metadata": VALUE.to_json(), "versions": named,
                          "blobs": blobs or {}})


def writes(thread: str, checkpoint: str, task: str, *items: tuple[int, str, bytes],
           ns: str = "") -> dict[str, Any]:
    return entries.check(entries.writes_entry(
        thread=thread, ns=ns, checkpoint=checkpoint, task=task, path="",
        writes=[(i, c, Typed("json", v)) for i, c, v in items]))


def test_entries_replay_by_generation_then_sequence_numerically_without_value_records(
        ) -> None:
    keys = ["langgraph.10.1", "langgraph.2.10", "langgraph.2.9", "langgraph.2.3.v",
            "langgraph.1.5", "gather", "langgraph.2.x", "langgraph.02.1", "langgraph-1-1"]
    assert entries.order(keys) == ["langgraph.1.5", "langgraph.2.9", "langgraph.2.10",
                                   "langgraph.10.1"]


def test_a_new_log_writes_the_generation_after_the_highest() -> None:
    assert entries.next_generation(["langgraph.2.4", "langgraph.7.1.v", "step"]) == 8
    assert entries.next_generation(["step"]) == 1
    assert entries.key(generation=8, seq=3, value=True) == "langgraph.8.3.v"


@pytest.mark.parametrize(("entry", "message"), [
    ([], "a JSON object with an 'op'"),
    ({"op": "drop"}, "unknown entry op"),
    ({"op": "delete-thread"}, "exactly the fields"),
    ({"op": "delete-thread", "thread": "t", "extra": 1}, "exactly the fields"),
    ({"op": "delete-thread", "thread": 7}, "must be a string, not int"),
    ({"op": "delete-thread", "thread": "t" * 1025}, "at most 1024"),
    ({"op": "delete-runs", "runs": "r"}, "run ids are a list"),
    ({"op": "delete-runs", "runs": ["r"] * 1001}, "more than 1000"),
    ({"op": "prune", "threads": ["t"], "strategy": "all"}, "one of keep_latest, delete"),
    ({"op": "copy-thread", "from": "a", "to": None}, "to must be a string"),
    ({**put("t", "c"), "checkpoint": ["json"]}, "checkpoint must be [type, base64 data]"),
    ({**put("t", "c"), "metadata": ["json", "%%%"]}, "not base64"),
    ({**put("t", "c"), "blobs": []}, "blobs are an object"),
    ({**put("t", "c"), "blobs": {"ch": ["1"]}}, "[version, value]"),
    ({**put("t", "c"), "blobs": {"ch": [True, "empty"]}}, "version must be a string or"),
    ({**put("t", "c"), "blobs": {"c" * 257: ["1", "empty"]}}, "at most 256"),
    ({**put("t", "c"), "blobs": {"ch": ["1", {"record": 5}]}}, "a value record's key"),
    ({**put("t", "c"), "blobs": {"ch": ["1", {"record": "step"}]}}, "a value record's key"),
    ({**put("t", "c"), "versions": []}, "versions are an object"),
    ({**put("t", "c"), "versions": {"ch": None}}, "version must be a string or"),
    ({**put("t", "c"), "parent": 3}, "parent must be a string"),
    ({**writes("t", "c", "task"), "writes": {}}, "writes are a list"),
    ({**writes("t", "c", "task"), "writes": [[True, "ch", VALUE.to_json()]]}, "a write is"),
    ({**writes("t", "c", "task"), "writes": [[0, "ch", ["json", 1]]]}, "a write's value"),
])
def test_a_malformed_entry_is_refused_by_name(entry: Any, message: str) -> None:
    with pytest.raises(entries.EntryError, match=message.replace("[", r"\[")):
        entries.check(entry)


def test_a_regular_write_is_kept_as_first_written_and_a_special_one_replaced() -> None:
    index = entries.Index()
    index.apply(put("t", "c1"))
    index.apply(writes("t", "c1", "task", (0, "ch", b"1"), (-1, "__error__", b"e1")))
    index.apply(writes("t", "c1", "task", (0, "ch", b"2"), (-1, "__error__", b"e2")))
    index.apply(writes("t", "c1", "other", (0, "ch", b"3")))
    assert [(w.task, w.channel, w.value.data) for w in index.ordered_writes("t", "", "c1")] == [
        ("other", "ch", b"3"), ("task", "__error__", b"e2"), ("task", "ch", b"1")]


def test_copy_shares_values_by_reference_and_leaves_the_source_as_it_was() -> None:
    index = entries.Index()
    index.apply(put("a", "c1", blobs={"big": ["1", {"record": "langgraph.1.1.v"}],
                                      "small": ["1", VALUE.to_json()], "gone": ["1", "empty"]}))
    index.apply(put("a", "c2", ns="sub", parent=None))
    index.apply(writes("a", "c1", "task", (0, "ch", b"w")))
    before = {k: dict(v) for k, v in index.checkpoints["a"].items()}
    index.apply(entries.check({"op": "copy-thread", "from": "a", "to": "b"}))
    assert index.checkpoints["b"] == before == index.checkpoints["a"]
    assert index.blobs[("b", "", "big", "1")] == entries.Ref("langgraph.1.1.v")
    assert index.blobs[("b", "", "gone", "1")] == entries.EMPTY
    assert index.ordered_writes("b", "", "c1") == index.ordered_writes("a", "", "c1")


def test_prune_keeps_each_namespaces_newest_with_its_writes_or_forgets_the_thread() -> None:
    index = entries.Index()
    for checkpoint in ("c1", "c2", "c3"):
        index.apply(put("t", checkpoint, blobs={"ch": [checkpoint, VALUE.to_json()]}))
        index.apply(put("t", checkpoint, ns="sub"))
        index.apply(writes("t", checkpoint, "task", (0, "ch", checkpoint.encode())))
    index.apply(put("other", "c1"))
    index.apply(entries.check({"op": "prune", "threads": ["t"], "strategy": "keep_latest"}))
    assert {ns: sorted(saved) for ns, saved in index.checkpoints["t"].items()} == {
        "": ["c3"], "sub": ["c3"]}
    assert set(index.writes) == {("t", "", "c3")}
    assert set(index.blobs) == {("t", "", "ch", "c3")}  # only what the kept one names
    index.apply(entries.check({"op": "prune", "threads": ["t"], "strategy": "delete"}))
    assert "t" not in index.checkpoints and not index.writes and not index.blobs
    assert not index.has("t") and index.has("other")
    assert index.latest("other", "") == "c1"


def test_delete_runs_forgets_only_those_runs_checkpoints_in_every_namespace() -> None:
    index = entries.Index()
    index.apply(put("t", "c1", run="r1", blobs={"a": ["1", VALUE.to_json()]}))
    index.apply(put("t", "c2", run="r2", versions={"a": "1", "b": "2"},
                    blobs={"b": ["2", VALUE.to_json()]}))
    index.apply(put("t", "c3", ns="sub", run="r1"))
    index.apply(writes("t", "c1", "task", (0, "ch", b"w")))
    index.apply(entries.check({"op": "delete-runs", "runs": ["r1", "nobody"]}))
    assert {ns: sorted(saved) for ns, saved in index.checkpoints["t"].items()} == {
        "": ["c2"], "sub": []}
    assert not index.writes
    assert set(index.blobs) == {("t", "", "a", "1"), ("t", "", "b", "2")}  # c2 names both
    assert index.latest("t", "sub") is None


def test_ids_are_a_list_never_one_string() -> None:
    with pytest.raises(entries.EntryError, match="not one string"):
        entries.check_ids("ab", what="thread id")
    assert entries.check_ids(iter(["a", "b"]), what="thread id") == ["a", "b"]
