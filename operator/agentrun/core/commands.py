"""Reading commands from a Slot's annotations (DESIGN.md section 5).

A person writes a command with ``kubectl annotate`` (or the plugin): a request id, the
command's fields, and admission stamps ``<kind>-actor`` from the authenticated user. A
*pending command* is one whose id annotation is present. Only one is decided at a time,
in the order of :data:`ORDER`; its annotations are removed once it is in the ledger.

Admission also stamps ``<kind>-epoch`` (the epoch of stamping in force when the command
was written, see :mod:`agentrun.core.stamping`) and, on the commands an owner check guards,
``<kind>-override`` (``"true"`` when the writer holds the verb ``override`` on the slot).
A command without them cannot be trusted: it is refused, never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agentrun.api import names
from agentrun.api.slots import CommandKind
from agentrun.core import guards


@dataclass(frozen=True, kw_only=True)
class Shape:
    """The annotations one kind of command uses."""

    kind: CommandKind
    id: str
    actor: str
    epoch: str
    fields: Mapping[str, str]  # guards.Command field -> annotation
    override: str | None = None  # stamped only where an owner check applies

    @property
    def stamped(self) -> tuple[str, ...]:
        """The annotations admission stamps (a person's value for them never stands)."""
        return (self.actor, self.epoch, *((self.override,) if self.override else ()))

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.id, *self.stamped, *self.fields.values())


SHAPES = (
    Shape(kind=CommandKind.REASSIGN, id=names.REASSIGN_ID, actor=names.REASSIGN_ACTOR,
          epoch=names.REASSIGN_EPOCH, override=names.REASSIGN_OVERRIDE,
          fields={"reason": names.REASSIGN_REASON, "worker_class": names.REASSIGN_WORKER_CLASS,
                  "run": names.REASSIGN_RUN, "tenant": names.REASSIGN_TENANT}),
    Shape(kind=CommandKind.CLAIM, id=names.CLAIM_ID, actor=names.CLAIM_ACTOR,
          epoch=names.CLAIM_EPOCH, fields={}),
    Shape(kind=CommandKind.HOLD, id=names.HOLD_ID, actor=names.HOLD_ACTOR,
          epoch=names.HOLD_EPOCH, fields={"reason": names.HOLD_REASON}),
    Shape(kind=CommandKind.RELEASE, id=names.RELEASE_ID, actor=names.RELEASE_ACTOR,
          epoch=names.RELEASE_EPOCH, fields={}),
    Shape(kind=CommandKind.GIVE_UP, id=names.GIVE_UP_ID, actor=names.GIVE_UP_ACTOR,
          epoch=names.GIVE_UP_EPOCH, override=names.GIVE_UP_OVERRIDE,
          fields={"reason": names.GIVE_UP_REASON}),
)
MAX_REQUEST_ID = 253
ORDER = tuple(shape.kind for shape in SHAPES)
ALL_KEYS = frozenset(key for shape in SHAPES for key in shape.keys)


@dataclass(frozen=True, kw_only=True)
class Pending:
    """A pending command as written, and the annotations that carry it."""

    command: guards.Command
    keys: tuple[str, ...]
    stamped: bool
    epoch: str | None = None
    malformed: str | None = None


def pending(annotations: Mapping[str, str]) -> Pending | None:
    """The first pending command on a slot, in :data:`ORDER`, or None.

    ``command.override`` is the stamped ``<kind>-override``; whether it, the actor and the
    epoch can be believed is :func:`agentrun.core.stamping.refusal`'s to say.
    """
    for shape in SHAPES:
        request_id = annotations.get(shape.id)
        if request_id is None:
            continue
        actor = annotations.get(shape.actor) or None
        values = {field: annotations.get(key) for field, key in shape.fields.items()}
        malformed = None
        if not request_id.strip() or len(request_id) > MAX_REQUEST_ID:
            malformed = (f"{shape.id} must be a non-blank request id of at most "
                         f"{MAX_REQUEST_ID} characters")
            request_id = "-"
        command = guards.Command(
            kind=shape.kind, request_id=request_id, actor=actor, reason=values.get("reason"),
            worker_class=values.get("worker_class"), run=values.get("run"),
            tenant=values.get("tenant"),
            override=shape.override is not None and annotations.get(shape.override) == "true")
        keys = tuple(k for k in shape.keys if k in annotations)
        epoch = annotations.get(shape.epoch) or None
        return Pending(command=command, keys=keys, stamped=actor is not None,
                       epoch=epoch, malformed=malformed)
    return None

