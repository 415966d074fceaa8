"""``JournalSaver``: LangGraph's checkpointer interface over the slot's journal.

    with Worker.from_env() as worker:
        graph = builder.compile(checkpointer=JournalSaver(worker))
        graph.invoke(inputs, {"configurable": {"thread_id": "main"}}, durability="sync")

What LangGraph asks of a checkpointer (``BaseCheckpointSaver``) is answered from the
attempt's log (:mod:`._log`): reads from its index, in memory, a channel value kept in a
value record fetched from the journal's store when a checkpoint is read; writes as log
entries. ``put`` (a superstep's checkpoint) returns once it is durable; ``put_writes`` (a
task's writes inside a superstep) is staged and made durable with the next ``put`` or
within the worker's group-commit delay, so a superstep costs one head advance. The async
methods run the same code in a thread: the SDK's writes are blocking calls.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from agentrun.worker import _sdk as sdk
from agentrun.worker.langgraph import _entries as entries
from agentrun.worker.langgraph import _log


class JournalSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer whose every write is an entry in the slot's journal, fenced
    by the attempt's Lease: a stale attempt's write raises
    :class:`~agentrun.worker.LeaseLost` and never reaches a successor. A successor made
    over the next attempt's worker sees every thread as the last durable entry left it.

    Threads (and their checkpoint namespaces) are namespaces inside the one slot journal.
    Deletes (``delete_thread``, ``delete_for_runs``, ``prune``) and ``copy_thread`` are
    entries too: the index forgets or shares, and nothing is removed from the store but by
    retention. ``serde`` is LangGraph's serializer (its default: ``JsonPlusSerializer``).
    """

    def __init__(self, worker: sdk.Worker, *, serde: SerializerProtocol | None = None,
                 group_commit: bool = False) -> None:
        """``group_commit``: a ``put`` returns once staged, and is durable within the
        worker's commit delay (one head advance for every checkpoint meanwhile), before
        any effect's call, question or the attempt's end; a crash repeats the supersteps
        of that window. Off (the default): every ``put`` returns durable."""
        super().__init__(serde=serde)
        self.worker = worker
        self.group_commit = group_commit
        self._log: _log.Log | None = None

    @property
    def log(self) -> _log.Log:
        """The attempt's log, replayed from its recoverable prefix on first use."""
        if self._log is None:
            self._log = _log.of(self.worker.steps)
        return self._log

    # Reads ---------------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread, ns = _thread(config), _ns(config)
        log = self.log
        with log.lock:
            checkpoint = get_checkpoint_id(config) or log.index.latest(thread, ns)
            saved = log.index.checkpoints.get(thread, {}).get(ns, {}).get(checkpoint or "")
            if checkpoint is None or saved is None:
                return None
            return self._tuple(log, thread=thread, ns=ns, checkpoint=checkpoint, saved=saved)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None,
             limit: int | None = None) -> Iterator[CheckpointTuple]:
        """Newest first within each namespace of each thread (``config``'s thread, else
        every thread), as LangGraph's own savers list."""
        log = self.log
        with log.lock:
            found = list(self._listed(log, config=config, filter=filter, before=before,
                                      limit=limit))
        yield from found

    def _listed(self, log: _log.Log, *, config: RunnableConfig | None,
                filter: dict[str, Any] | None, before: RunnableConfig | None,
                limit: int | None) -> Iterator[CheckpointTuple]:
        threads = [_thread(config)] if config else list(log.index.checkpoints)
        only_ns = config["configurable"].get("checkpoint_ns") if config else None
        only_id = get_checkpoint_id(config) if config else None
        below = get_checkpoint_id(before) if before else None
        left = limit
        for thread in threads:
            for ns, saved in list(log.index.checkpoints.get(thread, {}).items()):
                if only_ns is not None and ns != only_ns:
                    continue
                for checkpoint in sorted(saved, reverse=True):
                    if (only_id and checkpoint != only_id) or (below and checkpoint >= below):
                        continue
                    metadata = self.serde.loads_typed(_pair(saved[checkpoint].metadata))
                    if filter and not all(metadata.get(k) == v for k, v in filter.items()):
                        continue
                    if left is not None:
                        if left <= 0:
                            return
                        left -= 1
                    yield self._tuple(log, thread=thread, ns=ns, checkpoint=checkpoint,
                                      saved=saved[checkpoint], metadata=metadata)

    def _tuple(self, log: _log.Log, *, thread: str, ns: str, checkpoint: str,
               saved: entries.Saved, metadata: Any = None) -> CheckpointTuple:
        body: Checkpoint = self.serde.loads_typed(_pair(saved.checkpoint))
        values: dict[str, Any] = {}
        for channel, version in body["channel_versions"].items():
            blob = log.index.blobs.get((thread, ns, channel, version))
            if blob is None or blob == entries.EMPTY:
                continue
            typed = log.value(blob) if isinstance(blob, entries.Ref) else blob
            assert isinstance(typed, entries.Typed)
            values[channel] = self.serde.loads_typed(_pair(typed))

        def config_of(at: str) -> RunnableConfig:
            return {"configurable": {"thread_id": thread, "checkpoint_ns": ns,
                                     "checkpoint_id": at}}

        return CheckpointTuple(
            config=config_of(checkpoint),
            checkpoint={**body, "channel_values": values},
            metadata=metadata if metadata is not None else self.serde.loads_typed(
                _pair(saved.metadata)),
            parent_config=config_of(saved.parent) if saved.parent else None,
            pending_writes=[(w.task, w.channel, self.serde.loads_typed(_pair(w.value)))
                            for w in log.index.ordered_writes(thread, ns, checkpoint)])

    # Writes --------------------------------------------------------------------------------

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Commit the checkpoint, durably, before returning (with every write staged
        before it): the successor of an attempt that dies after this returns resumes from
        it, or from a later one. With :attr:`group_commit`, staged only (see
        ``__init__``)."""
        thread, ns = _thread(config), _ns(config)
        body: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = body.pop("channel_values")
        full = get_checkpoint_metadata(config, metadata)
        run = full.get("run_id")
        self.log.put({
            "op": "put", "thread": thread, "ns": ns, "id": checkpoint["id"],
            "parent": config["configurable"].get("checkpoint_id"),
            "run": None if run is None else str(run),
            "checkpoint": self._typed(body).to_json(),
            "metadata": self._typed(full).to_json(),
            "versions": dict(checkpoint["channel_versions"])},
            values={channel: (version, self._typed(values[channel]) if channel in values
                              else None) for channel, version in new_versions.items()},
            durable=not self.group_commit)
        return {"configurable": {"thread_id": thread, "checkpoint_ns": ns,
                                 "checkpoint_id": checkpoint["id"]}}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:
        """Stage a task's writes (durable with the next ``put``, or within the worker's
        group-commit delay; a successor of an attempt that died before runs the task
        again). Staged, they are in this attempt's index at once; a stale attempt's are
        refused when they are flushed, raised (``LeaseLost``) by its next call."""
        self.log.append(entries.writes_entry(
            thread=_thread(config), ns=_ns(config),
            checkpoint=config["configurable"]["checkpoint_id"], task=task_id, path=task_path,
            writes=[(WRITES_IDX_MAP.get(channel, i), channel, self._typed(value))
                    for i, (channel, value) in enumerate(writes)]),
            durable=False)

    def delete_thread(self, thread_id: str) -> None:
        """Forget the thread (a durable entry; its records stay until retention)."""
        thread = _id(thread_id, what="a thread id")
        if self._has(thread):
            self.log.append({"op": "delete-thread", "thread": thread}, durable=True)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Forget every checkpoint (and its writes) whose metadata names one of these runs."""
        runs = entries.check_ids(run_ids, what="run id")
        with self.log.lock:
            found = any(saved.run in runs
                        for spaces in self.log.index.checkpoints.values()
                        for by_id in spaces.values() for saved in by_id.values())
        if found:
            self.log.append({"op": "delete-runs", "runs": runs}, durable=True)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Give ``target`` every checkpoint and write of ``source`` (one entry: the values
        are shared, never copied)."""
        source = _id(source_thread_id, what="a thread id")
        target = _id(target_thread_id, what="a thread id")
        if self._has(source):
            self.log.append({"op": "copy-thread", "from": source, "to": target},
                            durable=True)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: only each namespace's newest checkpoint stays (with its writes
        and the values it names); ``delete``: the threads are forgotten. ``keep_latest`` of
        a thread with a ``DeltaChannel`` is refused (``NotImplementedError``, as LangGraph's
        Postgres saver does): the channel's state lives in the writes of the ancestors it
        would drop."""
        if strategy not in entries.STRATEGIES:
            raise ValueError(f"prune strategy {str(strategy)[:40]!r}: one of "
                             f"{', '.join(entries.STRATEGIES)}")
        threads = [t for t in entries.check_ids(thread_ids, what="thread id") if self._has(t)]
        if strategy == "keep_latest":
            with self.log.lock:
                deltas = [t for t in threads if self._delta(t)]
            if deltas:
                raise NotImplementedError(
                    f"prune(keep_latest) of thread {deltas[0][:80]!r}: it has a DeltaChannel, "
                    "whose state lives in the writes of the ancestors a prune would drop; "
                    "use strategy='delete', or keep the thread")
        if threads:
            self.log.append({"op": "prune", "threads": threads, "strategy": strategy},
                            durable=True)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """A version after ``current``: its counter plus one, then a random fraction (two
        branches of a thread never name different values by one version), as
        LangGraph's in-memory saver."""
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    def _has(self, thread: str) -> bool:
        with self.log.lock:
            return self.log.index.has(thread)

    def _delta(self, thread: str) -> bool:
        """Whether a checkpoint of ``thread`` counts updates since a ``DeltaChannel``'s
        snapshot (LangGraph's metadata ``counters_since_delta_snapshot``)."""
        return any("counters_since_delta_snapshot" in self.serde.loads_typed(
                       _pair(saved.metadata))
                   for spaces in self.log.index.checkpoints.get(thread, {}).values()
                   for saved in spaces.values())

    def _typed(self, value: Any) -> entries.Typed:
        kind, data = self.serde.dumps_typed(value)
        return entries.Typed(kind, data)

    # Async: the same, in a thread ----------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *,
                    filter: dict[str, Any] | None = None, before: RunnableConfig | None = None,
                    limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(lambda: list(self.list(
            config, filter=filter, before=before, limit=limit)))
        for item in found:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


def _id(value: Any, *, what: str) -> str:
    """An id as LangGraph's savers take it: a string, or a number as its text."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    return entries.check_id(value, what=what)


def _thread(config: RunnableConfig) -> str:
    """The thread ``config`` names (LangGraph's ``thread_id``)."""
    return _id(config["configurable"]["thread_id"], what="a thread id")


def _ns(config: RunnableConfig) -> str:
    """The checkpoint namespace ``config`` names ('' for the root graph)."""
    return entries.check_id(config["configurable"].get("checkpoint_ns", ""),
                            what="a checkpoint namespace")


def _pair(typed: entries.Typed) -> tuple[str, bytes]:
    """``typed`` as LangGraph's serializer takes it back."""
    return typed.type, typed.data
