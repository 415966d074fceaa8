"""One attempt's LangGraph log: its entries committed to the slot's journal, and its index.

The log is the I/O around :mod:`._entries`: it replays the recoverable prefix into an
:class:`~._entries.Index` on first use, and appends an entry by committing its record
(and its value records) through the worker's own ``Steps``, so every write is fenced
exactly as a step is: the head that makes it durable is on the attempt's Lease, and only
that Lease's holder pod can move it, never after the tombstone. A refusal is the lease
lost (:class:`~agentrun.worker.LeaseLost`): the entry is not in the index and can never
become visible to a successor. An entry is checked (:func:`~._entries.check`) before it
is committed, exactly as a successor checks it read back, so no attempt commits an entry
its successors refuse.

A commit that fails otherwise (the store out for longer than the journal retries, the
Lease changed under every try) may still land later (the group commit keeps a record
whose head advance is in doubt), and the index would then say less than the journal: the
log is *broken* and every later call raises :class:`LogBroken`. End the attempt; the
successor replays what is durable.

One log per attempt (:func:`of`), shared by every saver made over the same worker, so two
savers never hand out the same record key.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from agentrun.api import records as api_records
from agentrun.worker import _journalcommits as journalcommits
from agentrun.worker import _keeper as keeper
from agentrun.worker import _prefix as prefix
from agentrun.worker import _records as records
from agentrun.worker.langgraph import _entries as entries

Kind = records.Kind


class LogBroken(records.RecordError):
    """An earlier commit of this attempt's LangGraph log failed in a way that leaves its
    index unsure of the journal: end the attempt (its successor replays the journal)."""


@dataclass(kw_only=True)
class Log:
    """The entries of one attempt (``steps``) over its recoverable prefix."""

    steps: prefix.Steps
    index: entries.Index = field(default_factory=entries.Index)
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _generation: int = field(default=1, init=False)
    _seq: int = field(default=1, init=False)
    _broken: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.steps.ledger, journalcommits.JournalRecords):
            raise records.RecordError(
                "a LangGraph checkpointer commits into the run's journal, and this run was "
                "pinned without one (the operator has no journal store configured)")
        with self.steps.lock:
            committed = dict(self.steps.prefix.committed)
        for key in entries.order(committed):
            self.index.apply(self._entry(committed[key]))
        self._generation = entries.next_generation(committed)

    @property
    def attempt(self) -> int:
        return self.steps.prefix.attempt

    def _entry(self, record: records.Record) -> dict[str, Any]:
        try:
            return entries.check(records.payload(record, store=self.steps.store))
        except entries.EntryError as bad:
            raise records.RecordError(f"LangGraph entry {record.key}: {bad}") from None

    def _key(self, *, value: bool = False) -> str:
        key = entries.key(generation=self._generation, seq=self._seq, value=value)
        self._seq += 1
        return key

    @contextmanager
    def _changing(self) -> Iterator[None]:
        """One change under the lock: a refusal raised as the lease lost, any other failure
        breaking the log (see the module docstring)."""
        with self.lock:
            if self._broken is not None:
                raise LogBroken(self._broken)
            try:
                yield
            except entries.EntryError:
                raise  # refused before anything was committed
            except records.RecordRefused as refused:
                self._broken = f"a checkpoint write was refused: {refused}"
                raise keeper.LeaseLost(self._broken) from refused
            except Exception as failed:
                self._broken = (f"this attempt's LangGraph log is broken: a commit failed "
                                f"({type(failed).__name__}: {failed}); end the attempt")
                raise

    def append(self, entry: dict[str, Any], *, durable: bool) -> None:
        """Commit ``entry`` (``durable``: it is durable on return; else staged, durable
        within the group commit's delay) and apply it to the index."""
        with self._changing():
            entries.check(entry)
            self._commit(self._key(), entry, durable=durable)
            self.index.apply(entry)

    def put(self, entry: dict[str, Any], *,
            values: Mapping[str, tuple[entries.Version, entries.Typed | None]],
            durable: bool = True) -> None:
        """Commit a ``put`` entry (``durable``: on return; else staged) with its channel
        values: each at most
        :data:`~._entries.INLINE_VALUE_BYTES` inline in it, a larger one in a value record
        of its own staged first (so the entry never names a value that is not stored)."""
        with self._changing():
            entries.check({**entry, "blobs": {}})
            blobs: dict[str, list[Any]] = {}
            for channel, (version, value) in values.items():
                if value is None:
                    blobs[channel] = [version, entries.EMPTY]
                elif len(value.data) <= entries.INLINE_VALUE_BYTES:
                    blobs[channel] = [version, value.to_json()]
                else:
                    key = self._key(value=True)
                    self._commit(key, value.to_json(), durable=False)
                    blobs[channel] = [version, entries.blob_json(entries.Ref(key))]
            entry = entries.check({**entry, "blobs": blobs})
            self._commit(self._key(), entry, durable=durable)
            self.index.apply(entry)

    def _commit(self, key: str, payload: api_records.JSON, *, durable: bool) -> None:
        """Make the record (a payload out of a record's bounds is an ``EntryError``:
        nothing committed, the log not broken), then commit or stage it."""
        try:
            record = records.make(key=key, kind=Kind.CHECKPOINT, attempt=self.attempt,
                                  payload=payload, store=self.steps.store)
        except records.StoreUnavailable:
            raise
        except records.RecordError as bad:
            raise entries.EntryError(f"LangGraph record {key}: {bad}") from None
        self.steps.commit(record, durable=durable)

    def value(self, ref: entries.Ref) -> entries.Typed:
        """A channel value kept in a value record (read from the journal's store)."""
        found = self.steps.prefix.get(ref.key)
        if found is None:
            raise records.RecordError(f"LangGraph value record {ref.key} is named by a "
                                      "checkpoint but not committed")
        try:
            return entries.Typed.from_json(records.payload(found, store=self.steps.store),
                                           what=f"value record {ref.key}")
        except entries.EntryError as bad:
            raise records.RecordError(str(bad)) from None


# By the id of the attempt's Steps (a dataclass: not hashable). A log lives as long as a
# saver holds it; one made again later replays this attempt's own entries too (they are in
# its view of the prefix) and goes on after the last of them. The global lock guards the
# table only: a replay (reads from the store) holds its own attempt's lock, not everyone's.
_logs: weakref.WeakValueDictionary[int, Log] = weakref.WeakValueDictionary()
_making: dict[int, threading.Lock] = {}
_table = threading.Lock()


def of(steps: prefix.Steps) -> Log:
    """The one log of the attempt whose ``steps`` these are (replayed on first use)."""
    with _table:
        found = _logs.get(id(steps))
        if found is not None and found.steps is steps:
            return found
        making = _making.setdefault(id(steps), threading.Lock())
    with making:
        with _table:
            found = _logs.get(id(steps))
            if found is not None and found.steps is steps:
                return found
        try:
            made = Log(steps=steps)
            with _table:
                _logs[id(steps)] = made
        finally:
            with _table:
                _making.pop(id(steps), None)
        return made
