"""The web UI's store without an API server: what a scope follows, whose run a change is,
Events bounded in all namespaces together, and a follower's failure told to every page
and taken back once it recovers."""

from __future__ import annotations

from agentrun.plugin import client, requests, watching
from agentrun.plugin.ui import store as stores
from agentrun.plugin.ui.store import Change, Store


def event(namespace: str, index: int) -> dict[str, object]:
    return {"metadata": {"namespace": namespace, "name": f"e{index}"},
            "lastTimestamp": f"2026-12-06T{index // 3600 % 24:02d}:{index // 60 % 60:02d}:"
                             f"{index % 60:02d}Z",
            "involvedObject": {"kind": "AgentRun", "name": "r"}}


def made(namespaces: list[str] | None) -> tuple[Store, list[list[Change]]]:
    told: list[list[Change]] = []
    conn = client.Connection(rest=None, namespace="a")  # type: ignore[arg-type]
    return Store(conn, stores.sources(namespaces), on_change=told.append), told


def test_a_scope_follows_each_kind_cluster_wide_or_per_namespace() -> None:
    assert [(f.plural, f.source.path) for f in stores.sources(None)] == [
        ("agentruns", "/apis/agentrun.dev/v1alpha1/agentruns"),
        ("slots", "/apis/agentrun.dev/v1alpha1/slots"), ("events", "/api/v1/events")]
    assert len(stores.sources(["a", "b"])) == 6
    conn = client.Connection(rest=None, namespace="a")  # type: ignore[arg-type]
    allowed = {None: "no", "a": None, "b": "you may not list runs in namespace b", "c": None}
    assert stores.scope(conn, named=["b", "c", "a"], may_list=allowed.__getitem__) == (
        ["a", "c"], {"b": "you may not list runs in namespace b"})
    assert stores.scope(conn, named=["b"], may_list=lambda ns: None) == (None, {})


def test_whose_run_a_change_is() -> None:
    assert stores.run_of("agentruns", {"metadata": {"name": "r"}}) == "r"
    assert stores.run_of("slots", {"spec": {"run": "r"}}) == "r"
    assert stores.run_of("events", {"involvedObject": {"kind": "Slot", "name": "s"}}) is None


def test_events_are_bounded_in_all_namespaces_together() -> None:
    store, _ = made(["a", "b"])
    places = [i for i, f in enumerate(store.followed) if f.plural == "events"]
    half = (stores.MAX_EVENTS + stores.EVENTS_SLACK) // 2 + 10
    for index, namespace in zip(places, ("a", "b"), strict=True):
        store._mirrors[index] = {watching.key(e): e for e in
                                 (event(namespace, 2 * i + (namespace == "b"))
                                  for i in range(half))}
    store._put(places[0], watching.Event(source=places[0], kind="ADDED",
                                         objects=(event("a", 10**6),)))
    kept = store.objects("events")
    assert len(kept) == stores.MAX_EVENTS
    assert event("a", 10**6) in kept and event("a", 0) not in kept  # the oldest went


def test_a_failure_is_told_to_every_page_and_taken_back() -> None:
    store, told = made(["a"])
    store._put(0, requests.Failure("watching runs: the API server went away", code=3))
    assert store.problem_list() == ["watching runs: the API server went away"]
    assert told == [[]]  # every page: its banner
    store._put(0, requests.Failure("watching runs: the API server went away", code=3))
    assert told == [[]]  # the same failure again: nothing new to say
    run = {"metadata": {"namespace": "a", "name": "r"}}
    store._put(0, watching.Event(source=0, kind="ADDED", objects=(run,)))
    assert store.problem_list() == []
    assert told[1] == [] and told[2] == [Change(plural="agentruns", namespace="a", name="r",
                                                run="r")]
    assert store.find("agentruns", "a", "r") is run
