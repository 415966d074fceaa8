"""Reading commands from a Slot's annotations (DESIGN.md section 5).

A person writes a command with ``kubectl annotate`` (or the plugin): a request id, the
command's fields, and admission stamps ``<kind>-actor`` from the authenticated user. A
*pending command* is one whose id annotation is present. Only one is decided at a time,
in the order of :data:`ORDER`; its annotations are removed once it is in the ledger.

A command without a stamped actor cannot be trusted (the admission policy was missing
or did not match when it was written): it is refused, never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentrun.api import names
from agentrun.api.slots import CommandKind
from agentrun.core import guards


@dataclass(frozen=True, kw_only=True)
class Shape:
    """The annotations one kind of command uses."""

    kind: CommandKind
    id: str
    actor: str
    fields: Mapping[str, str]  # guards.Command field -> annotation

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.id, self.actor, *self.fields.values())


SHAPES = (
    Shape(kind=CommandKind.REASSIGN, id=names.REASSIGN_ID, actor=names.REASSIGN_ACTOR,
          fields={"reason": names.REASSIGN_REASON, "worker_class": names.REASSIGN_WORKER_CLASS,
                  "run": names.REASSIGN_RUN, "tenant": names.REASSIGN_TENANT}),
    Shape(kind=CommandKind.CLAIM, id=names.CLAIM_ID, actor=names.CLAIM_ACTOR, fields={}),
    Shape(kind=CommandKind.HOLD, id=names.HOLD_ID, actor=names.HOLD_ACTOR,
          fields={"reason": names.HOLD_REASON}),
    Shape(kind=CommandKind.RELEASE, id=names.RELEASE_ID, actor=names.RELEASE_ACTOR, fields={}),
    Shape(kind=CommandKind.GIVE_UP, id=names.GIVE_UP_ID, actor=names.GIVE_UP_ACTOR,
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
    malformed: str | None = None
    written_at: datetime | None = None


def pending(annotations: Mapping[str, str], *,
            managed_fields: Sequence[Mapping[str, Any]] = ()) -> Pending | None:
    """The first pending command on a slot, in :data:`ORDER`, or None.

    ``managed_fields`` (the slot's ``metadata.managedFields``) tell when the command's
    annotations were last written (``written_at``), so a command written before the
    actor-stamping policy existed can be told from one it stamped.
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
            tenant=values.get("tenant"))
        keys = tuple(k for k in shape.keys if k in annotations)
        return Pending(command=command, keys=keys, stamped=actor is not None,
                       malformed=malformed, written_at=written_at(managed_fields, keys))
    return None


def written_at(managed_fields: Sequence[Mapping[str, Any]],
               keys: Sequence[str]) -> datetime | None:
    """The latest time any of ``keys`` (annotations) was written, from managedFields.

    Each managedFields entry says which fields one manager last set (``fieldsV1``) and
    when (``time``, to the second). None when no entry owns any of the keys.
    """
    times = []
    for entry in managed_fields:
        owned = (((entry.get("fieldsV1") or {}).get("f:metadata") or {})
                 .get("f:annotations") or {})
        if entry.get("time") and any(f"f:{key}" in owned for key in keys):
            times.append(datetime.fromisoformat(str(entry["time"]).replace("Z", "+00:00")))
    return max(times, default=None)
