"""Owner references: every object the operator makes belongs to the object it serves.

A run controls its snapshots and slots; a slot controls its attempts' pods and leases
and its LaunchSpec snapshot. The garbage collector then deletes them with their owner,
and *controlled by this uid* is how an object found on AlreadyExists is told to be ours:
a run or slot deleted and recreated under the same name has another uid.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentrun.api import names
from agentrun.api.meta import ObjectMeta


def controller(*, kind: str, metadata: ObjectMeta) -> dict[str, Any]:
    """A controlling owner reference that blocks the owner's deletion until GC is done."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": kind,
        "name": metadata.name,
        "uid": metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controlled_by(metadata: Mapping[str, Any], uid: str) -> bool:
    """Does an object (its raw ``metadata``) name ``uid`` as its controller?"""
    return any(ref.get("uid") == uid and ref.get("controller") is True
               for ref in metadata.get("ownerReferences") or [])


def controller_uid(metadata: ObjectMeta) -> str | None:
    """The uid of the object's controlling owner (a slot's run), if it has one."""
    return next((ref.uid for ref in metadata.owner_references if ref.controller), None)
