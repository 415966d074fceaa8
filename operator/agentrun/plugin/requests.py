"""The plugin's commands, pure: the annotations one command writes, and what its outcome means.

Terms:
- *request*: one command as a person gives it on the command line (kind, slot, fields).
- *ledger entry*: the operator's record of its decision (``status.commands``), found by
  the request id the plugin chose; its ``outcome`` is ``Accepted`` or ``Rejected``.
- *unproven*: a rejection because the stamped actor could not be believed
  (:data:`UNPROVEN`): not a verdict on the command, so the plugin sends it once more.

The actor, epoch and override annotations are never written here: admission stamps them.
Every value is checked against the bounds the operator parses with
(:data:`agentrun.core.commands.parsing.BOUNDS`), so the plugin refuses locally (exit 2) what the
operator would only record as ``Malformed``.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentrun.api import bounds, names, questions
from agentrun.api.slots import CommandKind, Predicate
from agentrun.core.commands import parsing, registry
from agentrun.core.commands.spec import Bound

Object = dict[str, Any]

ACCEPTED, REJECTED, USAGE, FAILED = 0, 1, 2, 3  # the plugin's exit codes


class Failure(Exception):
    """Why the plugin could not finish: ``code`` is its exit code, the message says why."""

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        self.code = code
UNPROVEN = frozenset({Predicate.COMMANDS_REFUSED, Predicate.UNSTAMPED, Predicate.STALE_EPOCH})
RESEND_SUFFIX = ".resend"
SHAPES: Mapping[CommandKind, parsing.Shape] = registry.BY_KIND
# How a field is named in an error: its flag, or what fills it (the slot's run).
FIELD_LABELS = {name: field.label for name, field in registry.FIELDS.items()}


class BadInput(ValueError):
    """A command-line value out of its bound: the message says which flag and why."""


@dataclass(frozen=True, kw_only=True)
class Request:
    """One command to send: ``fields`` are the field names of its spec
    (:class:`agentrun.core.commands.spec.CommandSpec`)."""

    kind: CommandKind
    request_id: str
    fields: Mapping[str, str] = field(default_factory=dict)


def new_request_id() -> str:
    """A fresh request id: 32 hex digits, within :data:`bounds.REQUEST_ID_PATTERN`."""
    return uuid.uuid4().hex


def resend_id(request_id: str) -> str:
    """The id of the one re-send of an unproven command.

    Not the same id: the operator records the refusal under the first id and would drop a
    command carrying it again as already decided (``guards.seen``); a derived id keeps the
    two recognisably one request (docs/design/operating.md, "The kubectl agentrun plugin").
    """
    return request_id[:bounds.REQUEST_ID_CHARS - len(RESEND_SUFFIX)] + RESEND_SUFFIX


def check(kind: CommandKind, fields: Mapping[str, str]) -> None:
    """Raise :class:`BadInput` unless every field is within the operator's bound.

    A blank reason is left to the operator (and admission): it is a guard's verdict
    (``BlankReason``), recorded in the ledger, not a malformed value.
    """
    shape = SHAPES[kind]
    for name, value in fields.items():
        if name not in shape.fields:
            raise BadInput(f"{FIELD_LABELS.get(name, name)} does not apply to {kind}")
        why = problem(FIELD_LABELS.get(name, name), value, parsing.BOUNDS[name])
        if why is not None:
            raise BadInput(why)


def by_reference(kind: CommandKind, fields: Mapping[str, str]) -> dict[str, str]:
    """The fields over their bound that travel by reference (within ``by_reference``,
    checked as the operator will: JSON, size, depth), else :class:`BadInput`."""
    found = {}
    for taken in SHAPES[kind].takes:
        value = fields.get(taken.name)
        if taken.by_reference is None or value is None or len(value.encode()) <= (
                taken.bound.chars):
            continue
        why = problem(FIELD_LABELS.get(taken.name, taken.name), value, taken.by_reference)
        if why is not None:
            raise BadInput(why)
        found[taken.name] = value
    return found


def reference(configmap: str, value: str) -> str:
    """A ``<name>_from`` field: the ConfigMap, its key and the value's sha256."""
    return f"{configmap}/{names.ANSWERS_FILE}@sha256:{hashlib.sha256(value.encode()).hexdigest()}"


def problem(flag: str, value: str, bound: Bound) -> str | None:
    """Why a value given as ``flag`` is out of ``bound`` (JSON text too, where the field
    must be: the operator's command check would say Malformed), or None."""
    why = parsing.problem(flag, value, bound)
    if why is None and bound.json:
        try:
            questions.check_value(json.loads(value), what=flag, limit=bound.chars)
        except questions.QuestionError as error:
            return str(error)
        except ValueError as error:
            return f"{flag} must be JSON text: {error}"
    return why


def written(request: Request) -> dict[str, str]:
    """The annotations of ``request``: its id and fields, none of the stamped ones."""
    shape = SHAPES[request.kind]
    check(request.kind, request.fields)
    result = {shape.id: request.request_id}
    result.update({shape.fields[name]: value for name, value in request.fields.items()})
    assert not set(result) & set(shape.stamped)
    return result


def patch(request: Request, *, resource_version: str | None) -> Object:
    """The one merge patch that writes ``request`` (with the slot's version as precondition)."""
    metadata: Object = {"annotations": written(request)}
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {"metadata": metadata}


def pending_id(kind: CommandKind, slot: Object) -> str | None:
    """The request id of a command of ``kind`` already waiting on ``slot``, or None."""
    found = ((slot.get("metadata") or {}).get("annotations") or {}).get(SHAPES[kind].id)
    return found if isinstance(found, str) else None


def entry(slot: Object, request_id: str) -> Object | None:
    """The ledger entry for ``request_id`` on ``slot``, or None (not decided yet)."""
    for record in (slot.get("status") or {}).get("commands") or []:
        if isinstance(record, dict) and record.get("requestId") == request_id:
            return record
    return None


def unproven(record: Object) -> bool:
    return record.get("outcome") == "Rejected" and record.get("predicate") in UNPROVEN


def exit_code(record: Object) -> int:
    return ACCEPTED if record.get("outcome") == "Accepted" else REJECTED


def describe(record: Object) -> str:
    """One line a person reads: the outcome, and on rejection the predicate and message."""
    head = f"{record.get('kind', '?')} {record.get('requestId', '?')}: "
    if record.get("outcome") == "Accepted":
        who = f" (by {record['actor']})" if record.get("actor") else ""
        override = " using override" if record.get("override") else ""
        message = f": {record['message']}" if record.get("message") else ""
        return f"{head}Accepted{who}{override}{message}"
    predicate = record.get("predicate") or "?"
    return f"{head}Rejected ({predicate}): {record.get('message') or 'no message'}"
