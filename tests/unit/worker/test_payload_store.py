"""A successor reads a payload stored by reference only from its own store, within the
record's size, and anything it cannot use is a ``RecordError``: the step is repeated (as
docs/worker-sdk.md says), never crashed on. Real files under ``tmp_path``, a real
``file://`` fsspec store.

Covers: a reference to another scheme, outside the store (``file:///dev/zero``, a path
that climbs out with ``..``) or not one of its names; a name of the store that is not a
regular file (a FIFO, a link to ``/dev/zero``: never read, so never waited on; replaced
when the payload is put), and one that holds more than the record says (read no further
than that size); bytes that match the
digest but are not UTF-8, not JSON or nested deeper than a record may hold; a record
whose size is over the bound is malformed; a payload over the bound is refused when made.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from agentrun.api import bounds
from agentrun.worker import _prefix as prefix
from agentrun.worker import _records as records

from .sidecarfakes import Memory

Kind = records.Kind


def by_reference(*, ref: str, data: bytes, size: int | None = None) -> records.Record:
    """A predecessor's record of ``data`` stored at ``ref``, as its Lease would hold it."""
    record = records.Record(attempt=1, digest=records.digest(data), key="report",
                            kind=Kind.STEP_RESULT, ref=ref,
                            size=len(data) if size is None else size)
    return records.decode(annotation=record.annotation, value=records.encode(record),
                          attempt=1)


def successor_step(record: records.Record, store: records.FsspecStore) -> prefix.Steps:
    """Attempt 2 over ``record``: its step must be repeated (done again, committed anew)."""
    steps = prefix.Steps(prefix=prefix.Prefix(attempt=2, committed={"report": record}),
                         ledger=Memory(), store=store)
    assert steps.step("report", do=lambda: {"again": True}) == {"again": True}
    assert steps.repeated == ["report"] and steps.done == []
    return steps


@pytest.fixture
def store(tmp_path: Path) -> records.FsspecStore:
    return records.FsspecStore(f"file://{tmp_path}/store")


def foreign(tmp_path: Path, sha: str) -> list[str]:
    return [f"nosuch://bucket/sha256/{sha}", "file:///dev/zero",
            f"file://{tmp_path}/store/sha256/../../elsewhere/{sha}",
            f"file://{tmp_path}/store-other/sha256/{sha}",
            f"file://{tmp_path}/store/sha256/{sha}/x", f"memory://store/sha256/{sha}"]


def test_a_reference_outside_the_store_is_not_read(
        tmp_path: Path, store: records.FsspecStore) -> None:
    data = b'{"a":1}'
    sha = records.digest(data)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / sha).write_bytes(data)  # readable, intact, not the store's
    for ref in foreign(tmp_path, sha):
        record = by_reference(ref=ref, data=data, size=100)
        with pytest.raises(records.RecordError, match="is not this store's"):
            records.payload(record, store=store)
        successor_step(record, store)


def test_a_name_of_the_store_is_read_no_further_than_the_record_says(
        tmp_path: Path, store: records.FsspecStore) -> None:
    data = b"0" * 100
    sha = records.digest(data)
    (tmp_path / "store" / "sha256").mkdir(parents=True)
    (tmp_path / "store" / "sha256" / sha).write_bytes(data + b"0")
    record = by_reference(ref=f"{store.base}/sha256/{sha}", data=data)
    with pytest.raises(records.RecordError, match="holds more than the 100 bytes"):
        records.payload(record, store=store)
    successor_step(record, store)


def within(seconds: float, action: Callable[[], object]) -> None:
    """Run ``action`` in a thread; it must be done within ``seconds`` (a FIFO opened for
    reading would wait for a writer that never comes)."""
    thread = threading.Thread(target=action, daemon=True)
    thread.start()
    thread.join(timeout=seconds)
    assert not thread.is_alive(), "it waited on a name of the store that is no file"


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_name_of_the_store_that_is_no_regular_file_is_not_read(
        tmp_path: Path, store: records.FsspecStore, kind: str) -> None:
    data = b"0" * 100
    sha = records.digest(data)
    name = tmp_path / "store" / "sha256" / sha
    name.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(name)
    else:
        os.symlink("/dev/zero", name)
    record = by_reference(ref=f"{store.base}/sha256/{sha}", data=data)
    raised: list[Exception] = []

    def read() -> None:
        try:
            records.payload(record, store=store)
        except Exception as error:  # asserted below: the kind and the message
            raised.append(error)

    within(5, read)
    assert len(raised) == 1 and isinstance(raised[0], records.RecordError)
    assert "is not a regular file" in str(raised[0])
    within(5, lambda: successor_step(record, store))


def test_a_payload_put_where_a_fifo_is_replaces_it(
        tmp_path: Path, store: records.FsspecStore) -> None:
    data = b"0" * 100
    sha = records.digest(data)
    name = tmp_path / "store" / "sha256" / sha
    name.parent.mkdir(parents=True)
    os.mkfifo(name)
    within(5, lambda: store.put(sha256=sha, data=data))
    assert name.is_file() and name.read_bytes() == data


@pytest.mark.parametrize(("data", "why"), [
    (b"\xff\xfe\x00not text", "is not JSON"), (b"{not json", "is not JSON"),
    (b"[" * 1000 + b"]" * 1000, f"at most {bounds.PAYLOAD_DEPTH} levels"),
])
def test_bytes_that_match_the_digest_but_are_no_payload_are_a_record_error(
        store: records.FsspecStore, data: bytes, why: str) -> None:
    ref = store.put(sha256=records.digest(data), data=data)
    record = by_reference(ref=ref, data=data)
    with pytest.raises(records.RecordError, match=why):
        records.payload(record, store=store)
    successor_step(record, store)


def test_sizes_are_bounded_both_ways(store: records.FsspecStore) -> None:
    oversize = records.Record.model_construct(  # as a worker without the SDK could write
        attempt=1, digest="0" * 64, key="report", kind=Kind.STEP_RESULT,
        ref=f"{store.base}/sha256/{'0' * 64}", size=bounds.PAYLOAD_BYTES + 1)
    with pytest.raises(records.RecordError,
                       match=f"(?s)is malformed.*a payload is at most {bounds.PAYLOAD_BYTES}"):
        records.decode(annotation=oversize.annotation, value=records.encode(oversize),
                       attempt=1)
    huge = "x" * bounds.PAYLOAD_BYTES
    with pytest.raises(records.RecordError, match=f"at most {bounds.PAYLOAD_BYTES}"):
        records.make(key="report", kind=Kind.STEP_RESULT, attempt=1, payload=huge,
                     store=store)
    assert not (Path(store.base.removeprefix("file://")) / "sha256").exists()  # nothing put
    fits = {"text": "x" * (2 * bounds.INLINE_PAYLOAD_BYTES)}
    made = records.make(key="report", kind=Kind.STEP_RESULT, attempt=1, payload=fits,
                        store=store)
    assert records.payload(by_reference(ref=made.ref or "", data=records.canonical(fits)),
                           store=store) == fits
