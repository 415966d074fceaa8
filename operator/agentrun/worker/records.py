"""Durable records: write-once annotations on the attempt's own Lease (issue 10, item 3).

A *record* is one small JSON document stored as the annotation
``record.agentrun.dev/<key>`` of the Lease of the attempt that wrote it (where and why:
docs/decisions.md, "Where records live"). It carries its key, its kind, the attempt
number (provenance: admission checks that it is the Lease's own), the sha256 of its
payload, and the payload itself (inline, when its canonical JSON is at most
:data:`~agentrun.api.bounds.INLINE_PAYLOAD_BYTES`) or a reference (a URI in a
:class:`PayloadStore`, fsspec's ``file://`` on a mounted volume built in). A record is
*committed* once the API server accepted the annotation; it never changes or goes
(admission), and the operator's tombstone seals the Lease, so nothing is added after
the attempt ended.

Canonical encoding: JSON with sorted keys and no spaces, so the document starts with
``{"attempt":<n>,`` (the field admission checks) and equal records are equal strings.
:func:`decode` checks everything admission cannot (the shape, the key matching the
annotation, the attempt matching the Lease's label, the inline payload's digest).
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentrun.api import bounds, names
from agentrun.kube import rest

JSON = Any  # a JSON value: what json.loads returns
PREFIX = bounds.RECORD_ANNOTATION_PREFIX
SHA256_PATTERN = r"^[0-9a-f]{64}$"


class Kind(enum.StrEnum):
    CHECKPOINT = "checkpoint"
    DECISION = "decision"
    SOURCE_NOTES = "source-notes"
    STEP_RESULT = "step-result"
    EFFECT_INTENT = "effect-intent"
    EFFECT_OUTCOME = "effect-outcome"


class RecordError(ValueError):
    """A record that cannot be made, read or trusted; the message says which and why."""


class Record(BaseModel):
    """One record as stored. ``inline`` xor ``ref`` holds the payload; ``size`` is the
    byte length of its canonical JSON and ``digest`` that text's sha256 (hex)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    attempt: int = Field(ge=1, le=bounds.MAX_ATTEMPT_NUMBER)
    digest: str = Field(pattern=SHA256_PATTERN)
    inline: JSON = None
    key: str = Field(max_length=bounds.RECORD_KEY_CHARS, pattern=bounds.RECORD_KEY_PATTERN)
    kind: Kind
    ref: str | None = Field(default=None, max_length=bounds.PAYLOAD_URI_CHARS)
    size: int = Field(ge=0)

    @model_validator(mode="after")
    def _one_payload(self) -> Record:
        if self.ref is not None and self.inline is not None:
            raise ValueError("a record holds its payload inline or by reference, not both")
        if self.ref is None and self.size > bounds.INLINE_PAYLOAD_BYTES:
            raise ValueError(f"an inline payload is at most {bounds.INLINE_PAYLOAD_BYTES} "
                             "bytes; store a larger one by reference")
        return self

    @property
    def annotation(self) -> str:
        return PREFIX + self.key


def canonical(value: JSON) -> bytes:
    """The one byte form of a JSON value: sorted keys, no spaces, UTF-8."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False, allow_nan=False).encode()
    except (TypeError, ValueError) as error:
        raise RecordError(f"a record's payload must be plain JSON: {error}") from None


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_key(key: str) -> str:
    """``key`` if it can name a record (an annotation name after the prefix), else why not."""
    if len(key) > bounds.RECORD_KEY_CHARS or not re.fullmatch(bounds.RECORD_KEY_PATTERN, key):
        raise RecordError(f"record key {key[:80]!r} must be at most {bounds.RECORD_KEY_CHARS} "
                          "characters: lower-case letters, digits, '-' and '.', starting and "
                          "ending with a letter or digit")
    return key


def check_step_key(key: str) -> str:
    """``key`` if a worker may name a step or an effect by it: no '.', which the SDK's own
    suffixes (``<key>.intent``) use, so a step never collides with an effect's record."""
    if len(key) > bounds.STEP_KEY_CHARS or not re.fullmatch(bounds.STEP_KEY_PATTERN, key):
        raise RecordError(f"step key {key[:80]!r} must be at most {bounds.STEP_KEY_CHARS} "
                          "characters: lower-case letters, digits and '-', starting and "
                          "ending with a letter or digit")
    return key


class PayloadStore(Protocol):
    """Where payloads too large to be inline go, content-addressed by sha256."""

    def put(self, *, sha256: str, data: bytes) -> str:
        """Store ``data`` (whose sha256 is ``sha256``) and return its URI."""

    def get(self, uri: str) -> bytes:
        """The bytes stored at ``uri`` (the caller verifies their digest)."""


class FsspecStore:
    """A payload store under ``base`` (any fsspec URL; ``file:///mnt/records`` built in,
    object stores through fsspec's backends installed beside it). Each payload is the file
    ``<base>/sha256/<digest>``: the same content always has the same name, so a payload
    written twice (two attempts) is the same file; one found damaged (a write cut short
    by a kill) is written again."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")

    def put(self, *, sha256: str, data: bytes) -> str:
        import fsspec  # only a worker that stores by reference needs it loaded

        uri = f"{self.base}/sha256/{sha256}"
        fs, path = fsspec.core.url_to_fs(uri)
        if fs.exists(path) and digest(fs.cat_file(path)) == sha256:
            return uri  # already there, intact (a write cut short is written again)
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with fs.open(path, "wb") as out:
            out.write(data)
        return uri

    def get(self, uri: str) -> bytes:
        import fsspec

        with fsspec.open(uri, "rb") as found:
            data: bytes = found.read()
        return data


def make(*, key: str, kind: Kind, attempt: int, payload: JSON,
         store: PayloadStore | None = None) -> Record:
    """A record of ``payload``: inline if small enough, else put in ``store`` by reference."""
    data = canonical(payload)
    sha = digest(data)
    if len(data) <= bounds.INLINE_PAYLOAD_BYTES:
        return Record(attempt=attempt, digest=sha, inline=payload, key=check_key(key),
                      kind=kind, size=len(data))
    if store is None:
        raise RecordError(f"record {key}: the payload is {len(data)} bytes, more than the "
                          f"{bounds.INLINE_PAYLOAD_BYTES} kept inline, and no payload store "
                          "is configured (give the worker one, e.g. a file:// volume)")
    uri = store.put(sha256=sha, data=data)
    return Record(attempt=attempt, digest=sha, key=check_key(key), kind=kind, ref=uri,
                  size=len(data))


def encode(record: Record) -> str:
    """The annotation value: canonical JSON, at most :data:`bounds.RECORD_BYTES` bytes."""
    text = canonical(record.model_dump(mode="json", exclude_none=True)).decode()
    assert text.startswith('{"attempt":'), text[:20]  # what admission checks first
    if len(text.encode()) > bounds.RECORD_BYTES:
        raise RecordError(f"record {record.key} encodes to {len(text.encode())} bytes; at "
                          f"most {bounds.RECORD_BYTES} fit an annotation (a shorter URI?)")
    return text


def decode(*, annotation: str, value: str, attempt: int) -> Record:
    """The record stored as ``annotation``: ``value`` on the Lease of attempt ``attempt``.

    Raises :class:`RecordError` unless it is a well-formed record of that very key and
    attempt whose inline payload matches its digest (a reference is verified on load).
    """
    key = annotation.removeprefix(PREFIX)
    try:
        record = Record.model_validate_json(value)
    except ValidationError as error:
        raise RecordError(f"record {key} of attempt {attempt} is malformed: "
                          f"{bounds.clip(str(error), limit=bounds.MESSAGE_CHARS)}") from None
    if record.key != key or record.attempt != attempt:
        raise RecordError(f"record {key} of attempt {attempt} names key {record.key} of "
                          f"attempt {record.attempt}: it is not this Lease's record")
    if record.ref is None and (
            digest(canonical(record.inline)) != record.digest or record.size != len(
                canonical(record.inline))):
        raise RecordError(f"record {key} of attempt {attempt}: its inline payload does not "
                          "match its digest")
    return record


def payload(record: Record, *, store: PayloadStore | None) -> JSON:
    """The record's payload, verified against its digest (fetched from ``store`` by
    reference). Raises :class:`RecordError` when it cannot be had intact."""
    if record.ref is None:
        return record.inline
    if store is None:
        raise RecordError(f"record {record.key} is stored by reference ({record.ref}) and "
                          "no payload store is configured to read it")
    try:
        data = store.get(record.ref)
    except OSError as error:
        raise RecordError(f"record {record.key}: cannot read {record.ref}: {error}") from None
    if digest(data) != record.digest:
        raise RecordError(f"record {record.key}: the payload at {record.ref} does not match "
                          "its digest (changed or damaged)")
    return json.loads(data)


def on_lease(lease: Mapping[str, Any]) -> tuple[dict[str, Record], list[str]]:
    """The records of one attempt Lease (by key), and why any found could not be read."""
    metadata = lease.get("metadata") or {}
    label = (metadata.get("labels") or {}).get(names.ATTEMPT_LABEL, "")
    attempt = int(label) if str(label).isdigit() else 0
    found: dict[str, Record] = {}
    problems: list[str] = []
    for annotation, value in sorted((metadata.get("annotations") or {}).items()):
        if not annotation.startswith(PREFIX):
            continue
        try:
            record = decode(annotation=annotation, value=value, attempt=attempt)
        except RecordError as error:
            problems.append(str(error))
            continue
        found[record.key] = record
    return found, problems


class RecordConflict(RecordError):
    """The key is already committed with other content (write-once: it stays as it is)."""


class RecordRefused(RecordError):
    """The API server refused the record (admission: not the holder, or the Lease is
    tombstoned; its message names the policy)."""


CONFLICT_RETRIES = 5  # 409s in a row before giving up (each one a fresh read)


@dataclass(kw_only=True)
class LeaseRecords:
    """Records on the attempt's own Lease ``namespace``/``lease``, through ``api``.

    A commit reads the Lease and adds the annotation by a merge patch that carries the
    ``resourceVersion`` read, so it lands only on the state it was decided on; a 409
    (someone wrote in between: a renewal, another record) re-reads and tries again while
    the key is still free. Committing the same content twice is a no-op (the retry after
    a lost answer); other content under a committed key raises :class:`RecordConflict`.
    """

    api: rest.Rest
    namespace: str
    lease: str
    attempt: int

    @property
    def path(self) -> str:
        return rest.namespaced(group="coordination.k8s.io", version="v1", plural="leases",
                               namespace=self.namespace, name=self.lease)

    def read(self) -> dict[str, Record]:
        found, _ = on_lease(self.api.request("GET", self.path))
        return found

    def commit(self, record: Record) -> Record:
        if record.attempt != self.attempt:
            raise RecordError(f"record {record.key} is of attempt {record.attempt}; this "
                              f"worker is attempt {self.attempt}")
        value = encode(record)
        for _ in range(CONFLICT_RETRIES):
            lease = self.api.request("GET", self.path)
            metadata = lease.get("metadata") or {}
            existing = (metadata.get("annotations") or {}).get(record.annotation)
            if existing is not None:
                if existing == value:
                    return record
                raise RecordConflict(f"record {record.key} is already committed by attempt "
                                     f"{self.attempt} with other content; records are "
                                     "write-once: use a new key")
            body = {"metadata": {"resourceVersion": metadata.get("resourceVersion"),
                                 "annotations": {record.annotation: value}}}
            try:
                self.api.request("PATCH", self.path, body=body, content_type=rest.MERGE_PATCH)
            except rest.ApiError as error:
                if error.status == 409:
                    continue
                if error.status in (403, 422):
                    raise RecordRefused(f"record {record.key} refused: "
                                        f"{bounds.clip(error.message)}") from None
                raise
            return record
        raise RecordError(f"record {record.key}: the Lease changed under each of "
                          f"{CONFLICT_RETRIES} attempts to commit it; try again")
