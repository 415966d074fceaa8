"""A run's next step, decided purely from what the operator read for it (its *world*).

The run side of :mod:`agentrun.core.slots.steps`: a :class:`RunWorld` is everything one
decision about a run needs, read at ``now``; :func:`next_step` maps it to one step:

- ``actions.Creates``: create a batch of objects (the run's configuration snapshots, or
  every missing Slot at once, whatever the workflow's width), each a ``actions.Create``;
  an AlreadyExists is judged per object on the next look, from ``RunWorld.taken``;
- ``actions.WriteRun``: replace the run's status (with its Event), then look again at
  ``until``; never returned when the status would not change;
- ``actions.Wait``: nothing to write now; look again at ``until`` (None: on a change).

The sequence (docs/design/runs-and-configuration.md): while unpinned, resolve, create the immutable
snapshots (deterministic names), then write ``status.pinned``; once pinned, never resolve
again: lay out the slots from the pinned workflow, then derive the status from them.
A status write ends a reconcile (the caller stops there), so one reconcile writes the
run's status at most once, and slot changes arriving meanwhile fold into the next one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from agentrun.api import conditions, names
from agentrun.api.configs import WorkflowDocument
from agentrun.api.runs import AgentRun, AgentRunStatus, ForkStatus, JournalSettings
from agentrun.api.slots import Slot
from agentrun.core.base import actions, events
from agentrun.core.policies.stamping import Stamping
from agentrun.core.runs import (
    resolution,
    rollup,
    runcommands,
    runforks,
    runjournals,
    runobjects,
)
from agentrun.core.slots import squats

Object = Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class RunWorld:
    """What the operator read for one live run (not being deleted), at ``now``.

    ``config_maps``: per configuration kind, the namespace's source ConfigMaps (read only
    while unpinned). ``snapshots``: the run's configuration snapshots found, by name (read
    only while unpinned; labels prove nothing, so each is still judged). ``workflow``: the
    pinned workflow read back from its snapshot, or why it cannot be (None: not pinned).
    ``slots``: the slots whose ``spec.run`` is the run (the run's own are picked by uid).
    ``taken``: objects found under a name the last batch tried to create (AlreadyExists),
    by name: ours counts as created, anything else is a squatter. ``journal``: the
    operator's journal settings (its flags, not read from the cluster), pinned on the run
    at launch; None: the operator has no journal store and runs get no journal pin.
    ``journal_problem``: why that setting cannot work for this run yet (checked by the
    operator before pinning: ``controller.journalchecks``); the run waits unpinned.
    ``stamping_epoch``: the stamping epoch in force, read (quorum) after the run while it is
    unpinned: the run's creator annotation is believed only if stamped under it.
    ``journal_left``, ``journal_error``, ``journal_live``, ``journal_orphaned``: read only
    for a run being deleted that still holds its journal's finalizer, or a finished run
    whose journal's retention is over (``core.runs.runjournals``): whether objects are
    left under its prefix, why the store could not say or delete them, its attempts still
    live, why its journal can never be deleted.
    """

    run: AgentRun
    tenant: str | None
    now: datetime
    config_maps: Mapping[str, Sequence[Object]] = field(default_factory=dict)
    snapshots: Mapping[str, Object] = field(default_factory=dict)
    workflow: WorkflowDocument | resolution.Problem | None = None
    slots: Sequence[Slot] = ()
    taken: Mapping[str, Object] = field(default_factory=dict)
    journal: JournalSettings | None = None
    journal_problem: resolution.Problem | None = None
    journal_left: int | None = None
    journal_error: str | None = None
    journal_live: Sequence[str] = ()
    journal_orphaned: str | None = None
    stamping_epoch: str | None = None  # read after the run, while unpinned: its creator's
    # Read after the run while it carries a command (a budget raise): is stamping in force.
    stamping: Stamping | None = None
    # While unpinned: the namespace's default budget (its tenant admin's), for a run that
    # names none.
    default_budget: str | None = None
    # A fork (``spec.fork``, ``core.runs.runforks``) until its journal is copied: its source
    # run (None: not found), the source's snapshots (while unpinned) and slots (once
    # pinned), and how the last copy went (None: not tried since the operator started).
    fork_source: AgentRun | None = None
    fork_snapshots: Mapping[str, Object] = field(default_factory=dict)
    fork_slots: Sequence[Slot] = ()
    fork_copied: ForkStatus | resolution.Problem | None = None


# How soon a run waiting on its journal setting is looked at again: a Secret created or a
# store started is not an event on the run.
JOURNAL_RECHECK = timedelta(seconds=10)

RunStep = (actions.Creates | actions.WriteRun | actions.Wait | actions.SetFinalizers
           | actions.DeleteJournal | actions.ForkJournal | actions.RemoveRunCommand)


def next_step(world: RunWorld) -> RunStep:
    """The one step to take for a run (the caller drops runs gone, and runs being deleted
    that hold no finalizer of ours)."""
    if world.run.metadata.deletion_timestamp is not None:
        return runjournals.deleting_step(run=world.run, slots=world.slots, now=world.now,
                                         left=world.journal_left, error=world.journal_error,
                                         live=world.journal_live,
                                         orphaned=world.journal_orphaned)
    command = runcommands.pending(world.run)
    if command is not None:  # a person's command comes first (an unpinned run's refused)
        if runcommands.decided(world.run, command):
            return actions.RemoveRunCommand(keys=runcommands.KEYS)
        status, event = runcommands.decide(world.run, command, stamping_now=world.stamping,
                                           now=world.now)
        return actions.WriteRun(status=status, event=event, until=world.now)
    if runobjects.needs_pinning(world.run):
        return _pin(world)
    return _lay_out(world)


def _write(world: RunWorld, status: AgentRunStatus, *, event: events.Event | None = None,
           point: str = "run-status", until: datetime | None = None,
           waiting: str = "the run's status is up to date") -> RunStep:
    """Write ``status`` unless it is the run's own already (then wait: nothing changes).

    The Event goes with the write only: an unchanged status is a repeat, not news.
    """
    if status == world.run.status:
        return actions.Wait(message=waiting, until=until)
    return actions.WriteRun(status=status, event=event, point=point, until=until)


def _problem(world: RunWorld, problem: resolution.Problem, *,
             nodes: Sequence[str] = (), until: datetime | None = None) -> RunStep:
    status = rollup.derive(run=world.run, nodes=nodes, slots=[], now=world.now,
                         problem=problem)
    return _write(world, status, event=events.Event(
        type="Warning", reason=problem.reason, message=problem.message),
        waiting=problem.message, until=until)


def _squatted(world: RunWorld, status: AgentRunStatus, *, kind: str, name: str,
              what: str) -> RunStep:
    """Say on the run that a name it needs is taken (once); look again soon."""
    text = squats.message(kind=kind, name=name, namespace=world.run.metadata.namespace,
                          what=what)
    new = squats.on_run(status, message=text, now=world.now)
    return _write(world, new, event=events.Event(
        type="Warning", reason="NameSquatted", message=text),
        until=world.now + squats.SQUAT_WAIT, waiting=text)


def _pin(world: RunWorld) -> RunStep:
    run = world.run
    resolved = resolution.tenancy(run=run, tenant=world.tenant) or _resolve(world)
    if isinstance(resolved, resolution.Problem):  # a fork's source may change: look again
        return _problem(world, resolved, until=None if run.spec.fork is None
                        else world.now + runforks.RECHECK)
    if world.journal is not None and world.journal_problem is not None:
        return _problem(world, world.journal_problem, until=world.now + JOURNAL_RECHECK)
    missing: list[actions.Create] = []
    uid = run.metadata.uid or ""
    for chosen in resolved.all():
        body = runobjects.snapshot_body(run=run, resolved=chosen, tenant=world.tenant)
        name = body["metadata"]["name"]
        found = world.snapshots.get(name) or world.taken.get(name)
        if found is None:
            missing.append(actions.Create(body=body, point="pin-snapshots"))
        elif not runobjects.matches_snapshot(found, run_uid=uid, sha256=chosen.sha256):
            what = f"run {run.metadata.name}'s pinned {chosen.kind} snapshot"
            text = squats.message(kind="ConfigMap", name=name,
                                  namespace=run.metadata.namespace, what=what)
            status = rollup.derive(run=run, nodes=[], slots=[], now=world.now,
                                 problem=resolution.Problem(reason="NameSquatted",
                                                            message=text))
            return _squatted(world, status, kind="ConfigMap", name=name, what=what)
    budget = rollup.pinned_budget(run, prices=resolved.bindings_document.prices,
                                  default=world.default_budget)
    if isinstance(budget, resolution.Problem):
        return _problem(world, budget, until=None)
    if missing:
        return actions.Creates(creates=tuple(missing))
    pins = runobjects.pins(run=run, resolution=resolved, journal=world.journal)
    summary = "; ".join(f"{kind} revision {pin.revision} as {pin.snapshot}"
                        for kind, pin in (("package", pins.package),
                                          ("workflow", pins.workflow),
                                          ("bindings", pins.bindings)))
    if pins.journal is not None:
        summary += (f"; journal in bucket {pins.journal.bucket} under {pins.journal.prefix}"
                    f" at {pins.journal.endpoint}")
    return actions.WriteRun(status=rollup.record_pins(
        run=run, pins=pins, now=world.now,
        creator=rollup.verified_creator(run, epoch=world.stamping_epoch), budget=budget),
                    event=events.Event(type="Normal", reason="Pinned",
                                       message=f"pinned {summary}"),
                    point="pinned", until=world.now)  # then lay out the slots at once


def _resolve(world: RunWorld) -> resolution.Resolution | resolution.Problem:
    """The run's configuration: resolved by revision, or a fork's copied from its source."""
    run = world.run
    if run.spec.fork is None:
        return resolution.resolve(run=run, config_maps=world.config_maps)
    problem = runforks.source_problem(run=run, source=world.fork_source)
    if problem is not None:
        return problem
    assert world.fork_source is not None
    resolved = resolution.from_source(source=world.fork_source, snapshots=world.fork_snapshots)
    if isinstance(resolved, resolution.Problem):
        return resolved
    return runforks.at_problem(run=run, workflow=resolved.workflow_document) or resolved


def _fork(world: RunWorld, workflow: WorkflowDocument) -> RunStep:
    """A fork's journal copied, before any of its slots exists (``core.runs.runforks``)."""
    run, source = world.run, world.fork_source
    copied = world.fork_copied  # a copy done stands, whatever became of its source since
    said = conditions.find(run.status.conditions, runforks.FORKED)
    if copied is None and said is not None and said.status == "False" and (
            said.reason in runforks.FINAL):
        return actions.Wait(message=said.message)  # the source will not change it: said once
    if copied is None:
        copied = runforks.source_problem(run=run, source=source)
    if copied is None:
        assert source is not None
        planned = runforks.plan(run=run, source=source, workflow=workflow,
                                source_slots=world.fork_slots, tenant=world.tenant)
        if isinstance(planned, actions.ForkJournal):
            return planned
        copied = planned
    status, event, until = runforks.copied_status(run=run, copied=copied, now=world.now)
    return _write(world, status, event=event, point="fork", until=until,
                  waiting=event.message)


def _lay_out(world: RunWorld) -> RunStep:
    run, workflow = world.run, world.workflow
    if workflow is None:
        return actions.Wait(message="the run is not pinned yet")
    if isinstance(workflow, resolution.Problem):
        return _problem(world, workflow)
    owning = runjournals.owning_step(run)
    if owning is not None:  # before any slot: no worker writes a journal nobody deletes
        return owning
    if run.spec.fork is not None and run.status.fork is None:
        return _fork(world, workflow)
    nodes = [node.name for node in workflow.nodes]
    own = rollup.own_slots(run=run, slots=world.slots)
    uid = run.metadata.uid or ""
    missing: list[actions.Create] = []
    squatter: tuple[str, str] | None = None
    for body in runobjects.slot_bodies(run=run, workflow=workflow, tenant=world.tenant):
        node, name = body["spec"]["node"], body["metadata"]["name"]
        if node in own:
            continue
        found = world.taken.get(name)
        if found is None:
            missing.append(actions.Create(body=body, point="slots"))
        elif not runobjects.matches_slot(found, run_uid=uid, node=node):
            squatter = squatter or (name, node)
    if missing:
        return actions.Creates(creates=tuple(missing))
    if squatter is not None:
        status = rollup.derive(run=run, nodes=nodes, slots=world.slots, now=world.now)
        return _squatted(world, status, kind="Slot", name=squatter[0],
                         what=f"node {squatter[1]} of run {run.metadata.name}")
    status = squats.run_cleared(rollup.derive(run=run, nodes=nodes, slots=world.slots,
                                            now=world.now))
    until = None if rollup.is_finished(status) else rollup.deadline(run)
    reopened = rollup.is_finished(run.status) and not rollup.is_finished(status)
    written = _write(world, status, until=until, event=events.Event(
        type="Normal", reason=rollup.RERUNNING, message=rollup.reopened_message(status))
        if reopened else None)
    if not isinstance(written, actions.Wait):
        return written
    kept = runjournals.retention_step(run=run, now=world.now, left=world.journal_left,
                                      error=world.journal_error, live=world.journal_live,
                                      orphaned=world.journal_orphaned)
    return written if kept is None else kept


def pinned_workflow(*, run: AgentRun,
                    snapshot: Object | None) -> WorkflowDocument | resolution.Problem:
    """The pinned workflow from the run's own snapshot, checked against its pin.

    Immutable once checked, so the caller may keep the answer per snapshot name.
    """
    pins = run.status.pinned
    assert pins is not None
    text = ((snapshot or {}).get("data") or {}).get(names.CONFIG_DATA_KEYS["workflow"])
    if not isinstance(text, str) or resolution.sha256_of(text) != pins.workflow.sha256:
        return resolution.Problem(reason="SnapshotMissing", message=(
            f"the pinned workflow snapshot {pins.workflow.snapshot} is missing or altered;"
            " the run cannot lay out its slots (recreate the run)"))
    document = resolution.parse(kind="workflow", text=text, origin=pins.workflow.snapshot)
    if isinstance(document, WorkflowDocument):
        return document
    assert isinstance(document, resolution.Problem)
    return document
