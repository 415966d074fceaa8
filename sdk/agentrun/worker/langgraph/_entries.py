"""A LangGraph thread store as a log of journal entries, and the index the log replays to.

Terms:

- an *entry* is one change to the store, a JSON object committed as one journal record
  (``langgraph.<generation>.<seq>``): ``put`` (a checkpoint: its serialized body without
  channel values, its metadata, its parent, the channel versions it names, and the
  channel values it changed, each inline or in a *value record* of its own,
  ``langgraph.<generation>.<seq>.v``), ``writes``
  (a task's pending writes on a checkpoint), ``delete-thread``, ``delete-runs``,
  ``copy-thread`` and ``prune``;
- a *generation* is one log's run of entries: a log starts the generation after the
  highest in its prefix, so the entries sort in the order they were committed, also in a
  fork (whose attempt 0 holds its source's entries under their own keys, and whose later
  attempts write after them). The keys hold a '.', which a step's key never does: an
  agent's own steps and these records never share a key;
- the *index* is what the entries say now: checkpoints by thread, namespace and id; the
  pending writes of each; the channel values by version. Deletes are entries too: what
  they remove leaves the index, never the journal (physical removal is retention's).

Pure: no I/O and no serializer. A successor rebuilds the index by applying, in order, the
entries of its recoverable prefix, and the attempt that commits an entry applies the very
same entry: one code path, so what a successor sees is what its predecessor saw at that
point of the log. Why a log and not a table rewritten per change: a journal record is
write-once (an attempt's head only moves forward), so a change is an appended record, and
a stale attempt's late entries are unreachable from any trusted head.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

PREFIX: Final = "langgraph"
# What an entry's key looks like: ``langgraph.<generation>.<seq>``; ``.v``: a value record.
KEY: Final = re.compile(r"^langgraph\.([1-9][0-9]{0,5})\.([1-9][0-9]{0,9})(\.v)?$")
ID_CHARS: Final = 1024  # a thread id, a namespace, a checkpoint id, a task id or path, a run id
CHANNEL_CHARS: Final = 256  # a channel's name
IDS_PER_CALL: Final = 1000  # thread or run ids in one delete, prune
INLINE_VALUE_BYTES: Final = 256  # a channel value this small rides in its ``put`` entry
STRATEGIES: Final = ("keep_latest", "delete")
CHANNELS: Final = 10_000  # channels one checkpoint names
Version = str | int | float


class EntryError(ValueError):
    """An entry that cannot be made or read: the message says which bound or field."""


@dataclass(frozen=True)
class Typed:
    """A serializer's ``(type, bytes)``: what LangGraph's ``dumps_typed`` gives."""

    type: str
    data: bytes

    def to_json(self) -> list[str]:
        return [self.type, base64.b64encode(self.data).decode()]

    @classmethod
    def from_json(cls, value: Any, *, what: str) -> Typed:
        if not (isinstance(value, list) and len(value) == 2
                and all(isinstance(v, str) for v in value)):
            raise EntryError(f"{what} must be [type, base64 data]")
        try:
            return cls(value[0], base64.b64decode(value[1], validate=True))
        except ValueError:
            raise EntryError(f"{what}: its data is not base64") from None


@dataclass(frozen=True)
class Ref:
    """A channel value in a value record of its own (fetched when a checkpoint is read)."""

    key: str


EMPTY: Final = "empty"  # a channel whose new version has no value (LangGraph's "empty" blob)
Blob = Typed | Ref | Literal["empty"]


@dataclass(frozen=True)
class Saved:
    """One checkpoint: ``checkpoint`` without its channel values, which are by version in
    :attr:`Index.blobs`; ``versions`` the versions it names (what keeps a value in the
    index); ``run`` is its metadata's ``run_id`` (``delete-runs``)."""

    checkpoint: Typed
    metadata: Typed
    parent: str | None
    run: str | None
    versions: tuple[tuple[str, Version], ...] = ()


@dataclass(frozen=True)
class Write:
    """One pending write of a task on a checkpoint (LangGraph's ``(task, channel,
    value)``, with the task's path, by which LangGraph orders them)."""

    task: str
    channel: str
    value: Typed
    path: str


WriteKey = tuple[str, str, str]  # thread, namespace, checkpoint id
BlobKey = tuple[str, str, str, Version]  # thread, namespace, channel, version


@dataclass
class Index:
    """What the applied entries say now (every mapping is this attempt's own)."""

    checkpoints: dict[str, dict[str, dict[str, Saved]]] = field(default_factory=dict)
    writes: dict[WriteKey, dict[tuple[str, int], Write]] = field(default_factory=dict)
    blobs: dict[BlobKey, Blob] = field(default_factory=dict)

    def apply(self, entry: Mapping[str, Any]) -> None:
        """Change the index as ``entry`` says (one already checked by :func:`check`)."""
        op = entry["op"]
        if op == "put":
            self._put(entry)
        elif op == "writes":
            self._writes(entry)
        elif op == "delete-thread":
            self._forget(entry["thread"])
        elif op == "delete-runs":
            self._delete_runs(set(entry["runs"]))
        elif op == "copy-thread":
            self._copy(entry["from"], entry["to"])
        elif op == "prune":
            for thread in entry["threads"]:
                if entry["strategy"] == "delete":
                    self._forget(thread)
                else:
                    self._keep_latest(thread)

    def latest(self, thread: str, ns: str) -> str | None:
        """The newest checkpoint id of ``thread`` in ``ns`` (ids sort by time: uuid6)."""
        found = self.checkpoints.get(thread, {}).get(ns)
        return max(found) if found else None

    def ordered_writes(self, thread: str, ns: str, checkpoint: str) -> list[Write]:
        """The pending writes of a checkpoint in LangGraph's order (``writes_sort_key``:
        by task path, task id, then index)."""
        stored = self.writes.get((thread, ns, checkpoint), {})
        return [stored[k] for k in sorted(stored, key=lambda k: (stored[k].path, *k))]

    def _put(self, entry: Mapping[str, Any]) -> None:
        thread, ns = entry["thread"], entry["ns"]
        for channel, (version, blob) in entry["blobs"].items():
            self.blobs[(thread, ns, channel, version)] = _blob(blob, what=channel)
        self.checkpoints.setdefault(thread, {}).setdefault(ns, {})[entry["id"]] = Saved(
            checkpoint=Typed.from_json(entry["checkpoint"], what="checkpoint"),
            metadata=Typed.from_json(entry["metadata"], what="metadata"),
            parent=entry["parent"], run=entry["run"],
            versions=tuple(sorted((c, v) for c, v in entry["versions"].items())))

    def _writes(self, entry: Mapping[str, Any]) -> None:
        key = (entry["thread"], entry["ns"], entry["checkpoint"])
        stored = self.writes.setdefault(key, {})
        for index, channel, value in entry["writes"]:
            inner = (entry["task"], index)
            if index >= 0 and inner in stored:
                continue  # a regular write is kept as first written; a special one replaced
            stored[inner] = Write(task=entry["task"], channel=channel, path=entry["path"],
                                  value=Typed.from_json(value, what=f"write {channel}"))

    def _forget(self, thread: str) -> None:
        self.checkpoints.pop(thread, None)
        for key in [k for k in self.writes if k[0] == thread]:
            del self.writes[key]
        for blob in [k for k in self.blobs if k[0] == thread]:
            del self.blobs[blob]

    def _delete_runs(self, runs: set[str]) -> None:
        for thread, spaces in self.checkpoints.items():
            for ns, saved in spaces.items():
                for checkpoint in [c for c, s in saved.items() if s.run in runs]:
                    del saved[checkpoint]
                    self.writes.pop((thread, ns, checkpoint), None)
            self._unnamed(thread)

    def _keep_latest(self, thread: str) -> None:
        """Only the newest checkpoint of each namespace stays, with its pending writes and
        the values it names."""
        for ns, saved in self.checkpoints.get(thread, {}).items():
            newest = max(saved) if saved else None
            for checkpoint in [c for c in saved if c != newest]:
                del saved[checkpoint]
                self.writes.pop((thread, ns, checkpoint), None)
        self._unnamed(thread)

    def _unnamed(self, thread: str) -> None:
        """Forget the values of ``thread`` that no checkpoint of it names any more (the
        index holds no more than its checkpoints need)."""
        named = {(ns, channel, version)
                 for ns, saved in self.checkpoints.get(thread, {}).items()
                 for kept in saved.values() for channel, version in kept.versions}
        for blob in [k for k in self.blobs if k[0] == thread and k[1:] not in named]:
            del self.blobs[blob]

    def has(self, thread: str) -> bool:
        """Whether the index holds anything of ``thread`` (a delete would change it)."""
        return (any(self.checkpoints.get(thread, {}).values())
                or any(k[0] == thread for k in self.writes)
                or any(k[0] == thread for k in self.blobs))

    def _copy(self, source: str, target: str) -> None:
        """``target`` gets every checkpoint, write and value of ``source`` (shared, not
        duplicated: a value record is named, never copied)."""
        for ns, saved in self.checkpoints.get(source, {}).items():
            self.checkpoints.setdefault(target, {}).setdefault(ns, {}).update(saved)
        for (thread, ns, checkpoint), stored in list(self.writes.items()):
            if thread == source:
                self.writes.setdefault((target, ns, checkpoint), {}).update(stored)
        for (thread, ns, channel, version), blob in list(self.blobs.items()):
            if thread == source:
                self.blobs[(target, ns, channel, version)] = blob


def _blob(value: Any, *, what: str) -> Blob:
    if value == EMPTY:
        return EMPTY
    if isinstance(value, dict) and set(value) == {"record"}:
        key = value["record"]
        found = KEY.match(key) if isinstance(key, str) else None
        if found is None or not found.group(3):
            raise EntryError(f"channel {what[:40]!r}: a value record's key is "
                             "langgraph.<generation>.<seq>.v")
        return Ref(key)
    return Typed.from_json(value, what=f"channel {what}")


def blob_json(blob: Blob) -> Any:
    """``blob`` as a ``put`` entry holds it."""
    if isinstance(blob, Ref):
        return {"record": blob.key}
    return EMPTY if blob == EMPTY else blob.to_json()


def check_id(value: Any, *, what: str, chars: int = ID_CHARS) -> str:
    """``value`` if it is a string of at most ``chars`` characters, else why not."""
    if not isinstance(value, str):
        raise EntryError(f"{what} must be a string, not {type(value).__name__}")
    if len(value) > chars:
        raise EntryError(f"{what} is {len(value)} characters long; at most {chars} are allowed")
    return value


def check_ids(values: Iterable[Any], *, what: str) -> list[str]:
    """``values`` as a list of ids (each :func:`check_id`), at most :data:`IDS_PER_CALL`;
    a lone string is refused, not taken for a list of its characters."""
    if isinstance(values, str | bytes):
        raise EntryError(f"{what}s are a list of strings, not one string")
    found: list[str] = []
    for value in values:
        if len(found) == IDS_PER_CALL:
            raise EntryError(f"more than {IDS_PER_CALL} {what}s in one call")
        found.append(check_id(value, what=what))
    return found


def _version(value: Any, *, what: str) -> Version:
    """A channel version LangGraph made: a bounded string or a number (not a boolean)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise EntryError(f"{what}'s version must be a string or a number")
    return check_id(value, what=f"{what}'s version") if isinstance(value, str) else value


def check(entry: Any) -> dict[str, Any]:
    """``entry`` if it is a well-formed entry (every field typed and bounded), else
    :class:`EntryError`. Applied to each entry read back, so an entry no attempt of this
    SDK would make is refused by name, never half-applied."""
    if not isinstance(entry, dict) or not isinstance(entry.get("op"), str):
        raise EntryError("an entry is a JSON object with an 'op'")
    op = entry["op"]
    fields = _FIELDS.get(op)
    if fields is None:
        raise EntryError(f"unknown entry op {op[:40]!r}")
    if set(entry) != fields | {"op"}:
        raise EntryError(f"a {op} entry has exactly the fields {sorted(fields | {'op'})}")
    for name in fields & {"thread", "ns", "id", "from", "to", "task", "path"}:
        check_id(entry[name], what=f"{op} entry's {name}")
    for name in ("parent", "run"):
        if name in fields and entry[name] is not None:
            check_id(entry[name], what=f"{op} entry's {name}")
    if op == "put":
        Typed.from_json(entry["checkpoint"], what="checkpoint")
        Typed.from_json(entry["metadata"], what="metadata")
        if not isinstance(entry["versions"], dict):
            raise EntryError("a put entry's versions are an object")
        if len(entry["versions"]) > CHANNELS:
            raise EntryError(f"a checkpoint names at most {CHANNELS} channels")
        for channel, version in entry["versions"].items():
            check_id(channel, what="a channel", chars=CHANNEL_CHARS)
            _version(version, what=f"channel {channel[:40]!r}")
        if not isinstance(entry["blobs"], dict):
            raise EntryError("a put entry's blobs are an object")
        for channel, pair in entry["blobs"].items():
            check_id(channel, what="a channel", chars=CHANNEL_CHARS)
            if not (isinstance(pair, list) and len(pair) == 2):
                raise EntryError(f"channel {channel[:40]!r}: [version, value]")
            _version(pair[0], what=f"channel {channel[:40]!r}")
            _blob(pair[1], what=channel)
    elif op == "writes":
        check_id(entry["checkpoint"], what="writes entry's checkpoint")
        if not isinstance(entry["writes"], list):
            raise EntryError("a writes entry's writes are a list")
        for item in entry["writes"]:
            if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], int)
                    and not isinstance(item[0], bool)):
                raise EntryError("a write is [index, channel, [type, base64 data]]")
            check_id(item[1], what="a write's channel", chars=CHANNEL_CHARS)
            Typed.from_json(item[2], what="a write's value")
    elif op == "delete-runs":
        _list(entry["runs"], what="run id")
    elif op == "prune":
        _list(entry["threads"], what="thread id")
        if entry["strategy"] not in STRATEGIES:
            raise EntryError(f"a prune's strategy is one of {', '.join(STRATEGIES)}")
    return entry


def _list(values: Any, *, what: str) -> None:
    """``values`` a JSON list of bounded ids."""
    if not isinstance(values, list):
        raise EntryError(f"{what}s are a list")
    check_ids(values, what=what)


_FIELDS: Final[Mapping[str, frozenset[str]]] = {
    "put": frozenset({"thread", "ns", "id", "parent", "run", "checkpoint", "metadata",
                      "versions", "blobs"}),
    "writes": frozenset({"thread", "ns", "checkpoint", "task", "path", "writes"}),
    "delete-thread": frozenset({"thread"}),
    "delete-runs": frozenset({"runs"}),
    "copy-thread": frozenset({"from", "to"}),
    "prune": frozenset({"threads", "strategy"}),
}


def writes_entry(*, thread: str, ns: str, checkpoint: str, task: str, path: str,
                 writes: Sequence[tuple[int, str, Typed]]) -> dict[str, Any]:
    """The entry of a task's writes, each at LangGraph's index for it (its position; a
    special write's fixed negative one: a later one of the same kind replaces it)."""
    return {"op": "writes", "thread": thread, "ns": ns, "checkpoint": checkpoint, "task": task,
            "path": path, "writes": [[index, channel, value.to_json()]
                                     for index, channel, value in writes]}


def order(keys: Iterable[str]) -> list[str]:
    """The entry keys among ``keys`` in log order: by generation, then by sequence (value
    records, ``.v``, left out: an entry names the ones it needs)."""
    found = []
    for key in keys:
        match = KEY.match(key)
        if match and not match.group(3):
            found.append((int(match.group(1)), int(match.group(2)), key))
    return [key for _, _, key in sorted(found)]


def next_generation(keys: Iterable[str]) -> int:
    """The generation after the highest among ``keys`` (a new log's own)."""
    return max((int(m.group(1)) for m in map(KEY.match, keys) if m), default=0) + 1


def key(*, generation: int, seq: int, value: bool = False) -> str:
    """The record key of entry ``seq`` of ``generation`` (``value``: a value record)."""
    return f"{PREFIX}.{generation}.{seq}{'.v' if value else ''}"
