"""The journal's pure parts: the head's text, a node's bytes and what a reader accepts, the
pinned location from the environment, and how the recoverable prefix joins an attempt's
journal records with those on its Lease (trusted by the same rule). Against a real S3
server: tests/integration/test_journal_store.py; on the node:
tests/integration/node/test_journal.py."""

from __future__ import annotations

from typing import Any

import pytest

from agentrun.api import names
from agentrun.objectstore import ObjectStore
from agentrun.worker import _journal as journal
from agentrun.worker import _prefix as prefix
from agentrun.worker import _records as records

Kind = records.Kind


def record(key: str, value: Any, *, attempt: int = 1) -> records.Record:
    return records.make(key=key, kind=Kind.STEP_RESULT, attempt=attempt, payload=value)


def test_a_head_reads_back_and_malformed_ones_are_refused() -> None:
    head = journal.Head(seq=42, digest="ab" * 32)
    assert head.text() == f"0000000042-{'ab' * 32}"
    assert journal.Head.parse(head.text()) == head
    for bad in ("42-" + "ab" * 32, "0000000000-" + "ab" * 32, "0000000001-" + "AB" * 32,
                "0000000001-" + "ab" * 31, "x" * 10_000):
        with pytest.raises(records.RecordError, match="is not <10-digit seq>-<sha256>"):
            journal.Head.parse(bad)


def test_a_node_is_read_only_as_the_commit_its_name_and_place_say() -> None:
    first = journal.node(attempt=3, seq=1, prev=None, entries=[record("a", [1], attempt=3)])
    name = records.digest(first)
    prev, entries = journal.read_node(first, attempt=3, seq=1, digest=name)
    assert prev is None and [e.key for e in entries] == ["a"] and entries[0].inline == [1]
    second = journal.node(attempt=3, seq=2, prev=name, entries=[record("b", "x", attempt=3)])
    assert journal.read_node(second, attempt=3, seq=2, digest=records.digest(second))[0] == name
    cases = [(first, dict(attempt=3, seq=1, digest="0" * 64), "does not match its digest"),
             (first, dict(attempt=4, seq=1, digest=name), "is not commit 1 of attempt 4"),
             (first, dict(attempt=3, seq=2, digest=name), "is not commit 2 of attempt 3"),
             (b"nope", dict(attempt=3, seq=1, digest=records.digest(b"nope")), "is not JSON")]
    for data, where, why in cases:
        with pytest.raises(records.RecordError, match=why):
            journal.read_node(data, **where)  # type: ignore[arg-type]
    # a record claiming another attempt inside a node is refused like one on a Lease
    forged = journal.node(attempt=3, seq=1, prev=None, entries=[record("a", 1, attempt=2)])
    with pytest.raises(records.RecordError):
        journal.read_node(forged, attempt=3, seq=1, digest=records.digest(forged))


def test_the_location_comes_from_the_pinned_environment() -> None:
    assert journal.Location.from_env({}) is None
    env = {names.ENV_JOURNAL_ENDPOINT: "http://10.96.0.83:8333",
           names.ENV_JOURNAL_BUCKET: "agentrun-journal",
           names.ENV_JOURNAL_PREFIX: "agentrun/ns/uid-1"}
    found = journal.Location.from_env(env)
    assert found == journal.Location(endpoint="http://10.96.0.83:8333",
                                     bucket="agentrun-journal", prefix="agentrun/ns/uid-1")
    with pytest.raises(records.RecordError, match=names.ENV_JOURNAL_PREFIX):
        journal.Location.from_env({k: v for k, v in env.items()
                                   if k != names.ENV_JOURNAL_PREFIX})


class Chains:
    """Stands in for the store's reads only: the prefix's joining rule is what is tested."""

    def __init__(self, found: dict[int, dict[str, records.Record]]) -> None:
        self.found = found
        self.asked: list[int] = []

    def chain(self, *, attempt: int, head: Any,
              leave: Any = None) -> tuple[dict[str, records.Record], list[str]]:
        self.asked.append(attempt)
        return self.found.get(attempt, {}), []


def lease(attempt: int, *, head: str | None, sealed: bool = True,
          bound: str | None = None, pod_uid: str | None = None) -> dict[str, Any]:
    annotations: dict[str, str] = {}
    if head is not None:
        annotations[names.JOURNAL_HEAD_ANNOTATION] = head
    if sealed:
        annotations[names.OUTCOME_ANNOTATION] = "Failed"
    if bound is not None:
        annotations[names.HOLDER_UID_ANNOTATION] = bound
    if pod_uid is not None:
        annotations[names.POD_UID_ANNOTATION] = pod_uid
    return {"metadata": {"name": f"s-{attempt}", "labels": {names.ATTEMPT_LABEL: str(attempt)},
                         "annotations": annotations},
            "spec": {"holderIdentity": None if sealed else f"s-{attempt}"}}


def test_journal_records_of_trusted_attempts_join_the_prefix() -> None:
    head = journal.Head(seq=1, digest="c" * 64).text()
    chains = Chains({1: {"a": record("a", 1)}, 2: {"b": record("b", 2, attempt=2)},
                     3: {"c": record("c", 3, attempt=3)}, 4: {"d": record("d", 4, attempt=4)}})
    leases = [lease(1, head=head),
              lease(2, head=head, bound="stranger", pod_uid="own"),  # another pod wrote it
              lease(3, head=head, sealed=False),  # not yet fenced
              lease(4, head=head, sealed=False)]  # the reader's own
    found = prefix.prefix(leases=leases, attempt=4, journal=chains)
    assert sorted(found.committed) == ["a", "d"]
    assert found.unsealed == (3,) and chains.asked == [1, 4]


def test_a_head_with_no_journal_to_read_it_repeats_those_steps_and_says_so() -> None:
    head = journal.Head(seq=5, digest="c" * 64).text()
    found = prefix.prefix(leases=[lease(1, head=head), lease(2, head=None, sealed=False)],
                          attempt=2)
    assert found.committed == {}
    assert found.problems == ("attempt 1 committed 5 time(s) to a journal, and this attempt "
                              "has none configured to read it: those steps are repeated",)
    bad = prefix.prefix(leases=[lease(1, head="junk")], attempt=2, journal=Chains({}))
    assert bad.committed == {} and "is not <10-digit seq>-<sha256>" in bad.problems[0]


def test_a_store_error_report_that_did_not_land_is_made_again() -> None:
    """Told once each way; a report that failed (False) is told again at the next try's
    outcome, and a journal that starts out failing (its predecessor's error on the Lease)
    clears it at the first answer."""
    calls: list[str | None] = []
    landed = [False, True, True]

    def report(error: str | None) -> bool:
        calls.append(error)
        return landed.pop(0)

    store = ObjectStore(endpoint="http://127.0.0.1:9", bucket="unused", credentials=lambda: None)
    found = journal.Journal(objects=store, prefix="p", slot="s", report=report)
    for _ in range(3):
        found.tell("down")
    found.tell(None)
    found.tell(None)
    assert calls == ["down", "down", None] and not found.failing
    cleared: list[str | None] = []
    restarted = journal.Journal(objects=store, prefix="p", slot="s", failing=True,
                                report=lambda e: cleared.append(e) or True)
    restarted.tell(None)
    assert cleared == [None]
