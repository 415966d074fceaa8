"""The durable records' encoding and decoding: one codec for the SDK and the operator.

A *record* is one small JSON document stored as the annotation
``record.agentrun.dev/<key>`` of an attempt's Lease (``agentrun.worker._records`` writes
them; the operator reads an effect's ``<key>.unresolved`` and writes ``<key>.resolved``
on a successor's Lease). Pure: no I/O, so ``agentrun.core`` may use it
and the worker's module re-exports it (one decoder).

Canonical encoding: JSON with sorted keys and no spaces, so the document starts with
``{"attempt":<n>,`` (the field admission checks) and equal records are equal strings.
:func:`decode` checks everything admission cannot (the shape, the key matching the
annotation, the attempt matching the Lease's label, the inline payload's digest).

One rule for what may be committed, so what is encoded can be decoded: a payload is plain
JSON nested at most :data:`~agentrun.api.bounds.PAYLOAD_DEPTH` levels. :func:`canonical`
refuses a deeper value before any recursive encoder sees it (:func:`nesting` counts with
a loop), and every reader measures a text before parsing it (:func:`text_nesting`), so
neither side ever meets a parser's own recursion limit; both raise :class:`RecordError`.
"""

from __future__ import annotations

import array
import enum
import hashlib
import itertools
import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from agentrun.api import bounds, names

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
    ARTIFACT = "artifact"  # bytes streamed into the journal by reference (``ref``), any size
    USAGE = "usage"  # one model call's usage (agentrun.api.modelusage), journaled with its step


class RecordError(ValueError):
    """A record that cannot be made, read or trusted; the message says which and why."""


DEEP = (f"a record's payload nests at most {bounds.PAYLOAD_DEPTH} levels of arrays and "
        "objects (an effect's result one less: its outcome wraps it); this one is deeper")
# A JSON string (its end may be missing: then it runs to the end of the text), and the
# translation of what is left to +1 per opening and -1 per closing bracket.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


def nesting(value: JSON, *, limit: int = bounds.PAYLOAD_DEPTH) -> int:
    """How many levels of arrays and objects ``value`` nests (a scalar: 0), counted with
    a loop and only up to ``limit + 1``: a value too deep for a recursive encoder (or one
    that contains itself) is measured, never crashed on."""
    deepest, pending = 0, [(value, 1)]
    while pending and deepest <= limit:
        item, level = pending.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        pending.extend((child, level + 1) for child in children)
    return deepest


def text_nesting(data: bytes) -> int:
    """How deep a parser recursing per level would go in the JSON text ``data`` before it
    succeeds or fails: the most brackets open at once outside strings. Measured before
    parsing, in linear time, so text nested too deep is refused before any parser's
    recursion (pydantic's, Python's json) can fail in its own way."""
    brackets = _STRING.sub(b"", data).translate(_STEPS, delete=_NOT_BRACKETS)
    return max(itertools.accumulate(array.array("b", brackets)), default=0)


class Record(BaseModel):
    """One record as stored. ``inline`` xor ``ref`` holds the payload; ``size`` is the
    byte length of its canonical JSON and ``digest`` that text's sha256 (hex)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    attempt: int = Field(ge=0, le=bounds.MAX_ATTEMPT_NUMBER)  # 0: a fork's inherited
    digest: str = Field(pattern=SHA256_PATTERN)
    inline: JSON = None
    key: str = Field(max_length=bounds.RECORD_KEY_CHARS, pattern=bounds.RECORD_KEY_PATTERN)
    kind: Kind
    ref: str | None = Field(default=None, max_length=bounds.PAYLOAD_URI_CHARS)
    size: int = Field(ge=0, le=bounds.ARTIFACT_BYTES)  # PAYLOAD_BYTES but for an artifact

    @field_validator("inline")
    @classmethod
    def _shallow(cls, inline: JSON) -> JSON:
        if nesting(inline) > bounds.PAYLOAD_DEPTH:
            raise ValueError(DEEP)
        return inline

    @model_validator(mode="after")
    def _one_payload(self) -> Record:
        if self.ref is not None and self.inline is not None:
            raise ValueError("a record holds its payload inline or by reference, not both")
        if self.ref is None and self.size > bounds.INLINE_PAYLOAD_BYTES:
            raise ValueError(f"an inline payload is at most {bounds.INLINE_PAYLOAD_BYTES} "
                             "bytes; store a larger one by reference")
        if self.kind is Kind.ARTIFACT and self.ref is None:
            raise ValueError("an artifact is stored by reference")
        if self.kind is not Kind.ARTIFACT and self.size > bounds.PAYLOAD_BYTES:
            raise ValueError(f"a payload is at most {bounds.PAYLOAD_BYTES} bytes; larger data "
                             "is an artifact")
        return self

    @property
    def annotation(self) -> str:
        return PREFIX + self.key


def _json(value: JSON) -> bytes:
    """``value`` as canonical JSON (a record's whole document, or a checked payload)."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False, allow_nan=False).encode()
    except (TypeError, ValueError) as error:
        raise RecordError(f"a record's payload must be plain JSON: {error}") from None


def canonical(value: JSON) -> bytes:
    """The one byte form of a payload: sorted keys, no spaces, UTF-8; a value nested
    deeper than a record may hold is refused (:data:`DEEP`) before it is encoded."""
    if nesting(value) > bounds.PAYLOAD_DEPTH:
        raise RecordError(DEEP)
    return _json(value)


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


def encode(record: Record) -> str:
    """The annotation value: canonical JSON, at most :data:`bounds.RECORD_BYTES` bytes."""
    text = _json(record.model_dump(mode="json", exclude_none=True)).decode()
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
    if text_nesting(value.encode()) > bounds.PAYLOAD_DEPTH + 1:  # the record wraps it
        raise RecordError(f"record {key} of attempt {attempt} is malformed: {DEEP}")
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


def bound_to(lease: Mapping[str, Any], *, pod_uid: str | None) -> bool:
    """Whether what the worker of attempt Lease ``lease`` wrote may be trusted: the Lease is
    not bound to a pod known not to be its attempt's own (``pod_uid``; see
    :func:`written_by`, which applies this rule to the records on the Lease)."""
    annotations = (lease.get("metadata") or {}).get("annotations") or {}
    bound = annotations.get(names.HOLDER_UID_ANNOTATION)
    return bound is None or pod_uid is None or bound == pod_uid


def written_by(lease: Mapping[str, Any], *,
               pod_uid: str | None) -> tuple[dict[str, Record], list[str]]:
    """The records of one attempt Lease, as :func:`on_lease`, unless a pod other than the
    attempt's own wrote them: then none, and why.

    ``pod_uid``: the uid of the pod the operator created for the attempt (on a tombstone,
    ``agentrun.dev/pod-uid``; None: none recorded). Admission binds a Lease to the first
    pod that writes it as a worker (``agentrun.dev/holder-uid``) and lets no other pod add
    a record, so a bound Lease's records are that one pod's: a stranger's when it is known
    not to be the attempt's own (a pod run under the attempt's name after its own was
    deleted). Only that positive mismatch drops them. An attempt whose pod uid was not
    recorded cannot be compared, and dropping its records would drop a genuine effect's
    intent (its successor would send the effect again instead of asking the owner), so it
    trusts its Lease's bound writer: admission already admitted a single writer pod. An
    unbound Lease's records were written without that policy in force (before it was
    installed), when only the pod's name was checked: they are trusted as they were then.
    """
    found, problems = on_lease(lease)
    metadata = lease.get("metadata") or {}
    bound = (metadata.get("annotations") or {}).get(names.HOLDER_UID_ANNOTATION)
    if bound_to(lease, pod_uid=pod_uid) or not (found or problems):
        return found, problems
    return {}, [f"the {len(found) + len(problems)} record(s) on Lease "
                f"{metadata.get('name', '?')} are not trusted: it is bound to the pod of uid "
                f"{bounds.clip(str(bound), limit=64)}, not to its attempt's pod (uid "
                f"{pod_uid}): a pod of the same name run by someone else wrote them"]


def decisions_of(lease: Mapping[str, Any], *, pod_uid: str | None,
                 suffix: str) -> list[tuple[str, Record]]:
    """The ``<key><suffix>`` decision records of one attempt Lease that its own pod wrote
    (:func:`written_by`), in key order, as (step key, record); a record of another kind or
    whose key is not a step key is left out (only a worker past the SDK writes one)."""
    found, _ = written_by(lease, pod_uid=pod_uid)
    taken = []
    for name, record in sorted(found.items()):
        key = name.removesuffix(suffix)
        if key == name or record.kind is not Kind.DECISION:
            continue
        try:
            check_step_key(key)
        except RecordError:
            continue
        taken.append((key, record))
    return taken
