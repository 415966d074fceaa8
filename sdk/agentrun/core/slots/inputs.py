"""What the operator read for one slot: the *world* a decision is made in.

A :class:`World` is a snapshot of everything a decision about one slot needs, read at
``now`` on the operator's clock. The writes a decision may ask for are in
:mod:`agentrun.core.base.actions`; the decisions that map one to the other are in
:mod:`agentrun.core.slots.steps`; the applier that performs a step, each write with its
precondition, is ``agentrun.controller.applier`` over ``agentrun.kube.writes``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from agentrun.api import conditions
from agentrun.api.launchspecs import LaunchSpec, LaunchSpecSpec
from agentrun.api.runs import AgentRun
from agentrun.api.slots import Slot, SlotState, SlotStatus
from agentrun.core.attempts import attemptobjects, lostnodes
from agentrun.core.attempts.observations import LeaseObservation
from agentrun.core.base import naming, owners
from agentrun.core.commands import guards, parsing, registry
from agentrun.core.machine import transitions
from agentrun.core.policies.stamping import Stamping


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
    Active, else the prior one. ``next_attempt``: the objects named for attempt n+1
    (n = ``attemptCount``) of an open slot not Claiming or Active: their Lease, when it is
    the slot's own and not tombstoned, says a claim is under way (the claim's commit
    point). ``blind``: how long the operator was blind (API failing, watch silent) since
    it last saw the attempt's lease renewed (before the first renewal: since it first read
    the lease); it never counts toward the lease's expiry or the start deadline.
    ``dependencies``: state of each slot this one depends on,
    by node (absent: not created yet); ``dependency_reruns``: the sum of their reruns
    (``status.reruns``), read whenever the slot has dependencies. ``snapshots``: names
    of the LaunchSpec snapshots the slot owns. ``launch_spec``: the pinned spec read back
    from its snapshot, or the reason it could not be. ``stamping``: whether stamping is in
    force now and under which epoch, read after the slot (only while a command is
    pending; None: not read, and no command is trusted). ``pins_problem``: why the run's
    pinned
    configuration snapshots cannot be mounted as pinned (read only while Claiming).
    ``first_seen``: when this process first read the attempt's lease (on its own clock);
    ``first_ticks``: the same moment on its monotonic clock (None: not known).
    ``ticks``: now on the operator's monotonic clock, the clock of ``observation`` (None:
    the same as ``now``, as in tests that move one clock). ``active_in_run``: how many
    other slots of the run have an attempt Claiming or Active (read only under maxActive).
    ``run`` is None when the slot has no live run to serve: gone, being deleted, or not
    the run that controls this slot (a same-name run created later): see
    :func:`serving_run`. What is read at all is :func:`reads_for` of the slot.
    """

    slot: Slot
    run: AgentRun | None
    tenant: str | None
    now: datetime
    dependencies: Mapping[str, SlotState] = field(default_factory=dict)
    # The sum of the reruns of the slots this one depends on (None: not read; read with
    # the run's slots while Pending, else each dependency by name).
    dependency_reruns: int | None = None
    launch_specs: Sequence[LaunchSpec] = ()
    snapshots: frozenset[str] = frozenset()
    launch_spec: LaunchSpecSpec | None = None
    launch_spec_error: str | None = None
    attempt: AttemptObjects | None = None
    next_attempt: AttemptObjects | None = None
    blind: timedelta = timedelta(0)
    observation: LeaseObservation | None = None
    stamping: Stamping | None = None
    # The ConfigMaps a pending command names by reference: name -> data (None: not found).
    referenced: Mapping[str, Mapping[str, str] | None] = field(default_factory=dict)
    # Where the records a pending rerun names were committed in the slot's journal, by key
    # (``api.cuts`` positions), read when it is decided; a text: why it could not be read.
    commits: Mapping[str, tuple[tuple[int, int, int], ...]] | str | None = None
    # Why the run's journal cannot be read back (deleted, or its retention deleting it).
    journal_gone: str | None = None
    pins_problem: str | None = None
    first_seen: datetime | None = None
    first_ticks: datetime | None = None
    ticks: datetime | None = None
    active_in_run: int = 0
    # The Node of the attempt's pod, read only while that pod is stuck (being deleted or
    # Unknown, not finished): core.attempts.lostnodes.
    node: lostnodes.NodeView | None = None


CLAIM_OPEN = frozenset({SlotState.PENDING, SlotState.READY, SlotState.RETRY_WAIT})


def with_status(world: World, status: SlotStatus) -> World:
    """The same world with the slot's status replaced (a status decided, not yet written)."""
    return dataclasses.replace(world, slot=world.slot.model_copy(update={"status": status}))


def with_found(world: World, *, kind: str, found: Mapping[str, Any]) -> World:
    """The world with ``found`` (an attempt's Lease or Pod met on AlreadyExists) in it."""
    name = (found.get("metadata") or {}).get("name")
    key = "lease" if kind == "Lease" else "pod"
    update: dict[str, Any] = {}
    for where in ("attempt", "next_attempt"):
        objects = getattr(world, where)
        if objects is not None and objects.name == name:
            update[where] = dataclasses.replace(objects, **{key: found})
    return dataclasses.replace(world, **update)


def serving_run(*, slot: Slot, run: AgentRun | None) -> AgentRun | None:
    """The run a slot serves: None when gone, being deleted, or a later run of the same
    name (not the slot's controlling owner)."""
    if run is None or run.metadata.deletion_timestamp is not None:
        return None
    if owners.controller_uid(slot.metadata) != run.metadata.uid:
        return None
    return run


@dataclass(frozen=True, kw_only=True)
class Reads:
    """What a step about one slot needs read besides the slot, its run and its tenant.

    ``siblings``: the run's other slots (for dependencies, or to count busy ones under
    maxActive); ``selecting``: the namespace's LaunchSpecs and the run's snapshots (a
    pin may be chosen: Pending, a reassignment, a claim waiting on its LaunchSpec);
    ``worker``: the attempt whose Pod and Lease to read (pending, active, else prior);
    ``next_worker``: the attempt n+1 whose Pod and Lease say
    whether a claim is under way; ``stamping``: a command is pending that is not in the
    ledger yet (one already there is only removed, whatever the stamping: its three quorum
    reads would be spent on nothing, and they count against the operator's --qps);
    ``referenced``: the ConfigMap a pending command names by reference (an answer's
    ``value-from``), read once when it is decided; ``journal_keys``: the records a pending
    rerun names, looked up in the slot's journal when it is decided.
    """

    siblings: bool
    selecting: bool
    worker: str | None
    next_worker: str | None
    stamping: bool
    referenced: str | None = None
    journal_keys: tuple[str, ...] = ()
    # The slots it depends on, by name, read on their own (not the whole run) once it left
    # Pending: whether one was rerun since (``dependency_reruns``).
    dependencies: tuple[str, ...] = ()
    journal_request: str | None = None  # the command they are read for (its request id)


def next_worker(slot: Slot) -> str | None:
    """``<slot>-<n+1>`` for an open slot that may claim (None when Claiming or Active)."""
    status = slot.status
    if status.state not in CLAIM_OPEN or status.pending_worker or status.active_worker:
        return None
    return naming.attempt_name(slot=slot.metadata.name, number=status.attempt_count + 1)


def reads_for(slot: Slot, *, max_active: bool) -> Reads:
    """A pure function of the slot (and whether its run limits maxActive): see :class:`Reads`."""
    status = slot.status
    pending = parsing.pending(slot.metadata.annotations)
    reassigning = pending is not None and registry.BY_KIND[pending.command.kind].selects
    pending_state = status.state is SlotState.PENDING
    return Reads(
        siblings=(pending_state and bool(slot.spec.depends_on)) or (
            max_active and status.state in CLAIM_OPEN),
        dependencies=() if pending_state else tuple(
            naming.slot_name(run=slot.spec.run, node=node) for node in slot.spec.depends_on),
        selecting=pending_state or reassigning or conditions.is_true(
            status.conditions, transitions.LAUNCH_SPEC_REFUSED),
        worker=status.pending_worker or status.active_worker or status.prior_worker,
        next_worker=next_worker(slot),
        stamping=pending is not None
        and guards.seen(status, pending.command.request_id) is None,
        referenced=None if pending is None or pending.malformed is not None
        or pending.command.value_from is None or guards.seen(
            status, pending.command.request_id) is not None
        else pending.command.value_from.split("/", 1)[0],
        journal_keys=() if pending is None or pending.malformed is not None
        or guards.seen(status, pending.command.request_id) is not None
        else registry.BY_KIND[pending.command.kind].journal_keys(pending.command, status),
        journal_request=None if pending is None else pending.command.request_id)



def deadline(world: World) -> datetime | None:
    """When the run's ``activeDeadlineSeconds`` passes (None: it has none, or no start)."""
    run = world.run
    if run is None or run.spec.active_deadline_seconds is None or run.status.start_time is None:
        return None
    return run.status.start_time + timedelta(seconds=run.spec.active_deadline_seconds)


def deadline_passed(world: World) -> bool:
    limit = deadline(world)
    return limit is not None and world.now >= limit


def busy(slot: Slot, *, next_lease: Mapping[str, Any] | None) -> bool:
    """Does ``slot`` hold one of its run's maxActive places: an attempt Claiming or
    Active, or a claim under way (its Lease of attempt n+1, read as ``next_lease``)?"""
    if slot.status.state in (SlotState.CLAIMING, SlotState.ACTIVE):
        return True
    return next_worker(slot) is not None and attemptobjects.under_way(
        next_lease, slot_uid=slot.metadata.uid or "", attempt=slot.status.attempt_count + 1)
