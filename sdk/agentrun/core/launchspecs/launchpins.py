"""Pinning a chosen LaunchSpec: its digest and the slot's ``status.launchSpec``.

The *digest* is what makes a pin exact: the sha256 of the spec's canonical JSON, the
same in the slot's status, in the run's LaunchSpec snapshot's name and in the check that
a snapshot still holds the spec it was made from.
"""

from __future__ import annotations

import hashlib
import json

from agentrun.api.launchspecs import LaunchSpecSpec
from agentrun.api.slots import PinnedLaunchSpec
from agentrun.core.base import naming
from agentrun.core.launchspecs import selection


def digest(spec: LaunchSpecSpec) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces) of a LaunchSpec's spec."""
    canonical = json.dumps(spec.wire(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def pin(*, run: str, choice: selection.Choice) -> PinnedLaunchSpec:
    """The ``status.launchSpec`` for a chosen spec: identity, digest and the run's snapshot."""
    d = digest(choice.spec.spec)
    meta = choice.spec.metadata
    snapshot = naming.launch_spec_snapshot_name(run=run, digest=d)
    return PinnedLaunchSpec(name=meta.name, uid=meta.uid or "", generation=meta.generation or 0,
                            digest=d, snapshot=snapshot, reason=choice.reason)
