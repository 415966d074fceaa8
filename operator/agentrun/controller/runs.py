"""Reconciling one run: pin its configuration once, lay out its slots, derive its status.

Each pass reads the run and decides from scratch (pure functions in ``core.resolution``,
``core.launches`` and ``core.runs``): while unpinned, resolve, create the immutable
snapshots (deterministic names; an AlreadyExists that is ours counts as done), then
write ``status.pinned`` under the resourceVersion read. Once pinned it never resolves
again: the workflow is re-read from the run's own snapshot, never from the source.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime

from agentrun.api import names
from agentrun.api.configs import WorkflowDocument
from agentrun.api.runs import AgentRun, AgentRunStatus
from agentrun.controller import loops
from agentrun.core import guards, launches, resolution, runs, squats
from agentrun.kube import writes

MAX_STEPS = 16


@dataclass
class Result:
    events: list[tuple[AgentRun, guards.Event]] = field(default_factory=list)
    until: datetime | None = None
    retry: bool = False  # it stopped on an error: look again after a backoff


class RunReconciler(loops.Reconciler):
    logger_name = "agentrun.runs"

    @functools.cached_property
    def _workflows(self) -> dict[tuple[str, str], WorkflowDocument]:
        """Parsed pinned workflows by (namespace, snapshot): immutable, so kept."""
        return {}

    def reconcile(self, namespace: str, name: str) -> Result:
        result = Result()

        def step() -> bool:
            run = self.reader.run(namespace, name)
            if run is None or run.metadata.deletion_timestamp is not None:
                return True
            return self.step(run, result)

        result.retry = not loops.settle(step, what=f"run {namespace}/{name}",
                                        logger=self.logger, max_steps=MAX_STEPS)
        return result

    def step(self, run: AgentRun, result: Result) -> bool:
        """Take one step; True when the run is settled for now."""
        namespace = run.metadata.namespace or ""
        now = self.clock()
        tenant = self.reader.tenant(namespace)
        if launches.needs_pinning(run):
            return self.pin(run, tenant=tenant, now=now, result=result)
        workflow = self.workflow(run)
        if isinstance(workflow, resolution.Problem):
            self.write(run, runs.derive(run=run, nodes=[], slots=[], now=now, problem=workflow),
                       result, event=guards.Event(type="Warning", reason=workflow.reason,
                                                  message=workflow.message))
            return True
        slots = self.reader.slots_of(namespace, run.metadata.name)
        own = runs.own_slots(run=run, slots=slots)
        for body in launches.slot_bodies(run=run, workflow=workflow, tenant=tenant):
            if body["spec"]["node"] in own:
                continue
            try:
                self.writer.create(body, point="slots")
            except writes.Exists as exists:
                node = body["spec"]["node"]
                if exists.found is not None and not launches.matches_slot(
                        exists.found, run_uid=run.metadata.uid or "", node=node):
                    status = runs.derive(run=run, nodes=[n.name for n in workflow.nodes],
                                         slots=slots, now=now)
                    return self.squatted(run, status, result, now=now, kind="Slot",
                                         name=body["metadata"]["name"],
                                         what=f"node {node} of run {run.metadata.name}")
            return False
        nodes = [node.name for node in workflow.nodes]
        status = squats.run_cleared(runs.derive(run=run, nodes=nodes, slots=slots, now=now))
        self.write(run, status, result)
        result.until = runs.deadline(run) if not runs.is_finished(status) else None
        return True

    def pin(self, run: AgentRun, *, tenant: str | None, now: datetime,
            result: Result) -> bool:
        namespace = run.metadata.namespace or ""
        candidates = {} if tenant is None else {kind: self.reader.configmaps(
            namespace, selector=f"{names.CONFIG_KIND_LABEL}={kind},!{names.SNAPSHOT_LABEL}")
            for kind in names.CONFIG_KINDS}
        resolved = (resolution.tenancy(run=run, tenant=tenant)
                    or resolution.resolve(run=run, config_maps=candidates))
        if isinstance(resolved, resolution.Problem):
            status = runs.derive(run=run, nodes=[], slots=[], now=now, problem=resolved)
            self.write(run, status, result, event=guards.Event(
                type="Warning", reason=resolved.reason, message=resolved.message))
            return True
        for chosen in resolved.all():
            body = launches.snapshot_body(run=run, resolved=chosen, tenant=tenant)
            try:
                self.writer.create(body, point="pin-snapshots")
            except writes.Exists as exists:
                if exists.found is None:
                    raise writes.Conflict("created and deleted meanwhile") from None
                if not launches.matches_snapshot(
                        exists.found, run_uid=run.metadata.uid or "", sha256=chosen.sha256):
                    name = body["metadata"]["name"]
                    what = f"run {run.metadata.name}'s pinned {chosen.kind} snapshot"
                    text = squats.message(kind="ConfigMap", name=name, namespace=namespace,
                                          what=what)
                    status = runs.derive(run=run, nodes=[], slots=[], now=now,
                                         problem=resolution.Problem(reason="NameSquatted",
                                                                    message=text))
                    return self.squatted(run, status, result, now=now, kind="ConfigMap",
                                         name=name, what=what)
        pins = launches.pins(run=run, resolution=resolved)
        status = runs.record_pins(run=run, pins=pins, now=now)
        summary = "; ".join(f"{kind} revision {pin.revision} as {pin.snapshot}"
                            for kind, pin in (("package", pins.package),
                                              ("workflow", pins.workflow),
                                              ("bindings", pins.bindings)))
        self.write(run, status, result, event=guards.Event(
            type="Normal", reason="Pinned", message=f"pinned {summary}"), point="pinned")
        return False

    def squatted(self, run: AgentRun, status: AgentRunStatus, result: Result, *,
                 now: datetime, kind: str, name: str, what: str) -> bool:
        """Say on the run that a name it needs is taken; look again soon. Settled."""
        text = squats.message(kind=kind, name=name, namespace=run.metadata.namespace,
                              what=what)
        new = squats.on_run(status, message=text, now=now)
        event = None if new == run.status else guards.Event(
            type="Warning", reason="NameSquatted", message=text)
        self.write(run, new, result, event=event)
        result.until = now + squats.SQUAT_WAIT
        return True

    def workflow(self, run: AgentRun) -> WorkflowDocument | resolution.Problem:
        """The pinned workflow, read from the run's own snapshot (immutable, so cached)."""
        pins = run.status.pinned
        assert pins is not None
        namespace = run.metadata.namespace or ""
        key = (namespace, pins.workflow.snapshot)
        if key in self._workflows:
            return self._workflows[key]
        found = self.reader.configmap(namespace, pins.workflow.snapshot)
        text = ((found or {}).get("data") or {}).get(names.CONFIG_DATA_KEYS["workflow"])
        if text is None or resolution.sha256_of(text) != pins.workflow.sha256:
            return resolution.Problem(reason="SnapshotMissing", message=(
                f"the pinned workflow snapshot {pins.workflow.snapshot} is missing or altered;"
                " the run cannot lay out its slots (recreate the run)"))
        document = resolution.parse(kind="workflow", text=text, origin=pins.workflow.snapshot)
        if isinstance(document, WorkflowDocument):
            self._workflows[key] = document
            return document
        assert isinstance(document, resolution.Problem)
        return document

    def write(self, run: AgentRun, status: AgentRunStatus, result: Result, *,
              event: guards.Event | None = None, point: str = "run-status") -> None:
        if status == run.status:
            return
        self.writer.custom_status({
            "apiVersion": names.API_VERSION, "kind": "AgentRun",
            "metadata": {"name": run.metadata.name, "namespace": run.metadata.namespace,
                         "resourceVersion": run.metadata.resource_version},
            "status": status.wire()}, point=point)
        if event is not None:
            result.events.append((run, event))
