"""AgentRun: a run R = (tenant, package revision, workflow revision, binding revision).

The user writes ``spec`` (which configuration, by name and optional revision). The
operator resolves it once at launch into ``status.pinned`` (write-once, enforced by
CEL) and never resolves again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from agentrun.api import bounds, names
from agentrun.api.conditions import Conditions
from agentrun.api.meta import ObjectMeta
from agentrun.api.models import Model
from agentrun.api.policies import RetryPolicy

ClaimPolicy = Literal["Automatic", "Manual"]
CONFIG_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
IMMUTABLE = "is immutable: a run pins its configuration at launch; create a new run instead"


def _immutable(field: str) -> JsonDict:
    return {"x-kubernetes-validations": [
        {"rule": "self == oldSelf", "message": f"spec.{field} {IMMUTABLE}"}]}


class ConfigRef(Model):
    """Names a configuration; no revision means the highest accepted one at launch."""

    name: str = Field(min_length=1, max_length=253, pattern=CONFIG_NAME_PATTERN)
    revision: int | None = Field(default=None, ge=1, le=bounds.MAX_REVISION)


class AgentRunSpec(Model):
    tenant: str | None = Field(default=None, max_length=63)
    package: ConfigRef = Field(json_schema_extra=_immutable("package"))
    workflow: ConfigRef = Field(json_schema_extra=_immutable("workflow"))
    bindings: ConfigRef = Field(json_schema_extra=_immutable("bindings"))
    claim_policy: ClaimPolicy = "Automatic"
    retry: RetryPolicy | None = None
    active_deadline_seconds: int | None = Field(default=None, ge=1,
                                                le=bounds.MAX_DEADLINE_SECONDS)
    suspend: bool = False
    max_active: int | None = Field(
        default=None, ge=1, le=1000,
        description="at most this many of the run's slots have an attempt Claiming or Active")


class Pin(Model):
    """One pinned configuration: where it came from and the snapshot workers read."""

    source: str = Field(min_length=1, max_length=253, description="the source ConfigMap's name")
    revision: int = Field(ge=1, le=bounds.MAX_REVISION)
    uid: str = Field(min_length=1, max_length=128, description="the source ConfigMap's uid")
    sha256: str = Field(min_length=64, max_length=64, pattern=r"^[0-9a-f]{64}$")
    snapshot: str = Field(
        min_length=1, max_length=253,
        description="the immutable ConfigMap, owned by the run, that workers read")


class Pins(Model):
    package: Pin
    workflow: Pin
    bindings: Pin

    def snapshot_names(self) -> dict[str, str]:
        return {"package": self.package.snapshot, "workflow": self.workflow.snapshot,
                "bindings": self.bindings.snapshot}


class SlotCounts(Model):
    total: int = 0
    pending: int = 0
    ready: int = 0
    active: int = 0
    retry_wait: int = 0
    succeeded: int = 0
    failed: int = 0


# Write-once pins (docs/design/runs-and-configuration.md), checked by the API server on
# every status write.
# At ``status`` level because ``pinned`` is optional: a transition rule on the field itself
# would not run when a write drops it. The root rule covers a write that drops ``status``.
PINNED_WRITE_ONCE: JsonDict = {
    "rule": "!has(oldSelf.pinned) || (has(self.pinned) && self.pinned == oldSelf.pinned)",
    "message": "status.pinned is write-once: a run keeps the configuration it was pinned to "
    "at launch; create a new run to use other revisions",
}
STATUS_KEPT: JsonDict = {
    "rule": "!has(oldSelf.status) || !has(oldSelf.status.pinned) || has(self.status)",
    "message": "status cannot be removed once status.pinned is set: the pins are write-once",
}
NAME_FITS: JsonDict = {
    "rule": f"self.metadata.name.size() <= {names.MAX_RUN_NAME}",
    "message": f"metadata.name must be at most {names.MAX_RUN_NAME} characters, so that slot "
    f"names (<run>-<{names.SLOT_HASH_LENGTH} hex>) and attempt names (<slot>-<n>) fit in "
    f"{names.MAX_NAME}",
}


class AgentRunStatus(Model):
    """Written by the operator only; ``pinned`` once, at launch."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [PINNED_WRITE_ONCE]})

    pinned: Pins | None = None
    start_time: datetime | None = None
    slots: SlotCounts | None = None
    done: str | None = Field(default=None, max_length=32,
                             description="succeeded/total, for the printer column")
    conditions: Conditions = Field(default_factory=list)
    observed_generation: int | None = None


class AgentRun(Model):
    """A durable run of an agent workflow, pinned to configuration revisions at launch."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [NAME_FITS, STATUS_KEPT]})

    api_version: Literal["agentrun.dev/v1alpha1"] = "agentrun.dev/v1alpha1"
    kind: Literal["AgentRun"] = "AgentRun"
    metadata: ObjectMeta
    spec: AgentRunSpec
    status: AgentRunStatus = Field(default_factory=AgentRunStatus)
