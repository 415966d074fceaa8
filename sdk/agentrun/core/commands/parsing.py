"""Reading commands from a Slot's annotations (docs/design/commands-and-trust.md).

A person writes a command with ``kubectl annotate`` (or the plugin): a request id, the
command's fields, and admission stamps ``<kind>-actor`` from the authenticated user. A
*pending command* is one whose id annotation is present. Only one is decided at a time,
in the order of :data:`ORDER` (the registry's); its annotations are removed once it is in
the ledger. Each kind's annotations and bounds are its spec's
(:data:`agentrun.core.commands.registry.COMMANDS`): nothing here names a kind.

Admission also stamps ``<kind>-epoch`` (the epoch of stamping in force when the command
was written, see :mod:`agentrun.core.policies.stamping`) and, on the commands an owner check guards,
``<kind>-override`` (``"true"`` when the writer holds the verb ``override`` on the slot).
A command without them cannot be trusted: it is refused, never guessed.

Every value is checked against its bound (:mod:`agentrun.api.bounds`) here, where it is
read: a command with a value out of bounds is *malformed* (rejected into the ledger,
predicate ``Malformed``, or ``BlankReason`` for an oversize reason), and the command
carries only clipped values, so nothing a person writes can grow what is stored. A
request id that is itself out of bounds is replaced by ``invalid-<hash>`` of it, so the
rejection is still recorded once and found again as a duplicate.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from agentrun.api import bounds
from agentrun.api.slots import Predicate
from agentrun.core.commands import ledger, registry
from agentrun.core.commands.spec import Bound, CommandSpec

# A command's shape: its annotations, derived from its word (``CommandSpec``'s properties).
Shape = CommandSpec
SHAPES = registry.COMMANDS
ORDER = tuple(shape.kind for shape in SHAPES)
ALL_KEYS = frozenset(key for shape in SHAPES for key in shape.keys)


@dataclass(frozen=True, kw_only=True)
class Pending:
    """A pending command as written, and the annotations that carry it."""

    command: ledger.Command
    keys: tuple[str, ...]
    stamped: bool
    epoch: str | None = None
    malformed: str | None = None
    predicate: Predicate = Predicate.MALFORMED


BOUNDS: Mapping[str, Bound] = {
    **{name: field.bound for name, field in registry.FIELDS.items()},
    "actor": Bound(chars=bounds.ACTOR_CHARS),
}


def problem(key: str, value: str, bound: Bound) -> str | None:
    """Why ``value`` (of annotation ``key``) is out of ``bound``, or None: the bounds
    admission checks too (``bound.json`` is the command's own check, and the plugin's)."""
    if bound.in_bytes:
        return bounds.problem(key=key, value=value, max_bytes=bound.chars)
    return bounds.problem(key=key, value=value, chars=bound.chars, pattern=bound.pattern)


def _clipped(value: str | None, bound: Bound) -> str | None:
    if value is None:
        return None
    if bound.in_bytes:
        return bounds.clip_bytes(value, limit=bound.chars)
    return bounds.clip(value, limit=bound.chars)


def request_id_problem(key: str, request_id: str) -> str | None:
    if not request_id.strip():
        return f"{key} must be a non-blank request id"
    return bounds.problem(key=key, value=request_id, chars=bounds.REQUEST_ID_CHARS,
                          pattern=bounds.REQUEST_ID_PATTERN)


def invalid_id(key: str, request_id: str) -> str:
    """The ledger id under which a command with an unusable request id is recorded.

    Hashed with its annotation ``key``, so the same bad id under two kinds of command is
    two entries, not a request id reused.
    """
    return f"invalid-{hashlib.sha256(f'{key}={request_id}'.encode()).hexdigest()[:16]}"


def pending(annotations: Mapping[str, str]) -> Pending | None:
    """The first pending command on a slot, in :data:`ORDER`, or None.

    ``command.override`` is the stamped ``<kind>-override``; whether it, the actor and the
    epoch can be believed is :func:`agentrun.core.policies.stamping.refusal`'s to say.
    """
    for shape in SHAPES:
        request_id = annotations.get(shape.id)
        if request_id is None:
            continue
        actor = annotations.get(shape.actor) or None
        values = {field: annotations.get(key) for field, key in shape.fields.items()}
        malformed = request_id_problem(shape.id, request_id)
        if malformed is not None:
            request_id = invalid_id(shape.id, request_id)
        predicate = Predicate.MALFORMED
        checked = [(shape.actor, "actor", actor),
                   *((shape.fields[field], field, value) for field, value in values.items())]
        for key, field, value in checked:
            if malformed is None and value is not None:
                malformed = problem(key, value, BOUNDS[field])
                if malformed is not None and field == "reason":
                    predicate = Predicate.BLANK_REASON
        clip = {field: _clipped(value, BOUNDS[field]) for field, value in values.items()}
        command = ledger.Command(
            kind=shape.kind, request_id=request_id, actor=_clipped(actor, BOUNDS["actor"]),
            override=shape.override is not None and annotations.get(shape.override) == "true",
            granted=frozenset(verb for verb, key in shape.granted.items()
                              if annotations.get(key) == "true"),
            **clip)
        keys = tuple(k for k in shape.keys if k in annotations)
        epoch = annotations.get(shape.epoch) or None
        return Pending(command=command, keys=keys, stamped=actor is not None,
                       epoch=epoch, malformed=malformed, predicate=predicate)
    return None

