"""The parts of Kubernetes object metadata that agentrun reads and writes.

Server-managed fields this project never reads (``managedFields`` and the like) are
ignored rather than modelled, so a newer API server cannot break parsing.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import ConfigDict, Field

from agentrun.api.models import Model


def micro_time(moment: datetime) -> str:
    """A ``MicroTime`` as the API server writes it: UTC, six fractional digits, ``Z``
    (a Lease's ``renewTime``, an Event series' ``lastObservedTime``)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class OwnerReference(Model):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(Model):
    model_config = ConfigDict(extra="ignore")

    name: str = ""
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    finalizers: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    owner_references: list[OwnerReference] = Field(default_factory=list)
    managed_fields: list[dict[str, Any]] = Field(
        default_factory=list, description="who last wrote which fields, and when")


def annotation(found: Mapping[str, Any], key: str) -> str | None:
    """One annotation of an object as the API returns it (None: absent)."""
    value = ((found.get("metadata") or {}).get("annotations") or {}).get(key)
    return value if isinstance(value, str) else None
