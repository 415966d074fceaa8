"""The applier: every kind's steps (``core.base.actions``) mapped to their ``Writer`` calls.

One place turns a step into a write (each with its precondition: ``agentrun.kube.writes``)
and reports what the write met as an *outcome*: :class:`Applied`; :class:`Found`, a
create that met AlreadyExists, with the object found under its name; :class:`Taken`, a
batch of creates, with what was found under the names taken; :class:`Refused`, a create
the API server rejected. The applier never decides: it never calls the core. What
follows a create that failed is the reconcile loop's to ask the core
(``steps.on_exists``, ``attemptlife.on_rejected``), and the loop records the Events and
tallies of what was written. A :class:`writes.Conflict` (the object changed or vanished
since it was read, or was created and deleted meanwhile) is raised, for the loop to read
again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentrun.api import names
from agentrun.api.meta import ObjectMeta
from agentrun.api.runs import AgentRun
from agentrun.api.slots import Slot
from agentrun.core.base import actions
from agentrun.kube import reads, writes


@dataclass(frozen=True)
class Applied:
    """The write was made."""


@dataclass(frozen=True, kw_only=True)
class Found:
    """A create met AlreadyExists; ``found`` is the object under its name."""

    found: reads.Object = field(repr=False)


@dataclass(frozen=True, kw_only=True)
class Taken:
    """A batch of creates was made; ``found``: by name, the objects found under names a
    create of it met taken (AlreadyExists), to be judged by the next decision."""

    found: Mapping[str, reads.Object] = field(default_factory=dict, repr=False)


@dataclass(frozen=True, kw_only=True)
class Refused:
    """A create the API server rejected (forbidden, invalid): ``error`` as raised."""

    error: writes.Rejected

    @property
    def status(self) -> int:
        return self.error.status

    @property
    def message(self) -> str:
        return str(self.error)


Outcome = Applied | Found | Taken | Refused


@dataclass(frozen=True, kw_only=True)
class Target:
    """The object a step writes to, as read: the slot (with its attempt's lease, which a
    :class:`~actions.Tombstone` replaces) or the run. A create, a LaunchSpec status and
    the stamping epoch carry their object in the step.

    ``taken``: the run reconcile's record of the objects found under names a batch of
    creates met taken, filled in place as the batch goes, so that what was found before a
    create raised (a conflict: read again) is still judged on the next look, not created
    again.
    """

    slot: Slot | None = None
    lease: Mapping[str, Any] | None = None
    run: AgentRun | None = None
    taken: dict[str, reads.Object] | None = field(default=None, compare=False)


class Applier:
    """Maps each step to its write; see the module docstring."""

    def __init__(self, *, writer: writes.Writer) -> None:
        self.writer = writer

    def apply(self, step: actions.Write, *, target: Target | None = None) -> Outcome:
        """Make the write ``step`` names on ``target``; what it met."""
        on = target or Target()
        writer = self.writer
        if isinstance(step, actions.Create):
            return self.create(step)
        if isinstance(step, actions.Creates):
            return self.creates(step, into={} if on.taken is None else on.taken)
        if isinstance(step, actions.WriteStatus):
            assert on.slot is not None
            writer.slot_status(on.slot, step.status, point=step.point)
        elif isinstance(step, actions.DeletePod):
            assert on.slot is not None
            writer.delete_pod(namespace=on.slot.metadata.namespace or "", name=step.name,
                              uid=step.uid, point=step.point)
        elif isinstance(step, actions.Tombstone):
            assert on.lease is not None
            writer.tombstone(lease=dict(on.lease), annotations=step.annotations,
                             point=step.point)
        elif isinstance(step, actions.AnnotateLease):
            writer.annotate_lease(lease=dict(step.lease), annotations=step.annotations,
                                  point=step.point)
        elif isinstance(step, actions.RemoveCommand):
            assert on.slot is not None
            writer.remove_annotations(
                kind="Slot", namespace=on.slot.metadata.namespace or "",
                name=on.slot.metadata.name, resource_version=on.slot.metadata.resource_version,
                keys=step.keys, point=step.point, labels=step.labels)
        elif isinstance(step, actions.RemoveRunCommand):
            assert on.run is not None
            meta = on.run.metadata
            writer.remove_annotations(kind="AgentRun", namespace=meta.namespace or "",
                                      name=meta.name, resource_version=meta.resource_version,
                                      keys=step.keys, point=step.point)
        elif isinstance(step, actions.WriteRun):
            assert on.run is not None
            writer.custom_status(status_body(kind="AgentRun", read=on.run.metadata,
                                             status=step.status.wire()), point=step.point)
        elif isinstance(step, actions.SetFinalizers):
            assert on.run is not None
            meta = on.run.metadata
            writer.set_finalizers(kind="AgentRun", namespace=meta.namespace or "",
                                  name=meta.name, resource_version=meta.resource_version,
                                  finalizers=step.finalizers, point=step.point)
        elif isinstance(step, actions.WriteLaunchSpec):
            writer.custom_status(status_body(kind="LaunchSpec", read=step.spec.metadata,
                                             status=step.status.wire()), point=step.point)
        else:
            assert isinstance(step, actions.MintEpoch)
            writer.stamping_secret(step.body)
        return Applied()

    def create(self, step: actions.Create) -> Applied | Found | Refused:
        """Create one object; AlreadyExists is :class:`Found` (gone meanwhile: a conflict)."""
        try:
            self.writer.create(step.body, point=step.point)
        except writes.Exists as exists:
            if exists.found is None:
                raise writes.Conflict("created and deleted meanwhile") from None
            return Found(found=exists.found)
        except writes.Rejected as rejected:
            return Refused(error=rejected)
        return Applied()

    def creates(self, step: actions.Creates, *, into: dict[str, reads.Object]) -> Taken:
        """Create every object of the batch, in order, recording in ``into`` (as it goes)
        what was found under a name taken; a rejection stops it (raised)."""
        for create in step.creates:
            outcome = self.create(create)
            if isinstance(outcome, Refused):
                raise outcome.error
            if isinstance(outcome, Found):
                into[create.body["metadata"]["name"]] = outcome.found
        return Taken(found=dict(into))


def status_body(*, kind: str, read: ObjectMeta, status: dict[str, Any]) -> dict[str, Any]:
    """The body replacing a custom object's status: ``read``'s resourceVersion is the
    precondition (the server takes only ``status`` from it)."""
    return {"apiVersion": names.API_VERSION, "kind": kind,
            "metadata": {"name": read.name, "namespace": read.namespace,
                         "resourceVersion": read.resource_version},
            "status": status}
