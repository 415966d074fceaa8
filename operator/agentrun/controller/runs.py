"""Reconciling one run: read its world, take the core's next step, apply it, repeat.

The decisions are ``core.runs.runsteps.next_step``'s; this loop only reads what it needs
(candidate ConfigMaps and the run's snapshots while unpinned, the pinned workflow and
the slots once pinned) and applies the step through the applier
(``controller.applier``). A batch of creates is applied whole: what an AlreadyExists found
is remembered (``RunWorld.taken``) for the core to judge on the next look, ours or a
squatter's. A status write ends the
reconcile, so one reconcile writes the run's status at most once.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentrun.api import names
from agentrun.api.configs import WorkflowDocument
from agentrun.api.runs import AgentRun, ForkStatus, JournalPin, JournalSettings
from agentrun.api.traces import SpanRecord
from agentrun.controller import applier, journalchecks, journalforks, journalstores, reconcilers
from agentrun.core.base import actions
from agentrun.core.base.events import Event
from agentrun.core.runs import (
    resolution,
    runcommands,
    runjournals,
    runobjects,
    runspans,
    runsteps,
)
from agentrun.kube import reads, writes
from agentrun.rest import clocks

MAX_STEPS = 16


@dataclass
class Result:
    events: list[tuple[AgentRun, Event]] = field(default_factory=list)
    until: datetime | None = None
    retry: bool = False  # it stopped on an error: look again after a backoff
    spans: list[SpanRecord] = field(default_factory=list)  # each write completed (runspans)


class RunReconciler(reconcilers.Reconciler):
    logger_name = "agentrun.runs"

    def __init__(self, *, reader: reads.Reader, writer: writes.Writer,
                 journal: JournalSettings | None = None, clock: clocks.Clock = clocks.system,
                 ticks: clocks.Clock = clocks.ticks, logger: logging.Logger | None = None) -> None:
        """``journal``: the operator's journal settings (its flags), handed to each unpinned
        run's world to be pinned at launch; None: runs get no journal pin."""
        super().__init__(reader=reader, writer=writer, clock=clock, ticks=ticks, logger=logger)
        self.journal = journal
        self.stores = journalstores.JournalStores(reader=reader)
        self.checks = None if journal is None else journalchecks.JournalChecks(
            settings=journal, reader=reader, stores=self.stores)
        # Why a run's journal could not be deleted, until its next look (by run).
        self._undeleted: dict[tuple[str, str], str] = {}
        # How a fork's last copy went, until its next look (by run, with the run's uid: a
        # run recreated under the name meanwhile is another run).
        self._copied: dict[tuple[str, str], tuple[str, ForkStatus | resolution.Problem]] = {}

    @functools.cached_property
    def copier(self) -> journalforks.Copier:
        """Copies forks' journals (made at the first fork: a test's reader has no client)."""
        return journalforks.Copier(client=self.reader.rest, stores=self.stores)

    @functools.cached_property
    def _workflows(self) -> dict[tuple[str, str], WorkflowDocument]:
        """Parsed pinned workflows by (namespace, snapshot): immutable, so kept."""
        return {}

    def reconcile(self, namespace: str, name: str) -> Result:
        result = Result()
        taken: dict[str, reads.Object] = {}

        def step() -> bool:
            world = self.read_world(namespace, name, taken=taken)
            if world is None:
                return True
            decided = runsteps.next_step(world)
            if isinstance(decided, actions.Wait):
                result.until = decided.until
                return True
            if isinstance(decided, actions.ForkJournal):
                self._copied[(namespace, name)] = (world.run.metadata.uid or "", self.copier.copy(
                    run=world.run, planned=decided, now=self.clock()))
                return False  # look again: the core writes how it went
            if isinstance(decided, actions.DeleteJournal):
                failed = self.stores.delete(decided.journal, namespace)
                if failed is not None:
                    self._undeleted[(namespace, name)] = failed
                return False  # look again: list what is left
            outcome = self.applier.apply(decided, target=applier.Target(run=world.run,
                                                                        taken=taken))
            if isinstance(decided, actions.SetFinalizers | actions.RemoveRunCommand):
                return False  # the run as it is now decides what follows
            if isinstance(outcome, applier.Taken):
                return False  # what was found is in `taken`: the core judges it next look
            assert isinstance(decided, actions.WriteRun)
            result.spans += runspans.of_run_write(run=world.run, new=decided.status,
                                                  now=self.clock())
            if decided.event is not None:
                result.events.append((world.run, decided.event))
            result.until = decided.until
            return True

        result.retry = not reconcilers.settle(step, what=f"run {namespace}/{name}",
                                              logger=self.logger, max_steps=MAX_STEPS)
        return result

    def read_world(self, namespace: str, name: str, *,
                   taken: dict[str, reads.Object]) -> runsteps.RunWorld | None:
        reader = self.reader
        run = reader.run(namespace, name)
        if run is None:
            self._copied.pop((namespace, name), None)
            return None
        tenant = reader.tenant(namespace)
        if run.metadata.deletion_timestamp is not None:
            if names.JOURNAL_FINALIZER not in run.metadata.finalizers:
                return None
            return self._deleting_world(run, tenant=tenant, taken=taken)
        fork = self._fork_world(run) if run.spec.fork is not None else {}
        if runobjects.needs_pinning(run):
            candidates = {} if tenant is None or run.spec.fork else {kind: reader.configmaps(
                namespace, selector=f"{names.CONFIG_KIND_LABEL}={kind},!{names.SNAPSHOT_LABEL}")
                for kind in names.CONFIG_KINDS}
            found = [] if tenant is None else reader.configmaps(
                namespace, selector=f"{names.RUN_LABEL}={name},{names.SNAPSHOT_LABEL}")
            # Read after the run: see core.policies.stamping for why the order matters.
            trust = reader.stamping()
            return runsteps.RunWorld(
                run=run, tenant=tenant, now=self.clock(), config_maps=candidates,
                snapshots={cm["metadata"]["name"]: cm for cm in found}, taken=taken,
                journal=self.journal, journal_problem=None if self.checks is None or (
                    tenant is None) else self.checks.problem(namespace),
                stamping_epoch=trust.epoch,
                stamping=trust if runcommands.pending(run) else None,
                default_budget=None if tenant is None or run.spec.budget is not None
                else reader.default_budget(namespace), **fork)
        world = runsteps.RunWorld(run=run, tenant=tenant, now=self.clock(),
                                  workflow=self.workflow(run),
                                  slots=reader.slots_of(namespace, name), taken=taken,
                                  # Read after the run: a command's stamping is judged now.
                                  stamping=reader.stamping() if runcommands.pending(run)
                                  else None, **fork)
        due = runjournals.retention_due(run, now=world.now)
        # A finished run whose journal's retention is over: deleted while the run stays.
        return world if due is None else self._journal_world(world, due)

    def _fork_world(self, run: AgentRun) -> dict[str, Any]:
        """A fork's source, read until its journal is copied: the source's snapshots while
        the fork is unpinned, its slots once pinned, and how the last copy went."""
        namespace, name = run.metadata.namespace or "", run.metadata.name
        uid, copied = self._copied.pop((namespace, name), ("", None))
        if uid != (run.metadata.uid or ""):
            copied = None
        if run.status.fork is not None:
            return {}
        assert run.spec.fork is not None
        source = self.reader.run(namespace, run.spec.fork.run)
        if source is None or source.status.pinned is None:
            return {"fork_source": source, "fork_copied": copied}
        if run.status.pinned is None:
            snapshots = {snapshot: found for snapshot in
                         source.status.pinned.snapshot_names().values()
                         if (found := self.reader.configmap(namespace, snapshot)) is not None}
            return {"fork_source": source, "fork_snapshots": snapshots}
        return {"fork_source": source, "fork_copied": copied,
                "fork_slots": self.reader.slots_of(namespace, source.metadata.name)}

    def _deleting_world(self, run: AgentRun, *, tenant: str | None,
                        taken: dict[str, reads.Object]) -> runsteps.RunWorld:
        """A run being deleted that holds its journal's finalizer."""
        namespace, name = run.metadata.namespace or "", run.metadata.name
        world = runsteps.RunWorld(run=run, tenant=tenant, now=self.clock(), taken=taken,
                                  slots=self.reader.slots_of(namespace, name))
        pin = run.status.pinned.journal if run.status.pinned is not None else None
        return world if pin is None else self._journal_world(world, pin)

    def _journal_world(self, world: runsteps.RunWorld,
                       pin: JournalPin) -> runsteps.RunWorld:
        """``world`` with what deleting the run's journal waits on: its live attempts (from
        the API, not a cache), then (none live) whether its Secret is gone, then what its
        store holds (or why it could not say, or why the last deletion failed)."""
        namespace, name = world.run.metadata.namespace or "", world.run.metadata.name
        undeleted = self._undeleted.pop((namespace, name), None)
        live = self.stores.live_attempts(namespace, name)
        orphaned = None if live else self.stores.orphaned(pin, namespace)
        left, error = (None, None) if live or orphaned else self.stores.left(pin, namespace)
        return dataclasses.replace(world, journal_live=live, journal_left=left,
                                   journal_error=error or undeleted, journal_orphaned=orphaned)

    def workflow(self, run: AgentRun) -> WorkflowDocument | resolution.Problem:
        """The pinned workflow, read from the run's own snapshot (immutable, so cached)."""
        pins = run.status.pinned
        assert pins is not None
        key = (run.metadata.namespace or "", pins.workflow.snapshot)
        if key in self._workflows:
            return self._workflows[key]
        found = runsteps.pinned_workflow(run=run, snapshot=self.reader.configmap(*key))
        if isinstance(found, WorkflowDocument):
            self._workflows[key] = found
        return found
