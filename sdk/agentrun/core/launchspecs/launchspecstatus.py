"""A LaunchSpec's status: is its pod template valid, and which slots pin it.

*Valid* comes from a server-side dry run of the Pod a claim would create from the spec
(:func:`dry_run_pod`: the same builder, ``core.attempts.attemptobjects.pod_body``, with its sidecar,
mounts and environment, for a stand-in slot; nothing is created), through the API
server's own validation and admission: condition ``Valid`` True (``DryRunSucceeded``);
False when the pod can never be made as the spec makes it (``core.base.refusals``): invalid
(``InvalidTemplate``, 400 or 422), lacking resources a ResourceQuota of the namespace
counts (``QuotaRequiresResources``) or with resources outside a LimitRange of the
namespace (``LimitRangeRefused``), or refused by the namespace's enforced Pod Security
level (``PodSecurityRefused``), with the server's words; Unknown (``DryRunRefused``)
when it refused for another reason (a quota with no room now, a policy, a missing
ServiceAccount); False (``SidecarNameTaken``) before any dry run when ``spec.sidecar`` is
set and the template already has a container named ``agentrun-worker`` (every pod would
be refused). *Pinned by* counts the slots whose ``status.launchSpec`` names this spec's
uid, per generation.
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
from agentrun.api.meta import ObjectMeta
from agentrun.api.runs import Pin, Pins
from agentrun.api.slots import PinnedLaunchSpec, Slot, SlotSpec
from agentrun.core.attempts import attemptobjects
from agentrun.core.base import naming, refusals
from agentrun.core.launchspecs import launchpins

VALID = "Valid"


@dataclass(frozen=True, kw_only=True)
class DryRun:
    """The answer to the dry run: the HTTP status and the server's message."""

    status: int
    message: str = ""


DRY_RUN = "agentrun-dry-run"  # the stand-in slot's, run's and snapshots' name


def dry_run_pod(spec: LaunchSpec, *, tenant: str | None = None) -> dict[str, Any]:
    """The Pod a claim would create from ``spec`` (``attemptobjects.pod_body``), for a
    stand-in slot and run, under a generated name: what differs from a real claim's pod
    is only names, digests and uids, never a container, a resource or a mount."""
    meta = spec.metadata
    namespace = meta.namespace
    slot = Slot(metadata=ObjectMeta(name=DRY_RUN, namespace=namespace, uid=DRY_RUN),
                spec=SlotSpec(run=DRY_RUN, node="dry-run",
                              worker_class=spec.spec.claim.worker_classes[0]))
    pin = Pin(source=DRY_RUN, revision=1, uid=DRY_RUN, sha256="0" * 64, snapshot=DRY_RUN)
    digest = launchpins.digest(spec.spec)
    pinned = PinnedLaunchSpec(
        name=meta.name, uid=meta.uid or "", generation=meta.generation or 0, digest=digest,
        snapshot=naming.launch_spec_snapshot_name(run=DRY_RUN, digest=digest))
    body = attemptobjects.pod_body(
        slot=slot, pins=Pins(package=pin, workflow=pin, bindings=pin), launch_spec=spec.spec,
        pinned=pinned, attempt=1, owner_actor=None, tenant=tenant)
    metadata = dict(body["metadata"])
    del metadata["name"]
    return {**body, "metadata": {**metadata, "generateName": f"{DRY_RUN}-"}}


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
    elif refusals.requires_resources(status=dry_run.status, message=dry_run.message):
        value, reason, message = "False", "QuotaRequiresResources", (
            "a ResourceQuota of the namespace counts resources a container of the Pod does "
            "not set (set them in spec.template, and spec.sidecar.resources for the "
            f"sidecar): {dry_run.message}")
    elif refusals.limit_range(status=dry_run.status, message=dry_run.message):
        value, reason, message = "False", "LimitRangeRefused", (
            "a LimitRange of the namespace refuses the resources of a container of the Pod "
            "(keep them within its bounds in spec.template, and spec.sidecar.resources for "
            f"the sidecar): {dry_run.message}")
    elif refusals.pod_security(status=dry_run.status, message=dry_run.message):
        value, reason, message = "False", "PodSecurityRefused", (
            "the namespace's Pod Security level refuses the Pod (set securityContext in "
            "spec.template's pod and containers, and spec.sidecar.securityContext for the "
            f"sidecar): {dry_run.message}")
    elif refusals.of(status=dry_run.status,
                     message=dry_run.message) is refusals.Refusal.LAUNCH_SPEC:
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
