"""The pinned copy of a LaunchSpec that a slot's attempts are built from.

When a slot is pinned (made Ready, or reassigned), the chosen LaunchSpec's spec is copied
into an immutable ConfigMap owned by the slot's run, one per (run, spec digest):
``<run>-lspec-<digest prefix 10>``, shared by every slot of the run that pins the same
spec. Later attempts build their pods from that copy, so a GitOps edit or prune of the
LaunchSpec never changes what an already-pinned slot launches; ``status.launchSpec``
names the copy and its digest, and a copy whose digest differs is refused rather than
used. Slots pinned before one copy per run was the rule name a copy they own
(``<slot>-lspec-...``) and keep reading it: :func:`owner_uid` says whose it is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentrun.api import names
from agentrun.api.launchspecs import LaunchSpecSpec
from agentrun.api.runs import AgentRun
from agentrun.api.slots import PinnedLaunchSpec, Slot
from agentrun.core.base import actions, naming, owners
from agentrun.core.launchspecs import launchpins
from agentrun.core.slots import inputs

DATA_KEY = "launchspec.json"


def body(*, run: AgentRun, pinned: PinnedLaunchSpec, spec: LaunchSpecSpec,
         tenant: str | None) -> dict[str, Any]:
    """The run's snapshot ConfigMap: the canonical JSON of the spec whose digest is pinned."""
    labels = naming.with_tenant({names.RUN_LABEL: run.metadata.name,
                                 names.SNAPSHOT_LABEL: "launchspec"}, tenant=tenant)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": pinned.snapshot,
            "namespace": run.metadata.namespace,
            "labels": labels,
            "annotations": {names.LAUNCH_SPEC_ANNOTATION: f"{pinned.name}@{pinned.generation}"},
            "ownerReferences": [owners.controller(kind="AgentRun", metadata=run.metadata)],
        },
        "immutable": True,
        "data": {DATA_KEY: json.dumps(spec.wire(), sort_keys=True, separators=(",", ":"))},
    }


def read(configmap: Mapping[str, Any], *, pinned: PinnedLaunchSpec) -> LaunchSpecSpec:
    """The spec held by a snapshot, checked against the pinned digest.

    Raises ValueError when the copy is not the one pinned (its digest differs): building a
    pod from another spec than the one recorded would break the pin silently.
    """
    raw = (configmap.get("data") or {}).get(DATA_KEY)
    if raw is None:
        raise ValueError(f"snapshot {pinned.snapshot!r} has no {DATA_KEY}")
    spec = LaunchSpecSpec.model_validate(json.loads(raw))
    if launchpins.digest(spec) != pinned.digest:
        raise ValueError(f"snapshot {pinned.snapshot!r} does not hold the pinned spec "
                         f"(digest {pinned.digest[:10]}…)")
    return spec


def is_own(found: Mapping[str, Any], *, body: Mapping[str, Any], owner_uid: str) -> bool:
    """Is a snapshot found on AlreadyExists the one ``body`` would have made?

    Controlled by the run (``owner_uid``: its uid), immutable, and holding the same data:
    a ConfigMap someone made first under the name is never used as the pin, whatever its
    labels say. (Another slot of the run that made it first is fine: it is the run's.)
    """
    return (owners.controlled_by(found.get("metadata") or {}, owner_uid)
            and found.get("immutable") is True and found.get("data") == body.get("data"))


def owner_uid(*, slot: Slot, pinned: PinnedLaunchSpec) -> str:
    """Whose copy the pinned snapshot is: the run's (one per digest), or, for a slot pinned
    before that rule, the slot's own (``<slot>-lspec-...``)."""
    if pinned.snapshot == naming.launch_spec_snapshot_name(run=slot.spec.run,
                                                           digest=pinned.digest):
        return owners.controller_uid(slot.metadata) or ""
    return slot.metadata.uid or ""


def create(world: inputs.World, *, pinned: PinnedLaunchSpec,
           spec: LaunchSpecSpec) -> actions.Create:
    """The step creating the run's snapshot of ``pinned`` (one per run and digest)."""
    assert world.run is not None
    return actions.Create(body=body(run=world.run, pinned=pinned, spec=spec,
                                   tenant=world.tenant), point="launch-spec-snapshot",
                          shared=True)
