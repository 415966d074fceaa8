"""Group commit: an attempt's records into its journal, many to one head advance.

Terms (the journal's own, :mod:`agentrun.worker._journal`, are a *node* and the *head*):

- a record is *staged* once this attempt has taken it into its own view of the prefix (a
  later step of the attempt sees it) and before any node the head names holds it;
- it is *durable* once a node the head on the Lease names holds it: what a successor trusts;
- a *flush* writes every staged record (up to a node's bounds) as one node and advances the
  head once; a *commit* is a stage and a flush, so it returns durable.

Why: a head advance is a write to the API server (admission, storage); an agent that
commits a step per model turn, or a loop of small steps, must not pay one per step, nor
wait on one. A staged record is flushed by a background thread at most :attr:`delay`
seconds after the first record of its batch was staged (sooner once a node's worth is
staged), and at once wherever durability is needed (:meth:`JournalRecords.flush`): before
an effect's call (its intent is committed, with everything staged before it), with its
outcome, at the attempt's end and on SIGTERM (``Worker.stop``). What a crash within the
delay costs is the staged steps, which the successor repeats, as a step must allow anyway;
never an effect's record. Order is kept: the chain has one order, that of staging.

A batch that could not be flushed stays staged and is tried again: by the background thread
after a pause while the failure is one that passes (the store silent, an answer lost),
and by the next stage, which flushes first so its caller learns of the failure (its own
record not taken) and memory stays bounded (a step waits through an outage as a commit
did before). A record whose commit raised is dropped, never written later (an effect's
intent must not become durable when its call was not attempted), unless its head
advance's answer was lost: then it may have landed, and the next flush settles which.
A refusal (the Lease no longer this attempt's) is final: every later stage and flush
raises it. After the attempt's end (:meth:`JournalRecords.close`) nothing is staged.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from agentrun import rest
from agentrun.api import bounds, names
from agentrun.api.journalnodes import NODE_BYTES, NODE_ENTRIES, Head, Usage, node
from agentrun.worker import _records as records
from agentrun.worker._journal import HEAD, Journal

# The longest a staged record waits for its flush. An agent's step takes a model turn
# (seconds); a quarter of a second keeps what a crash can cost to a fraction of one step
# while a loop of small steps shares one head advance among all it stages meanwhile.
DEFAULT_DELAY_SECONDS = 0.25
MAX_DELAY_SECONDS = 10.0  # a lease lasts 15 s by default: a batch must fit well inside it
RETRY_PAUSE_SECONDS = 1.0  # the background thread's pause after a flush that failed
# Records the operator reads without store credentials: they go on the Lease, not the journal
# (an unresolved effect, a question, a request for approval: each leaves the attempt waiting
# for a person, and the operator must see it). The worker's share of the records a reader
# trusts only on a Lease (names.LEASE_ONLY_SUFFIXES); the rest are the operator's.
ON_LEASE = tuple(s for s in names.LEASE_ONLY_SUFFIXES if s not in names.OPERATOR_SUFFIXES)
# Staged records at most: past this a stage flushes itself, so a flush slower than the
# steps (a store outage) holds the steps back instead of growing what a crash would lose.
STAGED_RECORDS = 4 * NODE_ENTRIES
# A node holds at most NODE_ENTRIES records and NODE_BYTES of canonical JSON; a batch is cut
# at either, with room to spare for the node's own fields.
BATCH_BYTES = NODE_BYTES - 64 * 1024
log = logging.getLogger(__name__)


def check_delay(seconds: float) -> float:
    """``seconds`` if it is a group-commit delay (0 = every record durable on return)."""
    if not 0 <= seconds <= MAX_DELAY_SECONDS:
        raise ValueError(f"a commit delay is 0..{MAX_DELAY_SECONDS:g} seconds (0: every "
                         f"record durable on return), not {seconds!r}")
    return seconds


def _entry_bytes(record: records.Record) -> int:
    """What ``record`` adds to a node: its encoding as a JSON string in the node's list."""
    return len(records.canonical(records.encode(record))) + 1


@dataclass(kw_only=True)
class JournalRecords:
    """The committer of an attempt whose run has a journal.

    Records go into nodes of the attempt's chain and are made durable by advancing the head
    on the Lease (a merge patch carrying the ``resourceVersion`` read; a 409 re-reads).
    Records the operator must read without store credentials stay on the Lease (``lease``,
    :data:`ON_LEASE`): an effect's ``.unresolved`` record, a question's ``.question`` and a
    request for approval's ``.approval`` (the slot shows them).
    Flushes are serialized (``lock``): a chain has one order.
    """

    journal: Journal
    lease: records.LeaseRecords
    head: Head | None = None
    # What :attr:`head` reaches, on the Lease too; None: not counted (a head from a worker
    # that kept no usage: counting from here would say less than is there).
    usage: Usage | None = field(default_factory=Usage)
    delay: float = DEFAULT_DELAY_SECONDS
    # A head advance (its usage, and the staged records its node holds) not known to have
    # landed or not: from before its request until the staged are updated.
    pending: tuple[Head, Usage | None, tuple[records.Record, ...]] | None = None
    seen: dict[str, Any] | None = field(default=None, repr=False)  # the Lease as last answered
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    staged: list[records.Record] = field(default_factory=list, repr=False)
    # Each staged record's bytes as a node entry (measured once, when staged) and their
    # sum, the monotonic time the oldest staged record waits since, and the failure of the
    # last flush (``refused``: final).
    _sizes: list[int] = field(default_factory=list, repr=False)
    _bytes: int = field(default=0, repr=False)
    _since: float | None = field(default=None, repr=False)
    _failure: Exception | None = field(default=None, repr=False)
    _refused: Exception | None = field(default=None, repr=False)
    _changed: threading.Condition = field(default_factory=threading.Condition, repr=False)
    _flusher: threading.Thread | None = field(default=None, repr=False)
    _closed: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        check_delay(self.delay)

    def commit(self, record: records.Record) -> records.Record:
        """``record`` durable on return, after everything staged before it (one batch), or
        this raises and it is not committed (unless the answer to its head advance was lost:
        then, as ever, it may have landed, and the next flush settles which)."""
        if record.key.endswith(ON_LEASE):
            self.flush()  # what came before it first: the chain's order is the attempt's
            return self.lease.commit(record)
        self._check(record)
        with self.lock:  # no background flush between this record's staging and its end
            try:
                self._append(record)  # last: its batch ends the flush below
                self._flush_staged(upto=record)
            except BaseException:
                with self._changed:  # not written (unless its own advance is pending)
                    if self.pending is None or not any(r is record for r in self.pending[2]):
                        self._drop(record)
                raise
        return record

    def stage(self, record: records.Record) -> records.Record:
        """Take ``record`` into the next node: durable within :attr:`delay` seconds (or at
        the next :meth:`flush`). After a flush that failed, or with :data:`STAGED_RECORDS`
        staged, this flushes first (and raises what that raises, the record not taken): a
        caller learns of an outage at its next record, and waits for a slow store."""
        self._check(record)
        if self.delay == 0:
            return self.commit(record)
        with self._changed:
            if self._refused is not None:
                raise self._refused
            waits = self._failure is not None or len(self.staged) >= STAGED_RECORDS
        if waits:  # an outage, or a flush slower than the steps: the caller waits
            self.flush()
        self._append(record)
        return record

    def flush(self) -> None:
        """Make every record staged so far durable, in order: one node and one head advance
        per batch (usually one). Raises the failure; what failed stays staged."""
        with self.lock:
            self._flush_staged()

    def _flush_staged(self, *, upto: records.Record | None = None) -> None:
        """:meth:`flush` under :attr:`lock`: every staged record, or those up to ``upto``
        (itself included; none if it is no longer staged)."""
        with self._changed:
            if self._refused is not None:
                raise self._refused
            count = len(self.staged) if upto is None else next(
                (at + 1 for at, r in enumerate(self.staged) if r is upto), 0)
        if count == 0 and self.pending is not None:
            self._flush_batch(limit=0)  # a lost answer: settled now, not at the next record
        while count > 0:
            count -= self._flush_batch(limit=count)

    def _append(self, record: records.Record) -> None:
        with self._changed:
            if self._refused is not None:
                raise self._refused
            if self._closed:  # nothing would flush it: say so rather than lose it
                raise records.RecordError(f"record {record.key}: the worker has stopped (the "
                                          "attempt's end): nothing more is committed")
            size = _entry_bytes(record)
            self.staged.append(record)
            self._sizes.append(size)
            self._bytes += size
            if self._since is None:
                self._since = time.monotonic()
            self._start()
            self._changed.notify_all()

    def _drop(self, record: records.Record) -> None:
        """Take ``record`` out of the staged (under :attr:`_changed`): never written."""
        for at, staged in enumerate(self.staged):
            if staged is record:
                del self.staged[at]
                self._bytes -= self._sizes.pop(at)
                break
        if not self.staged:
            self._since = None

    def close(self) -> None:
        """The attempt's end: nothing more is staged, what is gets flushed, and the
        background thread ends."""
        with self._changed:
            self._closed = True  # first: a record staged from now on is refused, not lost
            self._changed.notify_all()
        try:
            self.flush()
        finally:
            if self._flusher is not None and self._flusher is not threading.current_thread():
                self._flusher.join(timeout=MAX_DELAY_SECONDS)

    def _check(self, record: records.Record) -> None:
        if record.key.endswith(names.OPERATOR_SUFFIXES):
            raise records.RecordError(f"record {record.key}: a <key>{names.RESOLVED_SUFFIX}, "
                                      f"<key>{names.ANSWERED_SUFFIX} or "
                                      f"<key>{names.APPROVED_SUFFIX} record is the "
                                      "operator's (people's answer or decision); a worker "
                                      "cannot commit one")
        if record.attempt != self.lease.attempt:
            raise records.RecordError(f"record {record.key} is of attempt {record.attempt}; "
                                      f"this worker is attempt {self.lease.attempt}")
        if record.key.endswith(ON_LEASE):
            raise records.RecordError(f"record {record.key} goes on the Lease: commit it")

    def _flush_batch(self, *, limit: int) -> int:
        """Write the oldest staged records (at most ``limit``, and a node's bounds) as one
        node and advance the head to it; how many are now durable. Under :attr:`lock`.

        The advance is :attr:`pending` from before its request until the state says it
        landed: whatever ends this midway (an error, a lost answer, SIGTERM's SystemExit
        in the main thread), the next flush reads the Lease and settles it, never taking
        a head it advanced itself for another writer's."""
        try:
            if self.pending is not None:
                landed = self._settle()
                if landed or limit == 0:
                    return self._done(landed)  # the records of its node: durable
            with self._changed:
                batch: list[records.Record] = []
                size = 0
                for record, entry in zip(self.staged[:min(limit, NODE_ENTRIES)], self._sizes,
                                         strict=False):
                    size += entry
                    if batch and size > BATCH_BYTES:
                        break
                    batch.append(record)
            attempt = self.lease.attempt
            seq = (self.head.seq if self.head else 0) + 1
            data = node(attempt=attempt, seq=seq, prev=self.head.digest if self.head else None,
                        entries=batch)
            new = Head(seq=seq, digest=records.digest(data))
            usage = self.usage
            for record in batch:
                usage = None if usage is None else usage.adding(record)
            self.journal.put_once(f"{self.journal.attempt_key(attempt)}/{new.digest}", data)
            self._advance(new, usage, batch=tuple(batch))
        except (records.RecordRefused, records.RecordConflict) as refused:
            self.pending = None  # an answer: not landed
            with self._changed:
                self._refused = refused
            raise
        except Exception as failed:
            with self._changed:
                self._failure = failed
            raise
        self.head, self.usage = new, usage
        return self._done(tuple(batch))

    def _done(self, batch: tuple[records.Record, ...]) -> int:
        """``batch`` is durable: those of its records still leading the staged leave it,
        and nothing is pending any more (last, so that an interruption here leaves the
        advance to be settled again, which finds them gone and removes nothing else)."""
        with self._changed:
            count = 0
            while (count < len(batch) and count < len(self.staged)
                   and self.staged[count] is batch[count]):
                count += 1
            self._bytes -= sum(self._sizes[:count])
            del self.staged[:count], self._sizes[:count]
            if not self.staged:
                self._since = None
            self._failure = None
            self.pending = None
        return count

    def _start(self) -> None:
        """Start the background flusher on the first stage (under :attr:`_changed`)."""
        if self._flusher is None:
            self._flusher = threading.Thread(target=self._flushing, daemon=True,
                                             name=f"journal-flush-{self.lease.lease}")
            self._flusher.start()

    def _due(self) -> float | None:
        """Seconds until the staged batch is due (0: now), None when nothing is staged."""
        if not self.staged:
            return None
        if self._since is None:  # staged, its time not taken (an interrupted append): now
            return 0.0
        if self._failure is not None:  # a pause after a failure, however much is staged
            return max(0.0, self._since + RETRY_PAUSE_SECONDS - time.monotonic())
        if len(self.staged) >= NODE_ENTRIES or self._bytes >= BATCH_BYTES:
            return 0.0
        return max(0.0, self._since + self.delay - time.monotonic())

    def _flushing(self) -> None:
        """The background thread: flush each batch when it is due, until closed."""
        while True:
            with self._changed:
                while not self._closed and self._refused is None and self._due() != 0.0:
                    self._changed.wait(timeout=self._due())
                if self._closed or self._refused is not None:
                    return
            try:
                self.flush()
            except Exception as failed:  # kept for the next stage; tried again after a pause
                log.warning("journal flush of Lease %s failed (tried again): %s",
                            self.lease.lease, failed)
                with self._changed:
                    self._since = time.monotonic()

    def _settle(self) -> tuple[records.Record, ...]:
        """After a head advance that did not end as known: the Lease says whether it
        landed; the staged records it made durable (none: they are flushed again)."""
        assert self.pending is not None
        head, usage, batch = self.pending
        current = Head.on_lease(self.lease.api.request("GET", self.lease.path))
        if current != head:
            self.pending = None
            return ()
        self.head, self.usage = head, usage
        return batch

    def _advance(self, new: Head, usage: Usage | None, *,
                 batch: tuple[records.Record, ...] = ()) -> None:
        """Move the head on the Lease from :attr:`head` to ``new`` (and the usage with it),
        :attr:`pending` (with the ``batch`` its node holds) from before the request on: a
        write whose answer is lost (a timeout, a 5xx, an interruption) may have landed,
        and the next flush reads the Lease first."""
        self.pending = (new, usage, batch)
        self._patch(new, usage)

    def _patch(self, new: Head, usage: Usage | None) -> None:
        """One merge patch of the head under the ``resourceVersion`` of the Lease as last
        seen: the previous commit's answer (so a commit costs one API call while nothing
        else wrote the Lease), else a fresh read; a 409 (a renewal meanwhile) reads again."""
        path = self.lease.path
        for _ in range(records.CONFLICT_RETRIES):
            lease, self.seen = self.seen or self.lease.api.request("GET", path), None
            try:
                current = Head.on_lease(lease)
            except records.RecordError as error:
                raise records.RecordConflict(str(error)) from None
            if current == new:
                return
            if current != self.head:
                raise records.RecordRefused(
                    f"{HEAD} of Lease {self.lease.lease} is {current and current.text()}, not "
                    f"{self.head and self.head.text()} as this attempt left it: another writer "
                    "of this attempt's journal; nothing more is committed")
            metadata = lease.get("metadata") or {}
            body = {"metadata": {"resourceVersion": metadata.get("resourceVersion"),
                                 "annotations": {HEAD: new.text(), **(
                                     {} if usage is None else usage.annotations())}}}
            try:
                answer = self.lease.api.request("PATCH", path, body=body,
                                                content_type=rest.MERGE_PATCH)
            except rest.ApiError as error:
                if error.status == 409:
                    continue
                if error.status in (403, 422):
                    raise records.RecordRefused(f"commit {new.seq} refused: "
                                                f"{bounds.clip(error.message)}") from None
                raise
            self.seen = answer
            return
        raise records.RecordError(f"commit {new.seq}: the Lease changed under each of "
                                  f"{records.CONFLICT_RETRIES} attempts to advance its head")
