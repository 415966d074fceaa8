"""A LaunchSpec's status: is its pod template valid, and which slots pin it.

*Valid* comes from a server-side dry run of a Pod made from the template (the API
server's own validation and admission, nothing created): condition ``Valid`` True
(``DryRunSucceeded``), False (``InvalidTemplate``, the server's words) when the server
says the pod is invalid (400, 422), Unknown (``DryRunRefused``) when it refused for another
reason (a quota, a policy, a missing ServiceAccount); False (``SidecarNameTaken``) before
any dry run when ``spec.sidecar`` is set and the template already has a container named
``agentrun-worker`` (every pod would be refused). *Pinned by* counts the slots whose
``status.launchSpec`` names this spec's uid, per generation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentrun.api import conditions
from agentrun.api.launchspecs import (
    GENERATIONS_KEPT,
    LaunchSpec,
    LaunchSpecStatus,
    PinnedGeneration,
)
from agentrun.api.slots import Slot

VALID = "Valid"


@dataclass(frozen=True, kw_only=True)
class DryRun:
    """The answer to the dry run: the HTTP status and the server's message."""

    status: int
    message: str = ""


def dry_run_pod(spec: LaunchSpec) -> dict[str, Any]:
    """The Pod the dry run creates: the template as is, under a generated name."""
    template = spec.spec.template
    metadata = dict(template.metadata or {})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "agentrun-dry-run-",
                         "namespace": spec.metadata.namespace,
                         "labels": metadata.get("labels") or {}},
            "spec": template.spec.model_dump(mode="json", by_alias=True, exclude_none=True)}


def derive(*, spec: LaunchSpec, slots: Sequence[Slot], dry_run: DryRun,
           now: datetime) -> LaunchSpecStatus:
    uid = spec.metadata.uid
    pinned = Counter(s.status.launch_spec.generation for s in slots
                     if s.status.launch_spec is not None and s.status.launch_spec.uid == uid)
    generations = [PinnedGeneration(generation=g, slots=n)
                   for g, n in sorted(pinned.items(), reverse=True)[:GENERATIONS_KEPT]]
    value: conditions.ConditionStatus
    if (conflict := spec.spec.sidecar_conflict()) is not None:  # pods would be refused
        value, reason, message = "False", "SidecarNameTaken", conflict
    elif 200 <= dry_run.status < 300:
        value, reason, message = "True", "DryRunSucceeded", (
            "a Pod from the template passes the API server's validation and admission")
    elif dry_run.status in (400, 422):
        value, reason, message = "False", "InvalidTemplate", (
            f"a Pod from the template is invalid: {dry_run.message}")
    else:
        value, reason, message = "Unknown", "DryRunRefused", (
            f"the dry run of a Pod from the template was refused ({dry_run.status}): "
            f"{dry_run.message}")
    generation = spec.metadata.generation
    conds = conditions.set_condition(
        spec.status.conditions, type_=VALID, status=value,
        reason=reason, message=message, now=now, observed_generation=generation)
    return spec.status.model_copy(update={
        "conditions": conds, "observed_generation": generation,
        "pinned_by": sum(pinned.values()), "generations": generations})
