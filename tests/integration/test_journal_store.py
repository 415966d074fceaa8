"""The journal's committer and reader against a real S3 server (a loopback SeaweedFS).

The Lease is a dict here (tests/unit/worker/test_records.py's FakeApi: what admission
does with the head is shown on the real node, tests/integration/node/test_journal.py);
what is claimed is what the store holds and what a reader makes of it: commits read back
in order, a head advance whose answer was lost is settled from the Lease, a name taken
first by other content is not committed over, the operator's records are never taken
from a journal, and a missing node or a silent store stops the read (never a shorter
prefix), and a store stopped mid-commit is retried, told once each way (its start and its
end), and the commit lands once it answers again.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentrun import rest
from agentrun.api import names
from agentrun.objectstore import ObjectStore
from agentrun.worker import _journal as journal
from agentrun.worker import _journalcommits as journalcommits
from agentrun.worker import _records as records
from tests.support.s3fixtures import endpoint, slot_journal
from tests.support.s3server import PORT_COUNT, free_ports, running_s3
from tests.support.waiting import wait_for
from tests.unit.worker.test_records import FakeApi, lease

Kind = records.Kind
__all__ = ["endpoint", "slot_journal"]  # fixtures taken from tests/support/s3fixtures.py



def committer(found: journal.Journal, api: Any, *,
              attempt: int = 1) -> journalcommits.JournalRecords:
    return journalcommits.JournalRecords(journal=found, lease=records.LeaseRecords(
        api=api, namespace="ns", lease=f"s-{attempt}", attempt=attempt))


def step(key: str, value: Any, *, store: journal.JournalPayloads) -> records.Record:
    return records.make(key=key, kind=Kind.STEP_RESULT, attempt=1, payload=value, store=store)


def test_commits_read_back_from_the_head_with_payloads_by_reference(
        slot_journal: journal.Journal) -> None:
    api = FakeApi(lease(1))
    ledger = committer(slot_journal, api)
    payloads = slot_journal.payloads(attempt=1)
    big = "x" * (2 * 1024 * 1024)
    for i in range(30):
        ledger.commit(step(f"k{i}", big if i == 7 else i, store=payloads))
    ledger.commit(step("k3", "again", store=payloads))  # a later commit of a key wins
    head = journal.Head.on_lease(api.body)
    assert head == ledger.head and head is not None and head.seq == 31
    found, problems = slot_journal.chain(attempt=1, head=head)
    assert problems == [] and len(found) == 30
    assert records.payload(found["k7"], store=payloads) == big
    assert found["k3"].inline == "again" and found["k29"].inline == 29
    assert not [k for k in api.body["metadata"]["annotations"] if k.startswith(records.PREFIX)]


class LostAnswer(FakeApi):
    """Applies a PATCH, then answers as if the connection broke (``lose`` of them)."""

    lose = 0

    def request(self, method: str, path: str, *, body: Any = None, query: Any = None,
                content_type: str = rest.JSON) -> dict[str, Any]:
        answer = super().request(method, path, body=body, query=query,
                                 content_type=content_type)
        if method == "PATCH" and self.lose:
            self.lose -= 1
            raise rest.ApiError(504, "{}")
        return answer


def test_a_head_advance_whose_answer_was_lost_is_settled_by_the_next_commit(
        slot_journal: journal.Journal) -> None:
    api = LostAnswer(lease(1))
    ledger = committer(slot_journal, api)
    payloads = slot_journal.payloads(attempt=1)
    ledger.commit(step("a", 1, store=payloads))
    api.lose = 1
    with pytest.raises(rest.ApiError):
        ledger.commit(step("b", 2, store=payloads))  # landed, but the answer was lost
    ledger.commit(step("c", 3, store=payloads))
    head = journal.Head.on_lease(api.body)
    assert head is not None and head.seq == 3
    found = slot_journal.chain(attempt=1, head=head)[0]
    assert sorted(found) == ["a", "b", "c"]
    # The usage beside the head counts exactly what it reaches, the lost answer's too.
    assert journal.Usage.on_lease(api.body) == journal.Usage(
        records=3, bytes=sum(r.size for r in found.values()))


def test_a_name_taken_by_other_content_is_not_committed_over(
        slot_journal: journal.Journal) -> None:
    api = FakeApi(lease(1))
    ledger = committer(slot_journal, api)
    record = step("a", 1, store=slot_journal.payloads(attempt=1))
    data = journal.node(attempt=1, seq=1, prev=None, entries=[record])
    squatted = f"{slot_journal.attempt_key(1)}/{records.digest(data)}"
    assert slot_journal.objects.put(squatted, b"not the node", if_none_match=True)
    with pytest.raises(records.RecordError, match="taken by other content"):
        ledger.commit(record)
    assert journal.HEAD not in api.body["metadata"]["annotations"]


def test_the_operators_records_are_never_taken_from_a_journal(
        slot_journal: journal.Journal) -> None:
    ledger = committer(slot_journal, FakeApi(lease(1)))
    forged = step(f"pay{names.RESOLVED_SUFFIX}", {"answer": "applied"},
                  store=slot_journal.payloads(attempt=1))
    with pytest.raises(records.RecordError, match="is the operator's"):
        ledger.commit(forged)
    # written straight into a node (a worker not using the SDK): stored, never trusted
    data = journal.node(attempt=1, seq=1, prev=None, entries=[forged])
    slot_journal.put_once(f"{slot_journal.attempt_key(1)}/{records.digest(data)}", data)
    found, problems = slot_journal.chain(
        attempt=1, head=journal.Head(seq=1, digest=records.digest(data)))
    assert found == {} and "trusted only on the Lease" in problems[0]


def test_a_missing_node_or_a_silent_store_stops_the_read(
        slot_journal: journal.Journal, endpoint: str) -> None:
    api = FakeApi(lease(1))
    ledger = committer(slot_journal, api)
    for key in ("a", "b", "c"):
        ledger.commit(step(key, key, store=slot_journal.payloads(attempt=1)))
    assert ledger.head is not None
    middle = journal.read_node(slot_journal.get(
        f"{slot_journal.attempt_key(1)}/{ledger.head.digest}", size=journal.NODE_BYTES),
        attempt=1, seq=3, digest=ledger.head.digest)[0]
    slot_journal.objects.delete(f"{slot_journal.attempt_key(1)}/{middle}")
    with pytest.raises(journal.JournalDamaged, match="commit 2 of 3"):
        slot_journal.chain(attempt=1, head=ledger.head)
    (port,) = free_ports(1)  # nothing listens there
    silent = journal.Journal(
        objects=ObjectStore(endpoint=f"http://127.0.0.1:{port}", bucket="nothing",
                            credentials=lambda: None, timeout=1),
        prefix=slot_journal.prefix, slot="s", retry_seconds=1)
    with pytest.raises(journal.JournalUnavailable, match="did not answer"):
        silent.chain(attempt=1, head=ledger.head)


def test_the_first_commit_makes_a_missing_bucket(endpoint: str) -> None:
    objects = ObjectStore(endpoint=endpoint, bucket=f"n-{uuid.uuid4().hex[:12]}",
                          credentials=lambda: None)
    assert not objects.exists("anything")  # nothing there, not even the bucket
    empty = journal.Journal(objects=objects, prefix="agentrun/ns/uid", slot="s", retry_seconds=1)
    api = FakeApi(lease(1))
    committer(empty, api).commit(step("a", 1, store=empty.payloads(attempt=1)))
    head = journal.Head.on_lease(api.body)
    assert head is not None and sorted(empty.chain(attempt=1, head=head)[0]) == ["a"]


class Counting(FakeApi):
    gets = 0

    def request(self, method: str, path: str, *, body: Any = None, query: Any = None,
                content_type: str = rest.JSON) -> dict[str, Any]:
        self.gets += method == "GET"
        return super().request(method, path, body=body, query=query, content_type=content_type)


def test_a_commit_costs_one_api_call_while_nothing_else_writes_the_lease(
        slot_journal: journal.Journal) -> None:
    api = Counting(lease(1), conflicts=0)
    ledger = committer(slot_journal, api)
    for i in range(5):
        ledger.commit(step(f"k{i}", i, store=slot_journal.payloads(attempt=1)))
    assert (api.gets, len(api.patches)) == (1, 5)  # the first commit reads the Lease once
    api.conflicts = 1  # a renewal lands between two commits: one 409, one read, one patch
    ledger.commit(step("k5", 5, store=slot_journal.payloads(attempt=1)))
    assert (api.gets, len(api.patches)) == (2, 7)
    head = journal.Head.on_lease(api.body)
    assert head is not None and head.seq == 6


def test_a_store_stopped_mid_commit_is_told_once_each_way_and_the_commit_lands(
        tmp_path: Path) -> None:
    at = free_ports(PORT_COUNT)
    told: list[str | None] = []
    api = FakeApi(lease(1))
    with running_s3(tmp_path, at=at) as url:
        objects = ObjectStore(endpoint=url, bucket="stopped", credentials=lambda: None,
                              timeout=1)
        objects.ensure_bucket()
        stopping = journal.Journal(objects=objects, prefix="agentrun/ns/uid", slot="s",
                                   retry_seconds=120, report=lambda e: told.append(e) or True)
        ledger = committer(stopping, api)
        ledger.commit(step("a", 1, store=stopping.payloads(attempt=1)))
    failures: list[BaseException] = []

    def commit() -> None:
        try:
            ledger.commit(step("b", "b" * 5000, store=stopping.payloads(attempt=1)))
        except BaseException as error:  # reported by the assert below
            failures.append(error)

    thread = threading.Thread(target=commit)
    thread.start()
    wait_for(lambda: told, timeout=30, message="the store's error told")
    assert told[0] is not None and "storing agentrun/ns/uid/s/1/sha256/" in told[0], told
    assert journal.Head.on_lease(api.body) == journal.Head(seq=1, digest=ledger.head.digest)
    with running_s3(tmp_path, at=at):
        thread.join(timeout=90)
        assert not thread.is_alive() and failures == []
        assert told[1:] == [None], told  # once each way, however many tries failed
        head = journal.Head.on_lease(api.body)
        assert head is not None and head.seq == 2
        found, _ = stopping.chain(attempt=1, head=head)
        assert records.payload(found["b"], store=stopping.payloads(attempt=1)) == "b" * 5000
