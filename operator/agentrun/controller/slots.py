"""Reconciling one slot: read the world, take the core's next step, apply it, repeat.

The loop runs in a worker thread (the kubernetes client is synchronous) and stops at
the core's ``Wait``. A conflict (409, or the object gone) means another writer moved
first: the loop simply reads again. The only state kept in memory is the lease
*observations* (when this process saw each lease's ``renewTime`` change); losing it on
a restart can only make a lease live longer, never end an attempt early.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from agentrun.api.runs import AgentRun
from agentrun.api.slots import Slot, SlotState
from agentrun.api.traces import SpanRecord
from agentrun.controller import applier, journalhistory, journalstores, reconcilers
from agentrun.core.attempts import lostnodes, observations
from agentrun.core.base import actions
from agentrun.core.base.events import Event
from agentrun.core.runs import rollup, runjournals
from agentrun.core.slots import (
    attemptlife,
    decisions,
    inputs,
    slotspans,
    specsnapshots,
    steps,
    tallies,
)
from agentrun.kube import reads

MAX_STEPS = 32
JOURNAL_READS_KEPT = 64  # commands whose journal reads are remembered (see ``commits``)
_LOCKS = threading.Lock()
ObservationKey = tuple[str, str, str]  # namespace, lease name, lease uid


@dataclass
class Result:
    """What one reconciliation did: the Events to post and when to look again."""

    events: list[tuple[Slot, Event]] = field(default_factory=list)
    wait: actions.Wait | None = None
    state: SlotState | None = None
    run: str | None = None
    launch_spec: str | None = None  # the pinned LaunchSpec's name, when pinned
    retry: bool = False  # it stopped on an error: look again after a backoff
    tallies: list[tallies.Tally] = field(default_factory=list)  # of each status written
    spans: list[SpanRecord] = field(default_factory=list)  # each write completed (slotspans)


class SlotReconciler(reconcilers.Reconciler):
    logger_name = "agentrun.slots"

    @functools.cached_property
    def renewals(self) -> dict[ObservationKey, observations.LeaseObservation]:
        """This process's memory of each lease's renewals (see the module docstring)."""
        return {}

    @functools.cached_property
    def histories(self) -> journalhistory.Histories:
        """The slot's journal as a rerun's decision reads it (where its step was committed)."""
        return journalhistory.Histories(
            client=self.reader.rest, stores=journalstores.JournalStores(reader=self.reader))

    @functools.cached_property
    def first_seen(self) -> dict[ObservationKey, datetime]:
        """When this process first read each attempt's lease, on its own clock."""
        return {}

    @functools.cached_property
    def first_ticks(self) -> dict[ObservationKey, datetime]:
        """The same moments on the monotonic clock: a later wall-clock step moves no
        start deadline (``attemptlife.start_window``)."""
        return {}

    def reconcile(self, namespace: str, name: str) -> Result:
        """Steps until a Wait; on an error, stop with ``retry`` (the Events so far kept)."""
        result = Result()

        def step() -> bool:
            world = self.read_world(namespace, name)
            if world is None:
                return True
            if world.run is not None and world.run.spec.max_active is not None:
                # Slots of a run under maxActive decide one at a time in this process, so
                # the count each reads includes the claims the others just made.
                with self.run_lock(namespace, world.slot.spec.run):
                    return decide(self.read_world(namespace, name), locked=True)
            return decide(world)

        def decide(world: inputs.World | None, *, locked: bool = False) -> bool:
            if world is None:
                return True
            decision = steps.decide(world)
            if not locked and isinstance(decision.step, actions.Create) and (
                    decision.step.shared):
                # The run's LaunchSpec snapshot is shared by its slots: those deciding at
                # once in this process create it once (the others read it, written through).
                with self.run_lock(namespace, world.slot.spec.run):
                    return decide(self.read_world(namespace, name), locked=True)
            if isinstance(decision.step, actions.WriteStatus | actions.DeletePod) and (
                    decision.step.fresh):
                # A cache must not decide this one: read from the API and decide again.
                world = self.read_world(namespace, name, reader=self.reader.fresh())
                if world is None:
                    return True
                decision = steps.decide(world)
            result.state = world.slot.status.state
            result.run = world.slot.spec.run
            pinned = world.slot.status.launch_spec
            result.launch_spec = pinned.name if pinned is not None else None
            return self.apply(world, decision, result)

        result.retry = not reconcilers.settle(step, what=f"slot {namespace}/{name}",
                                              logger=self.logger, max_steps=MAX_STEPS)
        return result

    def run_lock(self, namespace: str, run: str) -> threading.RLock:
        with _LOCKS:  # the first access of _run_locks is under it too
            return self._run_locks.setdefault((namespace, run), threading.RLock())

    @functools.cached_property
    def _run_locks(self) -> dict[tuple[str, str], threading.RLock]:
        return {}

    def read_world(self, namespace: str, name: str, *,
                   reader: reads.Reader | None = None) -> inputs.World | None:
        """Make the reads ``inputs.reads_for`` names (the core decides what is read)."""
        reader = reader or self.reader
        slot = reader.slot(namespace, name)
        if slot is None:
            return None
        now, ticks = self.clock(), self.ticks()
        status = slot.status
        run = inputs.serving_run(slot=slot, run=reader.run(namespace, slot.spec.run))
        needs = inputs.reads_for(slot, max_active=run is not None
                                 and run.spec.max_active is not None)
        dependencies: dict[str, SlotState] = {}
        dependency_reruns: int | None = None
        active_in_run = 0
        if run is not None and needs.siblings:
            siblings = rollup.own_slots(run=run, slots=reader.slots_of(namespace, slot.spec.run))
            dependencies = {node: s.status.state for node, s in siblings.items()}
            dependency_reruns = sum(siblings[node].status.reruns
                                    for node in slot.spec.depends_on if node in siblings)
            if run.spec.max_active is not None:
                active_in_run = sum(1 for s in siblings.values() if s.metadata.name != name
                                    and inputs.busy(s, next_lease=self._next_lease(reader, s)))
        elif run is not None and needs.dependencies:
            found = [d for n in needs.dependencies if (d := reader.slot(namespace, n))]
            own = rollup.own_slots(run=run, slots=found)
            dependency_reruns = sum(s.status.reruns for s in own.values())
        launch_spec, error = (reader.pinned_launch_spec(
            namespace, status.launch_spec,
            slot_uid=specsnapshots.owner_uid(slot=slot, pinned=status.launch_spec))
            if status.launch_spec is not None else (None, None))
        attempt = observation = first_seen = first_ticks = None
        blind = timedelta(0)
        if needs.worker is not None:
            worker = needs.worker
            lease = reader.lease(namespace, worker)
            attempt = inputs.AttemptObjects(name=worker, pod=reader.pod(namespace, worker),
                                            lease=lease)
            observation = self.observe(namespace, worker, lease, ticks)
            if lease is not None:
                key = (namespace, worker, lease["metadata"].get("uid", ""))
                first_seen, first_ticks = self.first_seen.get(key), self.first_ticks.get(key)
            since = observation.observed_at if observation is not None else first_ticks
            if since is not None:  # before the first renewal: the start deadline's blind time
                blind = reader.blind_time(since=since)
        node = None
        where = lostnodes.node_name(attempt.pod) if attempt is not None else None
        if attempt is not None and where is not None and observations.pod_view(
                attempt.pod).phase in lostnodes.STUCK:
            try:
                node = lostnodes.node_view(where, reader.node(where))
            except Exception as unread:  # a 403 (RBAC not upgraded) or a 5xx: not known
                self.logger.warning("slot %s/%s: node %s not read (%s)", namespace, name,
                                    where, unread)
        next_attempt = None
        if needs.next_worker is not None:
            next_lease = reader.lease(namespace, needs.next_worker)
            next_attempt = inputs.AttemptObjects(
                name=needs.next_worker, lease=next_lease,
                pod=reader.pod(namespace, needs.next_worker) if next_lease is not None else None)
        pins_problem = None
        creating = (attempt if status.state is SlotState.CLAIMING else next_attempt)
        if run is not None and creating is not None and creating.pod is None and (
                creating.lease is not None):
            # Read only when the next write may be the Pod (its Lease exists, no Pod yet).
            pins_problem = reader.config_snapshots_problem(run)
        return inputs.World(
            slot=slot, run=run, tenant=reader.tenant(namespace), now=now,
            dependencies=dependencies, dependency_reruns=dependency_reruns,
            launch_specs=reader.launch_specs(namespace) if needs.selecting else (),
            snapshots=(reader.launch_spec_snapshots(namespace, slot.spec.run,
                                                    slot_uid=run.metadata.uid or "")
                       if needs.selecting and run is not None else frozenset()),
            launch_spec=launch_spec, launch_spec_error=error, attempt=attempt,
            next_attempt=next_attempt, blind=blind,
            observation=observation, ticks=ticks, first_seen=first_seen,
            first_ticks=first_ticks,
            active_in_run=active_in_run, pins_problem=pins_problem, node=node,
            # Read after the slot: see core.policies.stamping for why the order matters.
            stamping=reader.stamping() if needs.stamping else None,
            referenced={} if needs.referenced is None else {
                needs.referenced: _data(reader.configmap_once(namespace, needs.referenced))},
            commits=None if not needs.journal_keys or run is None else self.commits(
                namespace=namespace, slot=name, keys=needs.journal_keys, run=run,
                request=needs.journal_request),
            journal_gone=None if run is None else journal_gone(run, now=now))

    def commits(self, *, namespace: str, slot: str, keys: tuple[str, ...], run: AgentRun,
                request: str | None) -> Mapping[str, tuple[tuple[int, int, int], ...]] | str:
        """Where a pending command's records were committed (``Histories.commits``): read
        once per command (its request id), however many times its slot is read before it
        is decided, so a long journal is walked once."""
        key = (namespace, slot, request or "", keys)
        found = self.journal_reads.get(key)
        if found is None:
            found = self.histories.commits(
                namespace=namespace, slot=slot, keys=keys,
                pin=run.status.pinned.journal if run.status.pinned is not None else None,
                deleted=rollup.journal_deleted(run.status))
            with _LOCKS:
                self.journal_reads[key] = found
                while len(self.journal_reads) > JOURNAL_READS_KEPT:
                    del self.journal_reads[next(iter(self.journal_reads))]
        return found

    @functools.cached_property
    def journal_reads(self) -> dict[tuple[str, str, str, tuple[str, ...]], Any]:
        """The commits read for pending commands, by command (oldest first)."""
        return {}

    @staticmethod
    def _next_lease(reader: reads.Reader, slot: Slot) -> reads.Object | None:
        worker = inputs.next_worker(slot)
        return None if worker is None else reader.lease(slot.metadata.namespace or "", worker)

    def forget(self, *, namespace: str, slot: str) -> None:
        """Drop what is remembered of a deleted slot's leases."""
        prefix = f"{slot}-"
        for memory in (self.renewals, self.first_seen, self.first_ticks):
            for key in [k for k in memory if k[0] == namespace and k[1].startswith(prefix)]:
                del memory[key]

    def observe(self, namespace: str, worker: str, lease: reads.Object | None,
                ticks: datetime) -> observations.LeaseObservation | None:
        """Remember when (on the monotonic clock ``ticks``) a change of renewTime was seen."""
        if lease is None:
            return None
        key = (namespace, worker, lease["metadata"].get("uid", ""))
        self.first_seen.setdefault(key, self.clock())
        self.first_ticks.setdefault(key, ticks)
        observed = observations.observe(previous=self.renewals.get(key),
                                        lease=observations.lease_view(lease), now=ticks)
        if observed is not None:
            self.renewals[key] = observed
        return observed

    def apply(self, world: inputs.World, decision: decisions.Decision, result: Result) -> bool:
        """Apply the decision's step; True when it ended in a Wait (a create refused by a
        quota), False once a write is made (read again).

        A create that failed is reported by the applier; what follows is the core's
        decision (``steps.on_exists``, ``attemptlife.on_rejected``), in the world the
        create was decided in, and is applied in turn: a claim's create with its
        claiming world, any other step settled in the world read (as ``steps.decide``
        settles it), so that a failed create is always judged where it was decided.
        """
        slot = world.slot
        target = applier.Target(slot=slot, lease=world.attempt.lease
                                if world.attempt is not None else None)
        while True:
            step = decision.step
            if isinstance(step, actions.Wait):
                result.wait = step
                return True
            outcome = self.applier.apply(step, target=target)
            if isinstance(outcome, applier.Found):
                assert isinstance(step, actions.Create)
                self.logger.info("slot %s/%s: %s %s exists already; reading again",
                                 slot.metadata.namespace or "", slot.metadata.name,
                                 step.body["kind"], step.body["metadata"]["name"])
                then = steps.on_exists(decision.world, create=step, found=outcome.found)
                if then is None:
                    return False
                decision = decisions.settled(then, world=world)
            elif isinstance(outcome, applier.Refused):
                assert isinstance(step, actions.Create)
                decided = attemptlife.on_rejected(decision.world, create=step,
                                                  status=outcome.status,
                                                  message=outcome.message)
                if isinstance(decided, Event):
                    result.events.append((slot, decided))
                    raise outcome.error
                decision = decisions.settled(decided, world=world)
            else:
                record(slot, step, result, now=self.clock())
                return False


def record(slot: Slot, step: actions.Write, result: Result, *, now: datetime) -> None:
    """What a step written says: its Event, and a status write's tallies and spans (only
    once written: a retried reconcile reads it back and counts nothing)."""
    if isinstance(step, actions.WriteStatus):
        result.tallies.append(tallies.of_slot_write(
            old=slot.status, new=step.status, created=slot.metadata.creation_timestamp,
            has_dependencies=bool(slot.spec.depends_on)))
        result.spans += slotspans.of_slot_write(slot=slot, old=slot.status, new=step.status,
                                                now=now)
        if step.event is not None:
            result.events.append((slot, step.event))
    elif isinstance(step, actions.Tombstone):
        fence = slotspans.of_tombstone(slot=slot, lease=step.name, now=now)
        result.spans += [fence] if fence is not None else []
    elif isinstance(step, actions.DeletePod):
        result.events.append((slot, Event(type="Normal", reason="PodDeleted",
                                          message=step.message)))
    elif isinstance(step, actions.RemoveCommand) and step.event is not None:
        result.events.append((slot, step.event))


def journal_gone(run: AgentRun, *, now: datetime) -> str | None:
    """Why the run's journal cannot be read back any more: deleted, or being deleted by its
    retention (a rerun would start from less than was committed)."""
    deleted = rollup.journal_deleted(run.status)
    if deleted is not None:
        return f"was deleted ({deleted})"
    if runjournals.retention_due(run, now=now) is not None:
        return "is being deleted: its retention is over"
    return None


def _data(found: reads.Object | None) -> dict[str, str] | None:
    """A ConfigMap's ``data`` as read (None: not found)."""
    if found is None:
        return None
    data = found.get("data") or {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
