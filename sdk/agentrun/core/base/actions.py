"""The one vocabulary of *steps*: every write a decision may ask for, or :class:`Wait`.

A step names one write and what it needs, nothing of how it is made: the applier
(``agentrun.controller.applier``) maps each to its ``agentrun.kube.writes.Writer`` call,
with its precondition. The slot's decisions are in :mod:`agentrun.core.slots.steps`, the
run's in :mod:`agentrun.core.runs.runsteps`; a LaunchSpec's status and the stamping epoch
are decided by their controllers (:class:`WriteLaunchSpec`, :class:`MintEpoch`).

``point`` names the write's *crash point* (``agentrun.kube.crashpoints``): fault-injection
tests stop the operator right after it. It is a label only; nothing decides on it. What a
decision must know of a step is a typed field: ``fresh`` (it must be decided again from a
quorum read before it is taken: a cache that stopped receiving events must never end an
attempt, delete its pod, or accept a command on a lease judged expired) and ``shared`` (a
create of an object the run's slots share).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentrun.api.launchspecs import LaunchSpec, LaunchSpecStatus
from agentrun.api.runs import AgentRunStatus, JournalPin
from agentrun.api.slots import SlotStatus
from agentrun.core.base import events

Object = Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class WriteStatus:
    """Replace the slot's status under the resourceVersion read."""

    status: SlotStatus
    event: events.Event | None = None
    point: str = "status"
    fresh: bool = False  # decided again from a quorum read first (the module docstring)


@dataclass(frozen=True, kw_only=True)
class Create:
    """Create an object; AlreadyExists is success only if the object found is judged ours.

    ``claim``: the Lease or Pod of a claim, whose failure ends the attempt as ClaimFailed
    (decided in the claiming world the create came from: ``decisions.Decision.world``).
    ``shared``: an object the run's slots share (its LaunchSpec snapshot), which slots
    deciding at once in one process create once.
    """

    body: dict[str, Any]
    point: str
    claim: bool = False
    shared: bool = False


@dataclass(frozen=True, kw_only=True)
class DeletePod:
    """Delete the attempt's pod (uid the precondition); always decided from a fresh read."""

    name: str
    uid: str | None
    message: str
    point: str = "delete-pod"
    fresh: bool = True


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
class RemoveRunCommand:
    """A metadata patch of the run: remove a decided command's annotations."""

    keys: tuple[str, ...]
    point: str = "remove-command"


@dataclass(frozen=True, kw_only=True)
class Creates:
    """Create every object of ``creates`` in one pass (none depends on another): a run's
    configuration snapshots, or its missing Slots. An AlreadyExists is not judged here:
    the object found is handed back for the next decision to judge."""

    creates: tuple[Create, ...]


@dataclass(frozen=True, kw_only=True)
class WriteRun:
    """Replace the run's status under the resourceVersion read; then look at ``until``."""

    status: AgentRunStatus
    event: events.Event | None = None
    point: str = "run-status"
    until: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class WriteLaunchSpec:
    """Replace a LaunchSpec's status (the operator's only write to one) under the
    resourceVersion of ``spec``, the LaunchSpec as read."""

    spec: LaunchSpec = field(repr=False, compare=False)
    status: LaunchSpecStatus
    point: str = "launch-spec-status"


@dataclass(frozen=True, kw_only=True)
class MintEpoch:
    """Create or replace the stamping epoch Secret ``body`` (``core.policies.stamping``);
    its resourceVersion, when set, is the precondition. Its crash point is the writer's
    own, ``stamping-epoch``."""

    body: dict[str, Any] = field(repr=False)


@dataclass(frozen=True, kw_only=True)
class SetFinalizers:
    """Replace the run's ``metadata.finalizers`` with ``finalizers`` under the
    resourceVersion read (one merge patch)."""

    finalizers: tuple[str, ...]
    point: str


@dataclass(frozen=True, kw_only=True)
class DeleteJournal:
    """Delete every object of the run's journal (``journal``: its pin) from its store; not
    a write to the API server (nothing to precondition), and repeatable: a deletion cut
    short is finished by the next."""

    journal: JournalPin


@dataclass(frozen=True, kw_only=True)
class ForkSlot:
    """One node of a fork, copied (``core.runs.runforks``): the source's slot and the
    fork's, where the copy stops (``step``: that step and the records after it are left
    out, as a rerun from it would; None: the whole prefix), the source slot's attempt
    count and its own reruns' cuts and re-sends (applied as its next attempt would), the
    answers its status holds for its next attempt (encoded records, as attempt
    ``attempts + 1``'s), why it cannot be copied now if it was not already, and the Lease
    ``<slot>-0`` to create, less the journal annotations the copy adds."""

    node: str
    source_slot: str
    slot: str
    step: str | None
    attempts: int
    cuts: tuple[str, ...] = ()
    resends: tuple[str, ...] = ()
    owners: tuple[str, ...] = ()  # the uids whose Leases are the source slot's: its, its run's
    answers: tuple[str, ...] = ()  # answers the source slot holds for its next attempt's Lease
    problem: tuple[str, str] | None = None  # (reason, message): why not copied unless it was
    lease: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ForkJournal:
    """Copy what a fork inherits (``slots``) from the source run's journal (``source``)
    into the fork's (``journal``): objects in the store and one Lease per slot, each
    written once under a deterministic name, so a copy cut short is finished by the next."""

    source: JournalPin
    journal: JournalPin
    namespace: str
    source_run: str
    source_uid: str
    slots: tuple[ForkSlot, ...]


@dataclass(frozen=True, kw_only=True)
class Wait:
    """Nothing to do now; look again at ``until`` (or on the next change)."""

    message: str
    until: datetime | None = None


Step = WriteStatus | Create | DeletePod | Tombstone | AnnotateLease | RemoveCommand | Wait
"""A slot's step."""

Write = (WriteStatus | Create | DeletePod | Tombstone | AnnotateLease | RemoveCommand
         | Creates | WriteRun | WriteLaunchSpec | MintEpoch | SetFinalizers | RemoveRunCommand)
"""Any step that writes: what the applier takes."""
