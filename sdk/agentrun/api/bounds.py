"""The documented bounds on everything a person can write, and the one clipping helper.

Every value the operator reads from a person (a command annotation, a spec number) is
checked against a bound here when it is parsed; every text the operator stores or shows
(a ledger entry, a condition's or an Event's message, an attempt's reason) is clipped
with :func:`clip`. Together with the list caps (``ATTEMPTS_KEPT``, ``COMMANDS_KEPT``,
``MAX_CONDITIONS``) this gives a Slot's status a fixed worst-case size
(:data:`SLOT_STATUS_BYTES`), so no input can grow an object past the API server's limit
or make a write of it fail.

*Characters* are Unicode code points; a reason's bound is in UTF-8 bytes ("≤ 1 KiB").
JSON may escape one character as up to six bytes (``\\u003c``), which the worst-case size
accounts for.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

from agentrun.api import names

# Command annotations (docs/design/commands-and-trust.md). Admission enforces the same bounds.
REQUEST_ID_CHARS: Final = 253
# A Kubernetes object name that is a DNS subdomain (a pod's, a Lease's): lower-case
# letters, digits, '-' and '.', alphanumeric at both ends, at most 253 characters.
DNS_SUBDOMAIN: Final = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
# One that is a DNS label (a namespace's): no '.', at most 63 characters.
DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
REQUEST_ID_PATTERN: Final = r"^[A-Za-z0-9]([A-Za-z0-9._:@/+=-]*[A-Za-z0-9])?$"
REASON_BYTES: Final = names.MAX_REASON_BYTES
WORKER_CLASS_CHARS: Final = 63
WORKER_CLASS_PATTERN: Final = names.WORKER_CLASS_PATTERN  # as the workflow declares them
RUN_CHARS: Final = names.MAX_RUN_NAME
RUN_PATTERN: Final = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
TENANT_CHARS: Final = 63
TENANT_PATTERN: Final = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
ACTOR_CHARS: Final = 256  # a stamped user name; Kubernetes sets no limit, we keep this much

# The worker sidecar's options (``spec.sidecar``, ``agentrun-worker sidecar``): its port on
# 127.0.0.1 and how recently a main container must have checked in, in seconds.
SIDECAR_MIN_PORT: Final = 1024
SIDECAR_MAX_PORT: Final = 65535
SIDECAR_DEFAULT_PORT: Final = 8686
SIDECAR_MIN_CHECK_IN: Final = 5
SIDECAR_MAX_CHECK_IN: Final = 600
SIDECAR_DEFAULT_CHECK_IN: Final = 30

# Texts the operator writes.
MESSAGE_CHARS: Final = 1024  # a condition's message, an Event's note
RECORD_MESSAGE_CHARS: Final = 512  # a ledger entry's message, an attempt record's reason
ELLIPSIS: Final = "…"

# Numbers in specs: each keeps the core's sums within int64 seconds and ``datetime``.
MAX_DEADLINE_SECONDS: Final = 10 * 366 * 86400  # activeDeadlineSeconds: ten years
MAX_REVISION: Final = 2**53 - 1  # exact as a JSON number (the API server's bounds are float64)
MIN_LEASE_SECONDS: Final = 5  # LaunchSpec lease.durationSeconds
MAX_LEASE_SECONDS: Final = 3600
MAX_ATTEMPT_NUMBER: Final = 1000  # attempt numbers (and so Lease records) per slot
# Attempt 0 is no worker's: a fork's inherited records, copied by the operator.
ATTEMPT_NUMBER_PATH: Final = r"(0|[1-9][0-9]{0,3})"  # an attempt's number in a journal key

# Durable records: annotations ``record.agentrun.dev/<key>`` on the
# attempt's own Lease, each a small JSON document (agentrun.worker._records). Admission
# (core.policies.leasepolicy) enforces the count and the size; the key's shape is the API server's
# own (an annotation name is at most 63 characters). Worst case: 64 x (2 KiB + key) is
# about 134 KiB, well under the API server's 256 KiB for all of a Lease's annotations, and
# small enough that the operator's Lease watch (every renewal delivers the whole object)
# stays cheap; a larger payload is stored by reference (URI + sha256).
RECORD_ANNOTATION_PREFIX: Final = "record.agentrun.dev/"
MAX_RECORDS: Final = 64  # record annotations on one attempt's Lease
RECORD_BYTES: Final = 2048  # one record annotation's value, UTF-8 bytes
INLINE_PAYLOAD_BYTES: Final = 1024  # a payload larger than this goes to the store
JOURNAL_ERROR_BYTES: Final = 512  # the journal's last store error on a Lease, UTF-8 bytes
RECORD_KEY_CHARS: Final = 63  # the annotation name after the prefix
RECORD_KEY_PATTERN: Final = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
STEP_KEY_CHARS: Final = 48  # a key a worker names (a step, an effect): room for suffixes
STEP_KEY_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"  # no '.': the SDK's suffixes
PAYLOAD_URI_CHARS: Final = 1024
# A payload (a step's result, an effect's outcome) nests at most this many levels of arrays
# and objects, so what is encoded can be decoded by every reader with room to spare
# (pydantic's JSON parser stops at 200 levels, its serializer at 255, Python's json near
# 1,000); the codec counts levels without recursion (agentrun.api.records).
PAYLOAD_DEPTH: Final = 64
# A payload stored by reference is at most this many bytes (its record's ``size``): a
# successor reads it whole into memory, and reads no more than that of whatever it finds.
# A step's result, not an artifact: larger data is an artifact (below).
PAYLOAD_BYTES: Final = 64 * 1024 * 1024
# An artifact (``worker.artifact``): streamed into the journal, never held whole; at most
# this many bytes (S3's 10,000 parts of 8 MiB hold 78 GiB: the bound leaves room).
ARTIFACT_BYTES: Final = 64 * 1024 * 1024 * 1024

# resolve-effect: the effect's key is a step key (above); its result,
# as written in the annotation, is at most this many UTF-8 bytes (JSON, else plain text),
# so the `.resolved` record the operator writes for the successor stays inline.
RESOLVE_RESULT_BYTES: Final = 512
RESOLVE_OUTCOME_PATTERN: Final = r"^(applied|not-applied)$"
RESOLVE_OUTCOME_CHARS: Final = 11
# A slot's status.effects entries (the worst-case status bound), and so the unresolved
# effects one attempt may record: the SDK records no more (the rest stay ambiguous, for a
# later attempt to ask about), and the operator counts but does not show more.
EFFECTS_KEPT: Final = 8
EFFECT_NAME_CHARS: Final = 63  # an effect's name and its owner's, as the worker gives them
IDEMPOTENCY_KEY_CHARS: Final = 64  # sha256, hex
# Questions: a question's text and its JSON schema (canonical JSON) as the worker asks, and
# an answer's value (JSON) as a person gives it; the question's record must stay inline
# (INLINE_PAYLOAD_BYTES in all), and so must the answer's record the operator writes. A
# slot shows at most QUESTIONS_KEPT of them (status.questions), and one attempt asks no more.
QUESTION_BYTES: Final = 512
SCHEMA_BYTES: Final = 512
ANSWER_VALUE_BYTES: Final = 512
# A larger answer travels by reference (the registry's way for large values): a ConfigMap
# in the slot's namespace and the key in it, with the sha256 of the value, at most
# ANSWER_FILE_BYTES; the next attempt's pod mounts it (the value never enters the status).
ANSWER_FILE_BYTES: Final = 64 * 1024
VALUE_FROM_CHARS: Final = 400
VALUE_FROM_PATTERN: Final = (r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[-._a-zA-Z0-9]+"
                             r"@sha256:[0-9a-f]+$")  # no braces: CEL messages are formatted
QUESTIONS_KEPT: Final = 4
# Approvals: an effect's approval request is a question whose text is the payload's
# redacted view; it needs 1 to MAX_APPROVERS distinct approvers, each kept as the first
# APPROVER_DIGEST_CHARS hex digits of sha256(name) (who they are is in the ledger).
MAX_APPROVERS: Final = 3
APPROVER_DIGEST_CHARS: Final = 16
# The approval floors a LaunchSpec sets (spec.approvals): effect names, at most this many.
APPROVAL_FLOORS: Final = 16
DIGEST_CHARS: Final = 64  # sha256, hex
DIGEST_PATTERN: Final = r"^[0-9a-f]+$"  # with DIGEST_CHARS (no braces: CEL messages are formatted)

# The worst-case JSON size of a Slot's status (checked by tests/unit/core/commands/test_bounds.py).
SLOT_STATUS_BYTES: Final = 1024 * 1024


# Characters that reorder or hide what a terminal shows (Trojan Source): escaped with the
# control characters, though not control characters themselves.
_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                           "\u2066\u2067\u2068\u2069")


def printable(text: str) -> str:
    """``text`` with every control character (C0, DEL, C1), line or paragraph separator and
    bidirectional control written as an escape (``\\x1b``, ``\\u202e``): what a person
    sent is shown as sent, and cannot break a line of ``kubectl describe`` or a log, paint
    a terminal, or reorder what is read."""
    if text.isprintable() and not _BIDI_CONTROLS.intersection(text):
        return text
    return "".join(
        (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")
        if unicodedata.category(c) in ("Cc", "Zl", "Zp") or c in _BIDI_CONTROLS else c
        for c in text)


def clip(text: str, *, limit: int = MESSAGE_CHARS) -> str:
    """``text`` cut to at most ``limit`` characters, marked with an ellipsis when cut."""
    if len(text) <= limit:
        return text
    return text[:limit - len(ELLIPSIS)] + ELLIPSIS


def clip_bytes(text: str, *, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes (never inside a character)."""
    encoded = text.encode()
    if len(encoded) <= limit:
        return text
    room = limit - len(ELLIPSIS.encode())
    return encoded[:room].decode(errors="ignore") + ELLIPSIS


def optional_clip(text: str | None, *, limit: int) -> str | None:
    return None if text is None else clip(text, limit=limit)


def problem(*, key: str, value: str, chars: int | None = None, pattern: str | None = None,
            max_bytes: int | None = None) -> str | None:
    """Why the annotation ``key``'s ``value`` is out of its bound, or None.

    The message names the key and the bound, never the value itself (it may be huge).
    """
    if chars is not None and len(value) > chars:
        return f"{key} is {len(value)} characters long; at most {chars} are allowed"
    if max_bytes is not None and len(value.encode()) > max_bytes:
        return (f"{key} is {len(value.encode())} bytes long (UTF-8); at most {max_bytes} "
                "are allowed")
    if pattern is not None and not re.fullmatch(pattern, value):
        return f"{key} must match {pattern}"
    return None
