"""The plugin's status tree and history without a cluster."""

from __future__ import annotations

import base64
import hashlib
import json
import unicodedata
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentrun.plugin import terminal, views

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize(("seconds", "shown"), [
    (0, "0s"), (59, "59s"), (119, "119s"), (120, "2m"), (7199, "119m"), (7200, "2h"),
    (2 * 86400 - 1, "47h"), (2 * 86400, "2d"), (-30, "0s")])
def test_age_is_kubectls(seconds: int, shown: str) -> None:
    assert views.age(ago(seconds), now=NOW) == shown


@pytest.mark.parametrize("bad", [None, "", "yesterday", 5])
def test_an_unknown_time_has_no_age(bad: object) -> None:
    assert views.age(bad, now=NOW) == "-"


def run(*true: str) -> dict[str, object]:
    return {"metadata": {"name": "study", "namespace": "team-a", "creationTimestamp": ago(600)},
            "spec": {"claimPolicy": "Manual"},
            "status": {"conditions": [{"type": t, "status": "True"} for t in true]
                       + [{"type": "Ready", "status": "False"}]}}


@pytest.mark.parametrize(("true", "state"), [
    ((), "Pending"), (("Pinned",), "Running"), (("Pinned", "Succeeded"), "Succeeded"),
    (("Pinned", "Failed"), "Failed")])
def test_run_state(true: tuple[str, ...], state: str) -> None:
    assert views.run_state(run(*true)) == state


ENDED = {"number": 1, "pod": "study-research-1", "lease": "study-research-1",
         "workerClass": "cpu", "launchSpec": "cpu-workers@1", "ownerActor": "alice",
         "startedAt": ago(300), "endedAt": ago(240), "outcome": "Lost",
         "reason": "the lease expired"}
LIVE = {"number": 2, "pod": "study-research-2", "lease": "study-research-2",
        "workerClass": "gpu", "launchSpec": "gpu-workers@3", "startedAt": ago(30)}


def slot(name: str, node: str, *attempts: dict[str, object], **status: object) -> dict[
        str, object]:
    return {"metadata": {"name": name, "creationTimestamp": ago(500)},
            "spec": {"run": "study", "node": node, "workerClass": "cpu"},
            "status": {"attempts": list(attempts), **status}}


def test_the_tree_shows_every_slot_and_attempt() -> None:
    slots = [slot("study-write-1", "write"),
             slot("study-research-1", "research", ENDED, LIVE, state="Active",
                  workerClass="gpu", activeWorker="study-research-2",
                  launchSpec={"name": "gpu-workers", "generation": 3},
                  conditions=[{"type": "Reopened", "status": "False"},
                              {"type": "Held", "status": "True"}])]
    leases = {"study-research-2": {"spec": {"renewTime": ago(3),
                                            "holderIdentity": "study-research-2"}}}
    view = views.tree(run("Pinned"), slots, now=NOW, leases=leases)
    assert [s["node"] for s in view["slots"]] == ["research", "write"]  # by node
    research = view["slots"][0]
    assert research["attempts"][0]["outcome"] == "Lost"
    assert research["attempts"][0]["ran"] == "60s"
    assert "leaseNote" not in research["attempts"][0]
    assert research["attempts"][1]["outcome"] == "running"
    assert research["attempts"][1]["leaseNote"] == "renewed 3s ago by study-research-2"
    assert research["conditions"] == ["Held"]
    json.dumps(view)  # -o json prints it as is
    lines = views.render_tree(view)
    assert lines == [
        "AgentRun team-a/study  Running  claimPolicy Manual  conditions Pinned  age 10m",
        "|- slot study-research-1  node research  Active  class gpu  spec gpu-workers@3"
        "  [Held]",
        "|  |- attempt 1  Lost  class cpu  spec cpu-workers@1  pod study-research-1  lease "
        "study-research-1  owner alice  age 5m (ran 60s)",
        "|  |     reason: the lease expired",
        "|  `- attempt 2  running  class gpu  spec gpu-workers@3  pod study-research-2  lease "
        "study-research-2  (renewed 3s ago by study-research-2)  age 30s",
        "`- slot study-write-1  node write  Pending  class cpu  spec -",
        "   `- (no attempts yet)",
    ]
    assert all(line.isascii() for line in lines)  # readable without colour or a UTF-8 font


def test_a_slots_reruns_and_waiting_questions_are_on_its_line() -> None:
    asked = [{"key": "plan", "state": "Pending"}, {"key": "old", "state": "Answered"},
             {"key": "ok", "state": "Pending"}]
    view = views.tree(run("Pinned"), [slot("study-draft-1", "draft", reruns=2,
                                           questions=asked)], now=NOW)
    assert (view["slots"][0]["reruns"], view["slots"][0]["waiting"]) == (2, 2)
    assert views.render_tree(view)[1] == ("`- slot study-draft-1  node draft  Pending  class "
                                          "cpu  spec -  reruns 2  2 question(s) waiting")
    plain = views.tree(run("Pinned"), [slot("s", "n", reruns="x")], now=NOW)
    assert (plain["slots"][0]["reruns"], plain["slots"][0]["waiting"]) == (0, 0)


def test_a_forks_provenance_is_its_second_line() -> None:
    forked = run("Pinned", "Forked")
    forked["status"]["fork"] = {  # type: ignore[index]
        "run": "study-a", "uid": "0d1e", "node": "draft", "step": "outline", "actor": "alice",
        "reason": "another\noutline", "copied": ago(60), "inherited": [{"node": "x"}]}
    view = views.tree(forked, [], now=NOW)
    assert view["fork"] == {"run": "study-a", "uid": "0d1e", "node": "draft",
                            "step": "outline", "actor": "alice", "reason": "another\noutline"}
    assert views.render_tree(view)[1] == (
        "   forked from study-a (uid 0d1e) at draft:outline by alice: another\\noutline")
    assert "fork" not in views.tree(run("Pinned"), [], now=NOW)


def test_a_live_lease_never_renewed_and_one_not_readable() -> None:
    live = slot("s", "n", LIVE, activeWorker="study-research-2")
    seen = views.tree(run(), [live], now=NOW,
                      leases={"study-research-2": {"spec": {}}})["slots"][0]["attempts"][0]
    assert seen["leaseNote"] == "not renewed yet"
    released = views.tree(run(), [live], now=NOW, leases={"study-research-2": {
        "metadata": {"annotations": {"agentrun.dev/released": ago(2)}},
        "spec": {"holderIdentity": "study-research-2", "renewTime": ago(5)}}})
    assert released["slots"][0]["attempts"][0]["leaseNote"] == \
        "released 2s ago by study-research-2"
    hidden = views.tree(run(), [live], now=NOW)["slots"][0]["attempts"][0]
    assert hidden["leaseNote"] is None
    assert "renewed" not in views.render_tree(views.tree(run(), [live], now=NOW))[-1]


def test_a_run_without_slots_says_so() -> None:
    assert views.render_tree(views.tree(run(), [], now=NOW))[-1] == "`- (no slots yet)"


def test_history_lists_attempts_and_commands_with_who_why_and_predicate() -> None:
    commands = [
        {"requestId": "r1", "kind": "Reassign", "actor": "bob", "outcome": "Rejected",
         "predicate": "NotOwner", "reason": "mine now", "message": "alice owns it",
         "time": ago(100)},
        {"requestId": "r2", "kind": "Reassign", "actor": "alice", "outcome": "Accepted",
         "workerClass": "gpu", "reason": "oom twice", "message": "reassigned",
         "time": ago(90), "override": False}]
    view = views.history(slot("study-research-1", "research", ENDED, state="RetryWait",
                              commands=commands), now=NOW)
    assert view["attempts"][0]["launchSpec"] == "cpu-workers@1"
    assert [(c["actor"], c["predicate"], c["class"]) for c in view["commands"]] == [
        ("bob", "NotOwner", "-"), ("alice", "-", "gpu")]
    json.dumps(view)
    lines = views.render_history(view)
    assert lines[0] == "Slot study-research-1  run study  RetryWait  age 8m"
    header = lines[lines.index("Commands:") + 1]
    assert header.split() == ["TIME", "KIND", "REQUEST", "ACTOR", "OUTCOME", "PREDICATE",
                              "CLASS", "REASON", "MESSAGE"]
    bob = lines[lines.index("Commands:") + 2]
    assert "bob" in bob and "NotOwner" in bob and "alice owns it" in bob
    # Columns line up: every row's OUTCOME starts where the header's does.
    column = header.index("OUTCOME")
    assert all(line[column:].startswith(("Rejected", "Accepted"))
               for line in lines[lines.index("Commands:") + 2:])


def test_an_empty_history_says_none() -> None:
    lines = views.render_history(views.history({"metadata": {"name": "s"}}, now=NOW))
    assert lines.count("  (none)") == 2 and "Pending" in lines[0]
    assert not any(line.startswith("Questions") for line in lines)


def test_the_history_shows_the_questions_with_their_digests() -> None:
    found = slot("study-research-1", "research", ENDED, state="RetryWait")
    found["status"]["questions"] = [
        {"key": "review", "attempt": 1, "state": "Pending", "digest": "9d" * 32,
         "question": "Publish\x1b it?", "jsonSchema": '{"type":"boolean"}'},
        {"key": "plan", "attempt": 1, "state": "Answered", "digest": "ab" * 32,
         "value": "true", "actor": "alice", "question": "Go?"},
        {"key": "publish", "attempt": 1, "state": "Pending", "digest": "cd" * 32,
         "question": "effect publish (owner blog): {}", "approvers": 2,
         "approvedBy": ["0" * 16]}]
    view = views.history(found, now=NOW)
    assert [(q["key"], q["state"], q["answer"], q["by"], q["approvals"])
            for q in view["questions"]] == [
        ("review", "Pending", "-", "-", "-"), ("plan", "Answered", "true", "alice", "-"),
        ("publish", "Pending", "-", "-", "1/2")]
    assert view["questions"][0]["schema"] == '{"type":"boolean"}'
    lines = views.render_history(view)
    start = next(n for n, line in enumerate(lines) if line.startswith("Questions"))
    assert "--digest D" in lines[start]
    assert lines[start + 1].split()[:4] == ["KEY", "ATTEMPT", "STATE", "DIGEST"]
    assert "9d" * 32 in lines[start + 2] and "Publish\\x1b it?" in lines[start + 2]


JOURNAL = {"kind": "SlotHistory", "journal": {"bucket": "agentrun", "prefix": "p/ns/uid"},
           "attempts": [{"attempt": 2, "commits": 1, "records": 1, "bytes": 5000},
                        {"attempt": 1, "commits": 2}],
           "entries": [{"attempt": 2, "seq": 1, "key": "turn-3", "kind": "step-result",
                        "size": 5000, "stored": "object", "digest": "d" * 64},
                       {"attempt": 1, "seq": 2, "key": "mail.intent", "kind": "effect-intent",
                        "size": 80, "stored": "inline", "digest": "e" * 64}],
           "truncated": True}


def test_the_history_shows_the_journal_newest_first_or_why_not() -> None:
    view = views.history({"metadata": {"name": "s"}}, now=NOW, journal=JOURNAL)
    assert view["journal"]["store"] == "s3://agentrun/p/ns/uid"
    assert view["journal"]["commits"] == {"2": "1 (5000 bytes)", "1": "2"}
    lines = views.render_history(view)
    start = next(i for i, line in enumerate(lines) if line.startswith("Journal "))
    assert lines[start] == ("Journal s3://agentrun/p/ns/uid (commits: attempt 2: 1 (5000 "
                            "bytes), attempt 1: 2), newest first:")
    assert lines[start + 1].split() == ["ATTEMPT", "SEQ", "KIND", "KEY", "BYTES", "STORED"]
    assert lines[start + 2].split() == ["2", "1", "step-result", "turn-3", "5000", "object"]
    assert lines[start + 3].split()[2:4] == ["effect-intent", "mail.intent"]
    assert lines[-1] == "  ... older entries not shown (--limit)"
    refused = views.render_history(views.history(
        {"metadata": {"name": "s"}}, now=NOW, journal={"error": "you may not read it: no"}))
    assert refused[-1] == "Journal: not shown: you may not read it: no"
    # A run without a journal (its records on Leases): nothing about one is shown.
    plain = views.history({"metadata": {"name": "s"}}, now=NOW,
                          journal={**JOURNAL, "journal": None})
    assert plain["journal"] is None
    assert not any(line.startswith("Journal") for line in views.render_history(plain))


# What someone else wrote, aimed at the reader's terminal: a forged ledger row after a
# newline, a screen clear, a window title, a C1 CSI, and bidi and separator characters.
HOSTILE = ("\n2026-12-01T12:00:00Z  GiveUp  r9  alice  Accepted\x1b[2J\x1b]0;owned\x07\r\t"
           "\x7f\x9b31m\u202eevil\u2066\u2028\ufeff")
SHOWN = ("\\n2026-12-01T12:00:00Z  GiveUp  r9  alice  Accepted\\x1b[2J\\x1b]0;owned\\x07\\r\\t"
         "\\x7f\\x9b31m\\u202eevil\\u2066\\u2028\\ufeff")


def hostile(document: Any) -> Any:
    """``document`` with ``HOSTILE`` after every string (a condition's status kept)."""
    if isinstance(document, str):
        return document + HOSTILE
    if isinstance(document, dict):
        return {hostile(key) if document is LEASES else key:
                value if key == "status" and value in ("True", "False") else hostile(value)
                for key, value in document.items()}
    if isinstance(document, list):
        return [hostile(value) for value in document]
    return document


def obeyed(line: str) -> list[str]:
    """The characters of ``line`` a terminal would act on rather than show."""
    return [c for c in line if unicodedata.category(c) in terminal.UNSAFE_CATEGORIES]


LEASES: dict[str, Any] = {"study-research-2": {"spec": {"renewTime": ago(3),
                                                        "holderIdentity": "study-research-2"}}}
SLOTS = [slot("study-write-1", "write"),
         slot("study-research-1", "research", ENDED, LIVE, state="Active",
              workerClass="gpu", activeWorker="study-research-2",
              launchSpec={"name": "gpu-workers", "generation": 3},
              conditions=[{"type": "Held", "status": "True"}],
              commands=[{"requestId": "r1", "kind": "Hold", "actor": "alice",
                         "outcome": "Accepted", "predicate": "NotOwner", "workerClass": "gpu",
                         "reason": "look", "message": "held", "time": ago(100)}])]


def test_the_tree_escapes_every_value_and_json_keeps_them_exact() -> None:
    plain = views.render_tree(views.tree(run("Pinned"), SLOTS, now=NOW, leases=LEASES))
    view = views.tree(hostile(run("Pinned")), hostile(SLOTS), now=NOW,
                      leases=hostile(LEASES))
    lines = views.render_tree(view)
    assert len(lines) == len(plain)  # no value started a line of its own
    assert [obeyed(line) for line in lines] == [[] for _ in lines]
    live = view["slots"][0]["attempts"][1]  # (a hostile time has no age: "-")
    assert live["leaseNote"] == f"renewed - ago by study-research-2{HOSTILE}"
    assert f"(renewed - ago by study-research-2{SHOWN})" in lines[4]
    for shown in ("AgentRun team-a" + SHOWN + "/study" + SHOWN, "node research" + SHOWN,
                  "class gpu" + SHOWN, "owner alice" + SHOWN, "reason: the lease expired"
                  + SHOWN, "[Held" + SHOWN + "]", "spec gpu-workers" + SHOWN + "@3"):
        assert any(shown in line for line in lines), shown
    assert view["slots"][0]["attempts"][0]["reason"] == "the lease expired" + HOSTILE
    assert json.loads(json.dumps(view)) == view and "\x1b" not in json.dumps(view)


def test_the_history_escapes_every_cell_and_keeps_its_columns() -> None:
    plain = views.render_history(views.history(SLOTS[1], now=NOW))
    view = views.history(hostile(SLOTS[1]), now=NOW)
    lines = views.render_history(view)
    assert len(lines) == len(plain)
    assert [obeyed(line) for line in lines] == [[] for _ in lines]
    header, row = lines[lines.index("Commands:") + 1:]
    assert row.startswith(ago(100) + SHOWN + "  Hold" + SHOWN)
    for title, value in (("ACTOR", "alice"), ("OUTCOME", "Accepted"), ("REASON", "look"),
                         ("MESSAGE", "held")):  # the columns line up on the escaped text
        assert row[header.index(title):].startswith(value + SHOWN), title
    assert view["commands"][0]["message"] == "held" + HOSTILE


@pytest.mark.parametrize(("char", "shown"), [
    ("\x00", "\\x00"), ("\x1b", "\\x1b"), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"),
    ("\x7f", "\\x7f"), ("\x85", "\\x85"), ("\x9b", "\\x9b"), ("\u200b", "\\u200b"),
    ("\u202e", "\\u202e"), ("\u2066", "\\u2066"), ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"), ("\ufeff", "\\ufeff"), ("\U000e0041", "\\U000e0041"),
    ("\ud800", "\\ud800")])
def test_every_control_format_and_separator_character_is_shown_escaped(
        char: str, shown: str) -> None:
    assert terminal.escape(f"a{char}b") == f"a{shown}b"
    assert terminal.escape(terminal.escape(f"a{char}b")) == f"a{shown}b"  # twice: the same


@pytest.mark.parametrize("text", ["plain", "caf\u00e9 \u65e5\u672c", "a\\x1b b", "", " "])
def test_printable_text_is_left_as_written(text: str) -> None:
    assert terminal.escape(text) == text


def test_a_records_bytes_are_shown_with_their_digest_checked() -> None:
    data = '{"body":"é","to":"all"}'.encode()
    found = {"key": "publish.payload", "attempt": 1, "kind": "step-result",
             "digest": hashlib.sha256(data).hexdigest(), "data": base64.b64encode(data).decode()}
    shown = views.record(found)
    assert shown["verified"] and shown["text"] == data.decode() and shown["size"] == len(data)
    assert "its bytes match the journal's digest" in views.render_record(shown)[0]
    altered = views.record({**found, "digest": "0" * 64})
    assert not altered["verified"] and not altered["journalMatches"]
    assert "DO NOT MATCH the journal's digest" in views.render_record(altered)[0]
    # An effect's payload: verified only if the approval waiting names these bytes too,
    # and the message says which check failed.
    waiting = views.record(found, approval=found["digest"])
    assert waiting["verified"] and "the payload of the approval waiting" in (
        views.render_record(waiting)[0])
    other = views.record(found, approval="1" * 64)
    assert (other["verified"], other["journalMatches"], other["approvalMatches"]) == (
        False, True, False)
    said = views.render_record(other)[0]
    assert "its bytes match the journal's digest" in said
    assert "THE APPROVAL WAITING IS FOR OTHER BYTES: " + "1" * 64 in said
