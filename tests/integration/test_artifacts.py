"""Artifacts streamed into a journal on a real S3 server (a loopback SeaweedFS), the Lease a
dict (tests/unit/worker/test_records.py's FakeApi).

Covers ``agentrun.worker._artifacts``: a 40 MiB stream is stored in parts, committed
durably as one ``artifact`` record (size and sha256 of what was streamed) and read back
whole, as a stream and as a file; a successor skips a committed artifact without reading
its source, and stores it again when the object is gone; a replaced object is refused at
the end of its read; a download interrupted half-way resumes from its ``.part`` file; a
stream over the bound stores nothing and leaves no upload; a run without a journal is
refused with a message.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from agentrun.api import bounds
from agentrun.objectstore import ObjectStore
from agentrun.worker import _artifacts as artifacts
from agentrun.worker import _journal as journal
from agentrun.worker import _journalcommits as journalcommits
from agentrun.worker import _keeper as keeper
from agentrun.worker import _prefix as prefix
from agentrun.worker import _records as records
from agentrun.worker import _renewer as renewer
from agentrun.worker._context import Context
from agentrun.worker._sdk import Worker
from tests.support.faults.cutproxy import CutProxy
from tests.support.s3fixtures import endpoint, slot_journal
from tests.unit.worker.test_records import FakeApi, lease

MIB = 1024 * 1024
__all__ = ["endpoint", "slot_journal"]  # fixtures taken from tests/support/s3fixtures.py




class Generated:
    """``size`` bytes made as they are read (never all in memory), and their sha256."""

    def __init__(self, size: int, *, seed: bytes = b"a") -> None:
        self.size, self.seed, self.given = size, seed, 0
        self.digest = hashlib.sha256()

    def read(self, n: int, /) -> bytes:
        n = min(n, self.size - self.given)
        block = hashlib.sha256(self.seed + str(self.given).encode()).digest() * (n // 32 + 1)
        data = block[:n]
        self.given += n
        self.digest.update(data)
        return data


class Unread:
    def read(self, n: int, /) -> bytes:
        raise AssertionError("a committed artifact's source is never read")


def attempt(slot_journal: journal.Journal, api: FakeApi, number: int,
            committed: dict[str, records.Record] | None = None) -> artifacts.Artifacts:
    ledger = journalcommits.JournalRecords(journal=slot_journal, lease=records.LeaseRecords(
        api=api, namespace="ns", lease=f"s-{number}", attempt=number))  # type: ignore[arg-type]
    steps = prefix.Steps(prefix=prefix.Prefix(attempt=number, committed=committed or {}),
                         ledger=ledger, store=slot_journal.payloads(attempt=number))
    return artifacts.Artifacts(steps=steps, journal=slot_journal)


def test_a_stream_is_stored_in_parts_committed_durably_and_read_back_whole(
        slot_journal: journal.Journal, tmp_path: Path) -> None:
    api = FakeApi(lease(1))
    first = attempt(slot_journal, api, 1)
    source = Generated(40 * MIB + 123)
    stored = first.artifact("weights", source)
    assert (stored.size, stored.sha256) == (source.size, source.digest.hexdigest())
    record = first.steps.prefix.get("weights")
    assert record is not None and record.kind is records.Kind.ARTIFACT
    assert record.ref == f"s3://{slot_journal.objects.bucket}/agentrun/ns/uid/s/1/artifact/weights"
    head = journal.Head.on_lease(api.body)
    assert head is not None and head.seq == 1  # committed durably: the head names it
    found, problems = slot_journal.chain(attempt=1, head=head)
    assert problems == [] and found["weights"] == record
    read = hashlib.sha256()
    for chunk in stored.open():
        assert len(chunk) <= artifacts.CHUNK_BYTES
        read.update(chunk)
    assert read.hexdigest() == stored.sha256
    path = stored.download(tmp_path / "weights.bin")
    assert path.stat().st_size == stored.size
    assert hashlib.sha256(path.read_bytes()).hexdigest() == stored.sha256
    file_source = tmp_path / "again.bin"
    file_source.write_bytes(b"x" * (9 * MIB))
    again = first.artifact("from-a-file", file_source)
    assert again.sha256 == hashlib.sha256(b"x" * (9 * MIB)).hexdigest()


@pytest.mark.parametrize("direction", ["up", "down"])
def test_an_outage_while_streaming_is_told_as_the_journals_then_cleared(
        endpoint: str, slot_journal: journal.Journal, direction: str) -> None:
    """A part (or a read) cut midway is retried as long as the journal's commits would be,
    and the store's error is told to the journal's report (the slot shows it) meanwhile."""
    told: list[str | None] = []
    host, port = endpoint.removeprefix("http://").split(":")
    with CutProxy((host, int(port))) as proxy:
        cut = journal.Journal(
            objects=ObjectStore(endpoint=proxy.url, bucket=slot_journal.objects.bucket,
                                credentials=lambda: None),
            prefix=slot_journal.prefix, slot=slot_journal.slot, retry_seconds=60,
            report=lambda error: told.append(error) is None)
        stored = attempt(cut, FakeApi(lease(1)), 1)
        if direction == "up":
            proxy.arm(direction="up", after=7 * MIB)  # in the second part's body
        made = stored.artifact("weights", Generated(12 * MIB))
        if direction == "down":
            proxy.arm(direction="down", after=5 * MIB)
            read = hashlib.sha256()
            for chunk in made.open():
                read.update(chunk)
            assert read.hexdigest() == made.sha256
        assert proxy.cuts == 1
    what = ("storing artifact agentrun/ns/uid/s/1/artifact/weights: S3 0 -: PUT"
            if direction == "up" else "reading artifact weights: GET agentrun/ns/uid/s/1/")
    assert len(told) == 2 and (told[0] or "").startswith(what) and told[1] is None, told


def test_a_successor_skips_a_committed_artifact_and_stores_a_missing_one_again(
        slot_journal: journal.Journal) -> None:
    api = FakeApi(lease(1))
    first = attempt(slot_journal, api, 1)
    kept = first.artifact("kept", Generated(6 * MIB))
    gone = first.artifact("gone", Generated(1000, seed=b"g"))
    slot_journal.objects.delete(gone.uri.removeprefix(f"s3://{slot_journal.objects.bucket}/"))
    second = attempt(slot_journal, FakeApi(lease(2)), 2,
                     committed=dict(first.steps.prefix.committed))
    assert second.artifact("kept", Unread()) == kept
    again = second.artifact("gone", Generated(1000, seed=b"g"))
    assert again.uri.endswith("/s/2/artifact/gone") and again.sha256 == gone.sha256
    assert (second.steps.done, second.steps.repeated) == (["kept"], ["gone"])


def test_a_replaced_object_is_refused_at_the_end_of_its_read(
        slot_journal: journal.Journal) -> None:
    first = attempt(slot_journal, FakeApi(lease(1)), 1)
    stored = first.artifact("report", Generated(2000))
    name = stored.uri.removeprefix(f"s3://{slot_journal.objects.bucket}/")
    slot_journal.objects.put(name, b"z" * 2000)  # the same size, other bytes
    with pytest.raises(records.RecordError, match="does not match its digest"):
        for _ in stored.open():
            pass


def test_an_interrupted_download_resumes_from_its_part_file_and_drops_a_wrong_one(
        slot_journal: journal.Journal, tmp_path: Path) -> None:
    first = attempt(slot_journal, FakeApi(lease(1)), 1)
    stored = first.artifact("data", Generated(12 * MIB + 7))
    whole = b"".join(stored.open())
    target = tmp_path / "data.bin"
    (tmp_path / "data.bin.part").write_bytes(whole[:5 * MIB])  # what a killed reader left
    assert stored.download(target).read_bytes() == whole
    assert not (tmp_path / "data.bin.part").exists()
    (tmp_path / "data.bin.part").write_bytes(b"not these bytes")  # another file's leftover
    with pytest.raises(records.RecordError, match="does not match its digest"):
        stored.download(target)
    assert not (tmp_path / "data.bin.part").exists()  # thrown away: the next try is whole
    assert stored.download(target).read_bytes() == whole


def test_a_stream_over_the_bound_stores_nothing(
        slot_journal: journal.Journal, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bounds, "ARTIFACT_BYTES", 11 * MIB)
    api = FakeApi(lease(1))
    first = attempt(slot_journal, api, 1)
    with pytest.raises(records.RecordError, match=f"at most {11 * MIB} bytes"):
        first.artifact("huge", Generated(20 * MIB))
    assert first.steps.prefix.get("huge") is None and api.patches == []
    assert slot_journal.objects.list("agentrun/ns/uid/") == []
    assert slot_journal.objects.abort_uploads("agentrun/ns/uid/") == 0  # none left behind


def test_a_run_without_a_journal_is_refused_with_a_message() -> None:
    api: Any = FakeApi(lease(1))
    context = Context(namespace="ns", run="r", run_uid="uid", slot="s", node="n", attempt=1,
                      fencing_token=1, lease="s-1", config_dir=Path("/nonexistent"), pinned={})
    worker = Worker(context=context, api=api, keeper=keeper.Keeper(renewer=renewer.Renewer(
        api=api, namespace="ns", lease="s-1", identity="s-1")))
    worker._steps = prefix.Steps(prefix=prefix.Prefix(attempt=1), ledger=records.LeaseRecords(
        api=api, namespace="ns", lease="s-1", attempt=1))
    with pytest.raises(records.RecordError, match="pinned without one"):
        worker.artifact("weights", Unread())
    assert api.patches == []
