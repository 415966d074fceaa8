"""The pinned copy of a LaunchSpec that a slot's attempts are built from.

When a slot is made Ready or reassigned, the chosen LaunchSpec's spec is copied into an
immutable ConfigMap owned by the slot (``<slot>-lspec-<digest prefix 10>``). Later
attempts build their pods from that copy, so a GitOps edit or prune of the LaunchSpec
never changes what an already-pinned slot launches; ``status.launchSpec`` names the copy
and its digest, and a copy whose digest differs is refused rather than used.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentrun.api import names
from agentrun.api.launchspecs import LaunchSpecSpec
from agentrun.api.slots import PinnedLaunchSpec, Slot
from agentrun.core import claims, guards, naming, owners

DATA_KEY = "launchspec.json"


def body(*, slot: Slot, pinned: PinnedLaunchSpec, spec: LaunchSpecSpec,
         tenant: str | None) -> dict[str, Any]:
    """The snapshot ConfigMap: the canonical JSON of the spec whose digest is pinned."""
    labels = naming.with_tenant({names.RUN_LABEL: slot.spec.run,
                                 names.SLOT_LABEL: slot.metadata.name,
                                 names.SNAPSHOT_LABEL: "launchspec"}, tenant=tenant)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": pinned.snapshot,
            "namespace": slot.metadata.namespace,
            "labels": labels,
            "annotations": {names.LAUNCH_SPEC_ANNOTATION: f"{pinned.name}@{pinned.generation}"},
            "ownerReferences": [claims.owner_reference(slot)],
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
    if guards.digest(spec) != pinned.digest:
        raise ValueError(f"snapshot {pinned.snapshot!r} does not hold the pinned spec "
                         f"(digest {pinned.digest[:10]}…)")
    return spec


def is_own(found: Mapping[str, Any], *, body: Mapping[str, Any], slot_uid: str) -> bool:
    """Is a snapshot found on AlreadyExists the one ``body`` would have made?

    Controlled by this slot, immutable, and holding the same data: a ConfigMap someone
    made first under the name is never used as the pin, whatever its labels say.
    """
    return (owners.controlled_by(found.get("metadata") or {}, slot_uid)
            and found.get("immutable") is True and found.get("data") == body.get("data"))
