"""Reconciling one LaunchSpec's status: its validity and the slots that pin it.

The operator's only write to a LaunchSpec (GitOps owns the spec). The dry run is made
once per generation (its answer is kept in memory); the status is written only when it
changes, and at most once every :data:`MIN_INTERVAL` per spec on the monotonic clock, so
a burst of slots pinning a spec costs one write, not one per slot.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime, timedelta

from agentrun import rest
from agentrun.api.launchspecs import LaunchSpec
from agentrun.controller import reconcilers
from agentrun.core.base import actions, refusals
from agentrun.core.launchspecs import launchspecstatus

MIN_INTERVAL = timedelta(seconds=5)


@dataclass
class Result:
    until: datetime | None = None
    retry: bool = False


class LaunchSpecReconciler(reconcilers.Reconciler):
    logger_name = "agentrun.launchspecs"

    @functools.cached_property
    def dry_runs(self) -> dict[tuple[str, int | None], launchspecstatus.DryRun]:
        """The dry-run answer by (uid, generation): a generation's template never changes."""
        return {}

    @functools.cached_property
    def written_at(self) -> dict[tuple[str, str], datetime]:
        return {}

    def reconcile(self, namespace: str, name: str) -> Result:
        result = Result()

        def step() -> bool:
            return self.step(namespace, name, result)

        result.retry = not reconcilers.settle(step, what=f"launchspec {namespace}/{name}",
                                              logger=self.logger, max_steps=4)
        return result

    def step(self, namespace: str, name: str, result: Result) -> bool:
        found = self.reader.custom_object("launchspecs", namespace, name)
        if found is None:
            self.written_at.pop((namespace, name), None)
            return True
        spec = LaunchSpec.model_validate({**found, "kind": "LaunchSpec"})
        ticks = self.ticks()
        last = self.written_at.get((namespace, name))
        if last is not None and ticks - last < MIN_INTERVAL:
            result.until = self.clock() + (last + MIN_INTERVAL - ticks)
            return True
        key = (spec.metadata.uid or "", spec.metadata.generation)
        answer = self.dry_runs.get(key) or self.dry_run(spec)
        if answer.status < 300 or answer.status in refusals.INVALID:
            # Definitive for this generation. Others (a quota's 403 among them: the
            # namespace's quotas may change) are tried again.
            self.dry_runs[key] = answer
        else:
            result.until = self.clock() + MIN_INTERVAL * 6
        slots = [s for s in self.reader.slots_in(namespace) if s.status.launch_spec is not None]
        status = launchspecstatus.derive(spec=spec, slots=slots, dry_run=answer,
                                         now=self.clock())
        if status == spec.status:
            return True
        self.applier.apply(actions.WriteLaunchSpec(spec=spec, status=status))
        self.written_at[(namespace, name)] = ticks
        return True

    def dry_run(self, spec: LaunchSpec) -> launchspecstatus.DryRun:
        namespace = spec.metadata.namespace or ""
        body = launchspecstatus.dry_run_pod(spec, tenant=self.reader.tenant(namespace))
        path = rest.namespaced(group="", version="v1", plural="pods", namespace=namespace)
        try:
            self.reader.rest.request("POST", path, body=body, query={"dryRun": "All"})
        except rest.ApiError as error:
            if error.status >= 500:
                raise
            return launchspecstatus.DryRun(status=error.status, message=error.message)
        return launchspecstatus.DryRun(status=201)
