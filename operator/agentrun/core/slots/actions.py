"""The writes a slot's decision may ask for (*actions*), one per step, or :class:`Wait`.

Each is performed by the applier with its precondition (``agentrun.kube.writes``); the
decisions that choose one are in :mod:`agentrun.core.slots.steps`, over the
:class:`~agentrun.core.slots.inputs.World` they read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentrun.api.slots import SlotStatus
from agentrun.core.base import events
from agentrun.core.slots.inputs import World


@dataclass(frozen=True, kw_only=True)
class WriteStatus:
    status: SlotStatus
    event: events.Event | None = None
    point: str = "status"


@dataclass(frozen=True, kw_only=True)
class Create:
    """Create an object; AlreadyExists is success only if ``matches`` says it is ours."""

    body: dict[str, Any]
    point: str
    claim: bool = False  # a failure ends the attempt as ClaimFailed
    # A claim's: the claiming world it was decided in (what a failure is decided in).
    within: World | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, kw_only=True)
class DeletePod:
    name: str
    uid: str | None
    message: str
    point: str = "delete-pod"


@dataclass(frozen=True, kw_only=True)
class Tombstone:
    """Clear the lease's holder and record the attempt's end in its annotations."""

    name: str
    annotations: dict[str, str]
    point: str = "tombstone"


@dataclass(frozen=True, kw_only=True)
class AnnotateLease:
    """Set annotations of a held Lease as read (``lease``: its resourceVersion is the
    precondition), its holder kept: a claim's Lease taking the LaunchSpec re-pinned."""

    lease: Mapping[str, Any] = field(repr=False, compare=False)
    annotations: dict[str, str]
    point: str = "annotate-lease"


@dataclass(frozen=True, kw_only=True)
class RemoveCommand:
    """A metadata patch of the slot: remove command annotations, and set ``labels``."""

    keys: tuple[str, ...]
    event: events.Event | None = None
    point: str = "remove-command"
    labels: dict[str, str] | None = None


@dataclass(frozen=True, kw_only=True)
class Wait:
    """Nothing to do now; look again at ``until`` (or on the next change)."""

    message: str
    until: datetime | None = None


Step = WriteStatus | Create | DeletePod | Tombstone | AnnotateLease | RemoveCommand | Wait
