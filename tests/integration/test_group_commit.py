"""Group commit against a real S3 server (a loopback SeaweedFS), the Lease a dict.

What is claimed (``agentrun.worker._journalcommits``): records staged meanwhile share one
node and one head advance; a staged record becomes durable by itself within the delay; a
commit (an effect's record) makes everything staged before it durable in the staging
order; a batch is cut at a node's bounds; a flush whose answer was lost is settled without
writing its records twice; a refusal is final; past the staged bound a stage waits for
its flush; closing flushes. The real API server's side (writes per step, admission of the
head) is in tests/integration/operator/test_group_commit_lease.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agentrun import rest
from agentrun.api import journalnodes
from agentrun.objectstore import ObjectStore
from agentrun.worker import _journal as journal
from agentrun.worker import _journalcommits as journalcommits
from agentrun.worker import _prefix as prefix
from agentrun.worker import _records as records
from tests.integration.test_journal_store import LostAnswer
from tests.support.s3fixtures import endpoint, slot_journal
from tests.support.s3server import free_ports
from tests.support.waiting import wait_for
from tests.unit.worker.test_records import FakeApi, lease

Kind = records.Kind
__all__ = ["endpoint", "slot_journal"]  # fixtures taken from tests/support/s3fixtures.py
LONG = journalcommits.MAX_DELAY_SECONDS  # nothing flushes by itself within a test's asserts




@pytest.fixture
def opened() -> Iterator[list[journalcommits.JournalRecords]]:
    """Every committer a test makes, closed after it (its background thread ended)."""
    made: list[journalcommits.JournalRecords] = []
    yield made
    for ledger in made:
        ledger._closed = True  # not close(): a test may have left it refused or failing
        with ledger._changed:
            ledger._changed.notify_all()


def committer(found: journal.Journal, api: Any, opened: list[journalcommits.JournalRecords],
              *, delay: float = LONG) -> journalcommits.JournalRecords:
    ledger = journalcommits.JournalRecords(journal=found, delay=delay, lease=records.LeaseRecords(
        api=api, namespace="ns", lease="s-1", attempt=1))
    opened.append(ledger)
    return ledger


def step(key: str, value: Any = 1) -> records.Record:
    return records.make(key=key, kind=Kind.STEP_RESULT, attempt=1, payload=value)


def head(api: FakeApi) -> journal.Head | None:
    return journal.Head.on_lease(api.body)


def nodes(found: journal.Journal, api: FakeApi) -> list[list[str]]:
    """The record keys of each node the head reaches, first node first."""
    at, keys = head(api), []
    digest = at.digest if at else None
    for seq in range(at.seq if at else 0, 0, -1):
        assert digest is not None
        data = found.get(f"{found.attempt_key(1)}/{digest}", size=journalnodes.NODE_BYTES)
        digest, entries = journalnodes.read_node(data, attempt=1, seq=seq,
                                                 digest=records.digest(data))
        keys.insert(0, [e.key for e in entries])
    return keys


def chained(found: journal.Journal, api: FakeApi) -> list[str]:
    """The record keys the head reaches, in commit order."""
    return [key for keys in nodes(found, api) for key in keys]


def test_records_staged_meanwhile_share_one_node_and_one_head_advance(
        slot_journal: journal.Journal, opened: list[journalcommits.JournalRecords]) -> None:
    api = FakeApi(lease(1))
    ledger = committer(slot_journal, api, opened)
    for i in range(300):
        ledger.stage(step(f"k{i:03d}", i))
    assert api.patches == [] and head(api) is None  # staged: not yet durable
    ledger.flush()
    assert len(api.patches) == 1
    assert head(api) == journal.Head(seq=1, digest=head(api).digest)  # type: ignore[union-attr]
    assert chained(slot_journal, api) == [f"k{i:03d}" for i in range(300)]
    assert journal.Usage.on_lease(api.body) == journal.Usage(records=300, bytes=sum(
        step(f"k{i:03d}", i).size for i in range(300)))
    ledger.flush()  # nothing staged: nothing written
    assert len(api.patches) == 1


def test_a_staged_record_becomes_durable_by_itself_within_the_delay(
        slot_journal: journal.Journal, opened: list[journalcommits.JournalRecords]) -> None:
    api = FakeApi(lease(1))
    ledger = committer(slot_journal, api, opened, delay=0.2)
    ledger.stage(step("a"))
    ledger.stage(step("b"))
    wait_for(lambda: ledger.staged == [], timeout=10, message="the batch flushed by itself")
    assert chained(slot_journal, api) == ["a", "b"] and 1 <= len(api.patches) <= 2


def test_with_no_delay_every_record_is_durable_on_return(
        slot_journal: journal.Journal, opened: list[journalcommits.JournalRecords]) -> None:
    api = FakeApi(lease(1))
    ledger = committer(slot_journal, api, opened, delay=0)
    for key in ("a", "b", "c"):
        ledger.stage(step(key))
        assert ledger.staged == [] and chained(slot_journal, api)[-1] == key
    assert head(api).seq == 3  # type: ignore[union-attr]


def test_a_commit_that_fails_leaves_nothing_to_be_written_later(
        slot_journal: journal.Journal, opened: list[journalcommits.JournalRecords]) -> None:
    api = FakeApi(lease(1))
    down = journal.Journal(objects=ObjectStore(endpoint=f"http://127.0.0.1:{free_ports(1)[0]}",
                                               bucket="stopped", credentials=lambda: None),
                           prefix=slot_journal.prefix, slot="s", retry_seconds=0.5)
    ledger = committer(down, api, opened)
    ledger.stage(step("a"))
    intent = records.make(key="pay.intent", kind=Kind.EFFECT_INTENT, attempt=1, payload={})
    with pytest.raises(journal.JournalUnavailable):
        ledger.commit(intent)  # "a" could not be flushed first: the intent is not taken
    assert [r.key for r in ledger.staged] == ["a"]
    with pytest.raises(journal.JournalUnavailable):
        ledger.stage(step("b"))  # after a failure a stage flushes first: "b" not taken
    ledger.journal = slot_journal  # the store answers again
    ledger.flush()
    assert chained(slot_journal, api) == ["a"]


def test_asking_durable_for_a_staged_step_flushes_it(
        slot_journal: journal.Journal, opened: list[journalcommits.JournalRecords]) -> None:
    api = FakeApi(lease(1))
    steps = prefix.Steps(prefix=prefix.Prefix(attempt=1),
                         ledger=committer(slot_journal, api, opened))
    steps.step("a", do=lambda: 1, durable=False)
    assert head(api) is None
    assert steps.step("a", do=lambda: 2, durable=True) == 1  # skipped, and now durable
    assert chained(slot_journal, api) == ["a"]


def test_a_commit_makes_everything_staged_before_it_durable_in_order(
        slot_journal: journal.Journal, opened: list[journalcommits.JournalRecords]) -> None:
    api = FakeApi(lease(1))
    ledger = committer(slot_journal, api, opened)
    ledger.stage(step("a"))
    ledger.stage(step("b"))
    intent = records.make(key="pay.intent", kind=Kind.EFFECT_INTENT, attempt=1, payload={})
    assert ledger.commit(intent) == intent  # returns durable: one node, staging's order
    assert chained(slot_journal, api) == ["a", "b", "pay.intent"] and len(api.patches) == 1
    ledger.stage(step("c"))
    ledger.close()  # the attempt's end flushes
    assert chained(slot_journal, api) == ["a", "b", "pay.intent", "c"]
    assert ledger._flusher is not None and not ledger._flusher.is_alive()
    with pytest.raises(records.RecordError, match="the worker has stopped"):
        ledger.stage(step("d"))  # nothing would flush it after the end: refused, not lost


def node_sizes(found: journal.Journal, api: FakeApi) -> list[int]:
    return [len(keys) for keys in nodes(found, api)]


def test_a_batch_is_cut_at_a_nodes_entries(
        slot_journal: journal.Journal, opened: list[journalcommits.JournalRecords]) -> None:
    api = FakeApi(lease(1))
    ledger = committer(slot_journal, api, opened)
    count = journalnodes.NODE_ENTRIES + 100
    for i in range(count):
        ledger.stage(step(f"k{i:04d}", i))
    ledger.flush()
    # A node's worth is flushed at once (by the background thread, not after the delay);
    # the rest in one or two more nodes, depending on when that flush read the staged.
    sizes = node_sizes(slot_journal, api)
    assert sizes[0] == journalnodes.NODE_ENTRIES and sum(sizes) == count, sizes
    assert len(api.patches) == len(sizes) <= 3
    assert chained(slot_journal, api) == [f"k{i:04d}" for i in range(count)]


class Gated(FakeApi):
    """A Lease whose head patches wait for ``gate``: a flush that takes its time."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(body)
        self.gate = threading.Event()

    def request(self, method: str, path: str, *, body: Any = None, query: Any = None,
                content_type: str = rest.JSON) -> dict[str, Any]:
        if method == "PATCH":
            self.gate.wait(timeout=60)
        return super().request(method, path, body=body, query=query,
                               content_type=content_type)


def test_past_the_staged_bound_a_stage_waits_for_its_flush(
        slot_journal: journal.Journal, opened: list[journalcommits.JournalRecords]) -> None:
    api = Gated(lease(1))
    ledger = committer(slot_journal, api, opened)
    bound = journalcommits.STAGED_RECORDS
    returned: list[int] = []

    def stage_all() -> None:
        for i in range(bound + 10):
            ledger.stage(step(f"k{i:04d}"))
            returned.append(i)

    staging = threading.Thread(target=stage_all, daemon=True)
    staging.start()
    # The first node's flush (a node's worth staged) waits at the gate; the steps go on
    # until the bound, and the stage after it waits for a flush before it is taken.
    wait_for(lambda: len(returned) == bound and len(ledger.staged) == bound,
             timeout=30, message="the stages up to the bound returned, the next one waits")
    assert staging.is_alive() and api.patches == []
    api.gate.set()
    staging.join(timeout=60)
    assert not staging.is_alive() and len(returned) == bound + 10
    ledger.flush()
    assert chained(slot_journal, api) == [f"k{i:04d}" for i in range(bound + 10)]


def test_a_flush_whose_answer_was_lost_is_settled_without_writing_it_twice(
        slot_journal: journal.Journal, opened: list[journalcommits.JournalRecords]) -> None:
    api = LostAnswer(lease(1))
    ledger = committer(slot_journal, api, opened)
    ledger.stage(step("a"))
    ledger.stage(step("b"))
    api.lose = 1
    with pytest.raises(Exception, match="504"):
        ledger.flush()  # landed, but the answer was lost
    assert ledger.staged != []
    ledger.stage(step("c"))  # after a failure a stage flushes first: the Lease read first
    assert [r.key for r in ledger.staged] == ["c"]  # "a" and "b" landed: not written again
    ledger.flush()
    assert head(api).seq == 2 and chained(slot_journal, api) == ["a", "b", "c"]  # type: ignore[union-attr]
    assert journal.Usage.on_lease(api.body) == journal.Usage(records=3, bytes=3)


def test_a_refusal_is_final(
        slot_journal: journal.Journal, opened: list[journalcommits.JournalRecords]) -> None:
    api = FakeApi(lease(1), refuse=403)
    ledger = committer(slot_journal, api, opened)
    ledger.stage(step("a"))
    with pytest.raises(records.RecordRefused, match="denied"):
        ledger.flush()
    api.refuse = None  # even were it accepted now: a refused attempt commits nothing more
    with pytest.raises(records.RecordRefused):
        ledger.stage(step("b"))
    with pytest.raises(records.RecordRefused):
        ledger.flush()
    assert head(api) is None


def test_a_bad_delay_is_refused_with_its_bounds() -> None:
    for bad in (-0.1, journalcommits.MAX_DELAY_SECONDS + 1, float("nan")):
        with pytest.raises(ValueError, match=r"a commit delay is 0\.\.10 seconds"):
            journalcommits.check_delay(bad)
    assert journalcommits.check_delay(0) == 0


class SilentOnce(LostAnswer):
    """A lost PATCH answer (``lose``), then ``silent`` reads that get no answer."""

    silent = 0

    def request(self, method: str, path: str, *, body: Any = None, query: Any = None,
                content_type: str = rest.JSON) -> dict[str, Any]:
        if method == "GET" and self.silent:
            self.silent -= 1
            raise rest.ApiError(503, "{}")
        return super().request(method, path, body=body, query=query,
                               content_type=content_type)


def test_a_commit_behind_an_unsettled_advance_is_not_kept_when_it_raises(
        slot_journal: journal.Journal, opened: list[journalcommits.JournalRecords]) -> None:
    api = SilentOnce(lease(1))
    ledger = committer(slot_journal, api, opened)
    ledger.stage(step("a"))
    api.lose = 1
    with pytest.raises(rest.ApiError):
        ledger.flush()  # "a"'s advance: its answer lost
    api.silent = 1
    intent = records.make(key="pay.intent", kind=Kind.EFFECT_INTENT, attempt=1, payload={})
    with pytest.raises(rest.ApiError):
        ledger.commit(intent)  # the Lease cannot be read to settle "a": the intent raises
    assert [r.key for r in ledger.staged] == ["a"]  # and is not kept: "a"'s advance is not its
    ledger.flush()
    assert chained(slot_journal, api) == ["a"]


def test_an_advance_settled_twice_removes_its_records_once(
        slot_journal: journal.Journal, opened: list[journalcommits.JournalRecords]) -> None:
    api = FakeApi(lease(1))
    ledger = committer(slot_journal, api, opened)
    first = (step("a"), step("b"))
    for record in first:
        ledger.stage(record)
    ledger.flush()
    ledger.stage(step("c"))
    # As if interrupted after its records left the staged, before it stopped being pending.
    ledger.pending = (ledger.head, ledger.usage, first)  # type: ignore[assignment]
    ledger.flush()
    assert chained(slot_journal, api) == ["a", "b", "c"] and head(api).seq == 2  # type: ignore[union-attr]
