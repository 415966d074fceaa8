"""The journal's format: a node (one commit) and the head that names it.

Pure: bytes in, bytes out, no store and no API (the terms are
:mod:`agentrun.worker._journal`'s), so the worker writes and reads nodes with it and the
operator reads them for people (``history``). A node is canonical JSON, so the same commit
is the same bytes, hence the same name (its sha256), wherever it is made.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentrun.api import bounds, modelusage, names, records
from agentrun.api.records import Record

HEAD = names.JOURNAL_HEAD_ANNOTATION
HEAD_PATTERN = re.compile(r"(?P<seq>[0-9]{10})-(?P<digest>[0-9a-f]{64})")
USAGE = names.JOURNAL_USAGE_ANNOTATION
MODEL_USAGE = names.MODEL_USAGE_ANNOTATION
# Admission checks the shape (CEL), and compares the numbers as CEL ints: 18 digits fit.
USAGE_SHAPE = r"^[0-9]{1,10} records, [0-9]{1,18} bytes$"
USAGE_PATTERN = re.compile(r"(?P<records>[0-9]{1,10}) records, (?P<bytes>[0-9]{1,18}) bytes")
NODE_BYTES = 4 * 1024 * 1024  # one node's canonical JSON (its entries are records, each small)
NODE_ENTRIES = 1024  # records in one node
NODE_DEPTH = 2  # a node is an object holding a list of strings


@dataclass(frozen=True)
class Head:
    """An attempt's head: its ``seq``-th commit is the node of sha256 ``digest``."""

    seq: int
    digest: str

    def text(self) -> str:
        return f"{self.seq:010d}-{self.digest}"

    @classmethod
    def parse(cls, text: str) -> Head:
        found = HEAD_PATTERN.fullmatch(text)
        if found is None or int(found["seq"]) < 1:
            raise records.RecordError(f"{HEAD} {bounds.clip(text, limit=100)!r} is not "
                                      "<10-digit seq>-<sha256>")
        return cls(seq=int(found["seq"]), digest=found["digest"])

    @classmethod
    def on_lease(cls, lease: Mapping[str, Any]) -> Head | None:
        text = ((lease.get("metadata") or {}).get("annotations") or {}).get(HEAD)
        return None if text is None else cls.parse(str(text))


@dataclass(frozen=True)
class Usage:
    """What an attempt committed to its journal: ``records`` and their payloads' ``bytes``
    (each record's ``size``, its payload's canonical JSON). On the Lease beside the head,
    written in the same patch, so the SDK's count is exactly what the head reaches. It is
    the holder's own report: admission keeps it well formed, never decreasing and moving
    only with the head, and cannot check it against the nodes (it cannot read them)."""

    records: int = 0
    bytes: int = 0
    # The model usage its ``usage`` records report (:data:`MODEL_USAGE`, beside it on the
    # Lease); None: none reported yet.
    model: modelusage.ModelUsage | None = None

    def text(self) -> str:
        return f"{self.records} records, {self.bytes} bytes"

    def annotations(self) -> dict[str, str]:
        """What the head's patch writes beside the head."""
        return {USAGE: self.text(), **({} if self.model is None else {
            MODEL_USAGE: self.model.text()})}

    def adding(self, record: Record) -> Usage:
        model = self.model
        if record.kind is records.Kind.USAGE:
            call = modelusage.of_record(record.inline)
            if call is not None:
                model = call if model is None else model.plus(call)
        return Usage(records=self.records + 1, bytes=self.bytes + record.size, model=model)

    @classmethod
    def on_lease(cls, lease: Mapping[str, Any]) -> Usage | None:
        """The Lease's usage; None when it has none (nothing committed, or a worker from
        before usage was kept) or one that does not parse (admission keeps it parseable)."""
        text = ((lease.get("metadata") or {}).get("annotations") or {}).get(USAGE)
        found = None if text is None else USAGE_PATTERN.fullmatch(str(text))
        if found is None:
            return None
        return cls(records=int(found["records"]), bytes=int(found["bytes"]),
                   model=modelusage.ModelUsage.on_lease(lease))


def node(*, attempt: int, seq: int, prev: str | None, entries: list[records.Record]) -> bytes:
    """A node's canonical bytes (its name is their sha256)."""
    return records.canonical({"attempt": attempt, "entries": [records.encode(r) for r in entries],
                              "prev": prev, "seq": seq})


def read_node(data: bytes, *, attempt: int, seq: int,
              digest: str) -> tuple[str | None, list[records.Record]]:
    """``(prev, entries)`` of the node named ``digest``, the ``seq``-th of ``attempt``;
    :class:`RecordError` if the bytes are not exactly that node."""
    if records.digest(data) != digest:
        raise records.RecordError(f"journal node {digest[:12]} of attempt {attempt} does not "
                                  "match its digest (changed or damaged)")
    if records.text_nesting(data) > NODE_DEPTH:
        raise records.RecordError(f"journal node {digest[:12]} nests deeper than a node does")
    try:
        found = json.loads(data)
    except ValueError:
        raise records.RecordError(f"journal node {digest[:12]} is not JSON") from None
    prev = found.get("prev") if isinstance(found, dict) else None
    if (not isinstance(found, dict) or found.get("attempt") != attempt
            or found.get("seq") != seq or not isinstance(found.get("entries"), list)
            or not (prev is None if seq == 1 else isinstance(prev, str))):
        raise records.RecordError(f"journal node {digest[:12]} is not commit {seq} of "
                                  f"attempt {attempt}")
    if len(found["entries"]) > NODE_ENTRIES:
        raise records.RecordError(f"journal node {digest[:12]} holds more than "
                                  f"{NODE_ENTRIES} records")
    entries = []
    for text in found["entries"]:
        try:
            key = json.loads(text)["key"]
        except (TypeError, ValueError, KeyError, RecursionError):
            raise records.RecordError(f"journal node {digest[:12]} holds an entry that is "
                                      "not a record") from None
        entries.append(records.decode(annotation=f"{records.PREFIX}{key}", value=str(text),
                                      attempt=attempt))
    return prev, entries
