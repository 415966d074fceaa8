"""What the operator read for one slot (the *world*) and the writes it may make (*steps*).

A :class:`World` is a snapshot of everything a decision about one slot needs, read at
``now`` on the operator's clock; a *step* is one write (or :class:`Wait`). The decisions
that map one to the other are in :mod:`agentrun.core.steps`; the applier that performs a
step, each with its precondition, is ``agentrun.kube.writes``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentrun.api.launchspecs import LaunchSpec, LaunchSpecSpec
from agentrun.api.runs import AgentRun
from agentrun.api.slots import Slot, SlotState, SlotStatus
from agentrun.core import guards
from agentrun.core.observations import LeaseObservation
from agentrun.core.stamping import Stamping


@dataclass(frozen=True, kw_only=True)
class AttemptObjects:
    """The Pod and Lease of one attempt as read (None: not found)."""

    name: str
    pod: Mapping[str, Any] | None
    lease: Mapping[str, Any] | None


@dataclass(frozen=True, kw_only=True)
class World:
    """What the operator read for one slot, at ``now`` on its own clock.

    ``attempt``: the objects of the pending worker when Claiming, the active one when
    Active, else the prior one. ``dependencies``: state of each slot this one depends on,
    by node (absent: not created yet). ``snapshots``: names of the LaunchSpec snapshots
    the slot owns. ``launch_spec``: the pinned spec read back from its snapshot, or the
    reason it could not be. ``stamping``: whether stamping is in force now and under which
    epoch, read after the slot (only while a command is pending; None: not read, and no
    command is trusted). ``pins_problem``: why the run's pinned
    configuration snapshots cannot be mounted as pinned (read only while Claiming).
    ``first_seen``: when this process first read the attempt's lease (on its own clock).
    ``ticks``: now on the operator's monotonic clock, the clock of ``observation`` (None:
    the same as ``now``, as in tests that move one clock). ``active_in_run``: how many
    other slots of the run have an attempt Claiming or Active (read only under maxActive).
    ``run`` is None when the slot has no live run to serve: gone, being deleted, or not
    the run that controls this slot (a same-name run created later).
    """

    slot: Slot
    run: AgentRun | None
    tenant: str | None
    now: datetime
    dependencies: Mapping[str, SlotState] = field(default_factory=dict)
    launch_specs: Sequence[LaunchSpec] = ()
    snapshots: frozenset[str] = frozenset()
    launch_spec: LaunchSpecSpec | None = None
    launch_spec_error: str | None = None
    attempt: AttemptObjects | None = None
    observation: LeaseObservation | None = None
    stamping: Stamping | None = None
    pins_problem: str | None = None
    first_seen: datetime | None = None
    ticks: datetime | None = None
    active_in_run: int = 0


@dataclass(frozen=True, kw_only=True)
class WriteStatus:
    status: SlotStatus
    event: guards.Event | None = None
    point: str = "status"


@dataclass(frozen=True, kw_only=True)
class Create:
    """Create an object; AlreadyExists is success only if ``matches`` says it is ours."""

    body: dict[str, Any]
    point: str
    claim: bool = False  # a failure ends the attempt as ClaimFailed


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
class RemoveCommand:
    """A metadata patch of the slot: remove command annotations, and set ``labels``."""

    keys: tuple[str, ...]
    event: guards.Event | None = None
    point: str = "remove-command"
    labels: dict[str, str] | None = None


@dataclass(frozen=True, kw_only=True)
class Wait:
    """Nothing to do now; look again at ``until`` (or on the next change)."""

    message: str
    until: datetime | None = None


Step = WriteStatus | Create | DeletePod | Tombstone | RemoveCommand | Wait
