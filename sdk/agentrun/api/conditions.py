"""Kubernetes-convention conditions and the pure helpers that set them.

A *condition* is one observation about an object (``type``, ``status``, ``reason``,
``message``, ``observedGeneration``, ``lastTransitionTime``). ``lastTransitionTime``
changes only when ``status`` flips, as in ``meta.SetStatusCondition`` of apimachinery,
so that a re-reconcile that finds the same truth writes nothing new.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from agentrun.api import bounds, texts
from agentrun.api.models import Model

ConditionStatus = Literal["True", "False", "Unknown"]
MAX_CONDITIONS = 32


class Condition(Model):
    """One observation of the object, written by the operator (Kubernetes conventions)."""

    type: str = Field(min_length=1, max_length=316,
                      description="what is observed (Ready, Held, Valid, ...): one entry a type")
    status: ConditionStatus = Field(description="whether it holds: True, False or Unknown")
    reason: str = Field(
        min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="why, as one CamelCase word a program may match on")
    message: texts.Message = Field(
        default="", description="why, in words a person can act on (escaped and clipped)")
    observed_generation: int | None = Field(
        default=None, ge=0, description="the object's metadata.generation it was decided for")
    last_transition_time: datetime = Field(
        description="when status last changed (not when the condition was last written)")


# A status's conditions: a list keyed by ``type`` (the server merges server-side-apply
# patches per type), bounded so CEL rules and the object size stay predictable.
Conditions = Annotated[list[Condition], Field(
    max_length=MAX_CONDITIONS, description="the object's conditions, one a type (kubectl "
    "describe shows them); written by the operator only",
    json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
)]


def find(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def is_true(conditions: list[Condition], type_: str) -> bool:
    found = find(conditions, type_)
    return found is not None and found.status == "True"


def set_condition(
    conditions: list[Condition],
    *,
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    now: datetime,
    observed_generation: int | None = None,
) -> list[Condition]:
    """Return a new list with ``type_`` set; the transition time moves only on a flip."""
    old = find(conditions, type_)
    transition = old.last_transition_time if old is not None and old.status == status else now
    new = Condition(
        type=type_,
        status=status,
        reason=reason,
        # escaped as an Event's is: `kubectl describe` prints conditions as they are
        message=bounds.clip(bounds.printable(message), limit=bounds.MESSAGE_CHARS),
        observed_generation=observed_generation,
        last_transition_time=transition,
    )
    return [new if c.type == type_ else c for c in conditions] if old else [*conditions, new]


def remove(conditions: list[Condition], type_: str) -> list[Condition]:
    return [c for c in conditions if c.type != type_]
