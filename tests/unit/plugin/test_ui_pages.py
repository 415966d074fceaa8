"""The web UI's pages, pure: filters bounded as parsed, counts, the graph, the timeline,
what waits for a person, the forms from the registry; every template rendered with the
sparsest and a full object, and everything anyone wrote escaped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentrun.core.commands import registry
from agentrun.plugin import cli
from agentrun.plugin.ui import app, pages

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def stamp(minutes_ago: float) -> str:
    return (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def run(name: str, *, namespace: str = "a", minutes: float = 5, tenant: str | None = None,
        conditions: tuple[str, ...] = (), claim: str = "Automatic") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace,
                         "creationTimestamp": stamp(minutes)},
            "spec": {"claimPolicy": claim, **({"tenant": tenant} if tenant else {})},
            "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}}


def slot(name: str, *, node: str, after: tuple[str, ...] = (), state: str = "Pending",
         run_name: str = "r", namespace: str = "a", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "creationTimestamp": stamp(3)},
            "spec": {"run": run_name, "node": node, "workerClass": "cpu",
                     "dependsOn": list(after)},
            "status": {"state": state, **status}}


@pytest.mark.parametrize(("query", "problem"), [
    ({"state": "Sleeping"}, "state must be one of"),
    ({"tenant": "Team A"}, "tenant must be a name"),
    ({"tenant": "-team"}, "tenant must be a name"),
    ({"namespace": "x" * 64}, "namespace must be a name"),
    ({"age": "6 hours"}, "age must be a number and a unit"),
    ({"age": "0h"}, "age must be a number and a unit"),
    ({"age": "999999d"}, "age must be a number and a unit"),
])
def test_a_bad_filter_is_said_and_ignored(query: dict[str, str], problem: str) -> None:
    chosen, problems = pages.filters(query)
    assert chosen == pages.Filters()
    assert len(problems) == 1 and problems[0].startswith(problem)


def test_the_runs_are_counted_by_state_and_filtered() -> None:
    found = [run("old", minutes=600, tenant="t1"), run("new", minutes=1, tenant="t2",
                                                       conditions=("Pinned",)),
             run("done", minutes=30, tenant="t1", conditions=("Succeeded",)),
             run("other", namespace="b", minutes=2)]
    everything = pages.runs(found, chosen=pages.Filters(), now=NOW)
    assert everything["counts"] == {"Pending": 2, "Running": 1, "Succeeded": 1, "Failed": 0}
    assert [r["name"] for r in everything["rows"]] == ["new", "other", "done", "old"]
    assert everything["tenants"] == ["t1", "t2"] and everything["namespaces"] == ["a", "b"]
    chosen, _ = pages.filters({"age": "1h", "tenant": "t1"})
    narrowed = pages.runs(found, chosen=chosen, now=NOW)
    assert [r["name"] for r in narrowed["rows"]] == ["done"]
    assert narrowed["total"] == 1
    chosen, problems = pages.filters({"tenant": "Team_A.1"})  # a tenant as the CRD takes it
    assert problems == [] and chosen.tenant == "Team_A.1"
    chosen, _ = pages.filters({"state": "Pending", "namespace": "a"})
    assert [r["name"] for r in pages.runs(found, chosen=chosen, now=NOW)["rows"]] == ["old"]


def test_the_graph_places_each_node_after_its_dependencies() -> None:
    slots = [slot("s-c", node="c", after=("a", "b")), slot("s-a", node="a"),
             slot("s-b", node="b", after=("a",)), slot("s-d", node="d"),
             slot("s-e", node="e", after=("gone",))]  # a dependency with no slot: ignored
    drawn = pages.graph(slots)
    where = {n["node"]: (n["x"], n["y"]) for n in drawn["nodes"]}
    column = {node: x // pages.COLUMN_WIDTH for node, (x, _) in where.items()}
    assert column == {"a": 0, "d": 0, "e": 0, "b": 1, "c": 2}
    assert len(set(where.values())) == len(where)  # no two nodes on one place
    assert sorted((e["from"], e["to"]) for e in drawn["edges"]) == [
        ("a", "b"), ("a", "c"), ("b", "c")]
    assert drawn["width"] == 3 * pages.COLUMN_WIDTH + 20


def test_a_cycle_is_drawn_and_never_hangs() -> None:
    drawn = pages.graph([slot("s-a", node="a", after=("b",)), slot("s-b", node="b", after=("a",))])
    assert {n["node"] for n in drawn["nodes"]} == {"a", "b"}


def test_the_timeline_puts_attempts_and_commands_on_one_axis() -> None:
    found = slot("s", node="n", state="RetryWait", attempts=[
        {"number": 1, "startedAt": stamp(10), "endedAt": stamp(5), "outcome": "Failed",
         "reason": "the lease expired", "ownerActor": "alice"},
        {"number": 2, "startedAt": stamp(2)}],
        commands=[{"time": stamp(4), "kind": "Reassign", "actor": "bob",
                   "outcome": "Rejected", "predicate": "NotOwner"}])
    line = pages.timeline(found, now=NOW)
    first, second = line["bars"]
    assert (first["left"], first["width"]) == (0.0, 50.0)
    assert first["outcome"] == "Failed" and first["reason"] == "the lease expired"
    assert (second["left"], second["width"], second["outcome"]) == (80.0, 20.0, "Running")
    [mark] = line["marks"]
    assert (mark["at"], mark["predicate"]) == (60.0, "NotOwner")
    [end] = line["ends"]  # the running attempt has none
    assert (end["at"], end["row"], end["number"], end["outcome"]) == (50.0, 0, 1, "Failed")
    assert end["reason"] == "the lease expired" and end["time"] == stamp(5)


def test_an_end_tick_is_on_its_attempts_row() -> None:
    """A tick sits on its own attempt's bar, whatever came before it; an end time that does
    not parse has no tick (the attempts' table shows it as written)."""
    found = slot("s", node="n", attempts=[
        {"number": 1, "startedAt": stamp(10)},  # never recorded ended
        {"number": 2, "startedAt": stamp(8), "endedAt": "yesterday", "outcome": "Failed"},
        {"number": 3, "startedAt": stamp(6), "endedAt": stamp(4), "outcome": "Lost"}])
    [end] = pages.timeline(found, now=NOW)["ends"]
    assert (end["row"], end["number"], end["outcome"]) == (2, 3, "Lost")


def test_a_slot_without_attempts_has_an_empty_timeline() -> None:
    line = pages.timeline(slot("s", node="n"), now=NOW)
    assert line["bars"] == [] and line["marks"] == [] and line["ends"] == []


def test_what_waits_for_a_person() -> None:
    runs = [run("r", claim="Manual"), run("auto")]
    slots = [
        slot("asked", node="n", state="Active", questions=[
            {"key": "q1", "state": "Pending"}, {"key": "q0", "state": "Answered"},
            {"key": "pay", "state": "Pending", "approvers": 2}]),
        slot("held", node="n", conditions=[{"type": "Held", "status": "True"}]),
        slot("effect", node="n", state="RetryWait", effects=[
            {"key": "publish", "state": "Unresolved"}, {"key": "old", "state": "Resolved"}]),
        slot("manual", node="n", state="RetryWait"),
        slot("auto-wait", node="n", state="RetryWait", run_name="auto"),
        slot("fine", node="n", state="Succeeded"),
    ]
    found = {w["slot"]: w["why"] for w in pages.waiting(runs, slots)}
    assert found == {
        "asked": ["question q1", "approval pay"], "held": ["held"],
        "effect": ["effect publish: its outcome is unknown (resolve-effect)",
                   "a Manual run's slot: reassign or claim it"],
        "manual": ["a Manual run's slot: reassign or claim it"]}


def test_every_command_of_the_registry_has_its_form() -> None:
    forms = {c["word"]: c for c in pages.commands()}
    assert set(forms) == {spec.word for spec in registry.COMMANDS}
    reassign = {f["name"]: f for f in forms["reassign"]["fields"]}
    assert reassign["reason"]["required"] and reassign["reason"]["long"]
    assert reassign["worker_class"]["flag"] == "--class"
    outcome = {f["name"]: f for f in forms["resolve-effect"]["fields"]}["outcome"]
    assert outcome["choices"] == ["applied", "not-applied"]


ENV = app.templates()  # the server's own
BASE = {"generation": 1, "problems": [], "refused": {}, "path": "/x", "live": "view=runs",
        "versions": {}}
EVIL = "<script>alert(1)</script>"


def render(template: str, /, **values: Any) -> str:
    return ENV.get_template(template).render({**BASE, **values})


def test_every_template_renders_the_sparsest_objects() -> None:
    bare_run = {"metadata": {"name": "r", "namespace": "a"}}
    bare_slot = {"metadata": {"name": "s", "namespace": "a"}}
    chosen, _ = pages.filters({})
    assert "No runs." in render("runs.html", view=pages.runs([], chosen=chosen, now=NOW),
                                chosen=chosen, bad=[], states=pages.STATES)
    assert "Not pinned yet." in render("run.html", view=pages.run(bare_run, [], [], now=NOW),
                                       namespace="a", name="r")
    shown = render("slot.html", view=pages.slot(bare_slot, journal=None, now=NOW),
                   namespace="a", name="s", run="", commands=pages.commands(), answer=None)
    assert "No attempt yet." in shown and "no journal" in shown
    assert "Nothing waits" in render("waiting.html", rows=[])


def test_what_people_wrote_is_escaped_everywhere() -> None:
    found = run(EVIL.lower()[:10], tenant=EVIL)
    found["status"]["conditions"] = [{"type": "Ready", "status": "True", "message": EVIL}]
    slots = [slot("s", node="n", run_name="r", commands=[
        {"time": stamp(1), "kind": "Hold", "actor": EVIL, "outcome": "Accepted",
         "reason": EVIL, "message": EVIL}], effects=[{"key": EVIL, "reason": EVIL}])]
    pages_ = [
        render("run.html", view=pages.run(found, slots, [{"message": EVIL}], now=NOW),
               namespace="a", name="r"),
        render("slot.html", view=pages.slot(slots[0], journal={"error": EVIL}, now=NOW),
               namespace="a", name="s", run="r", commands=pages.commands(),
               answer={"word": "hold", "accepted": False, "said": EVIL, "notes": [EVIL],
                       "id": "1"}),
        render("base.html", problems=[EVIL], refused={"x": EVIL}),
        render("runs.html", view=pages.runs([found], chosen=pages.Filters(), now=NOW),
               chosen=pages.Filters(), bad=[EVIL], states=pages.STATES),
        render("waiting.html", rows=[{"namespace": "a", "run": EVIL, "slot": EVIL,
                                      "state": "Held", "why": [EVIL]}]),
    ]
    for page in pages_:
        assert EVIL not in page and "&lt;script&gt;" in page


def test_each_attempt_says_what_it_ran_repeated_and_skipped() -> None:
    def entry(attempt: object, seq: int, key: str) -> dict[str, Any]:
        return {"attempt": attempt, "seq": seq, "kind": "step-result", "key": key,
                "size": 10, "stored": "inline"}
    journal = {"store": "s3://b/p", "commits": {"1": "2", "2": "3"}, "truncated": False,
               "entries": [entry(2, 3, "report"), entry(2, 2, "source-3"),
                           entry(2, 1, "source-2"), entry(1, 2, "source-2"),
                           entry(1, 1, "source-1"), entry(True, 9, "odd")]}
    first, second = pages.steps(journal)
    assert (first["attempt"], first["ran"], first["skipped"], first["repeated"]) == (
        1, ["source-1", "source-2"], [], [])
    assert (second["ran"], second["skipped"], second["repeated"]) == (
        ["report", "source-2", "source-3"], ["source-1"], ["source-2"])
    assert second["commits"] == "3" and [e["seq"] for e in second["entries"]] == [3, 2, 1]
    assert pages.steps(None) == [] and pages.steps({"error": "refused"}) == []


def test_the_run_commands_forms_are_the_plugins_flags() -> None:
    budget, fork = pages.parser_forms(cli.parser(), words=("budget", "fork"))
    assert [(f["name"], f["flag"], f["required"]) for f in budget["fields"]] == [
        ("add", "--add", False), ("add_cost", "--add-cost", False), ("reason", "--reason", True)]
    assert [f["flag"] for f in fork["fields"]] == ["--name", "--at", "--reason"]
