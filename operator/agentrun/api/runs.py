"""AgentRun: a run R = (tenant, package revision, workflow revision, binding revision).

The user writes ``spec`` (which configuration, by name and optional revision). The
operator resolves it once at launch into ``status.pinned`` (write-once, enforced by
CEL) and never resolves again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from agentrun.api import names
from agentrun.api.conditions import Condition
from agentrun.api.meta import ObjectMeta
from agentrun.api.models import Model
from agentrun.api.policies import RetryPolicy

ClaimPolicy = Literal["Automatic", "Manual"]
CONFIG_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
IMMUTABLE = "is immutable: a run pins its configuration at launch; create a new run instead"


def _immutable(field: str) -> dict[str, object]:
    return {"x-kubernetes-validations": [
        {"rule": "self == oldSelf", "message": f"spec.{field} {IMMUTABLE}"}]}


class ConfigRef(Model):
    """Names a configuration; no revision means the highest accepted one at launch."""

    name: str = Field(min_length=1, max_length=253, pattern=CONFIG_NAME_PATTERN)
    revision: int | None = Field(default=None, ge=1)


class AgentRunSpec(Model):
    tenant: str | None = Field(default=None, max_length=63)
    package: ConfigRef = Field(json_schema_extra=_immutable("package"))
    workflow: ConfigRef = Field(json_schema_extra=_immutable("workflow"))
    bindings: ConfigRef = Field(json_schema_extra=_immutable("bindings"))
    claim_policy: ClaimPolicy = "Automatic"
    retry: RetryPolicy | None = None
    active_deadline_seconds: int | None = Field(default=None, ge=1)
    suspend: bool = False


class Pin(Model):
    """One pinned configuration: where it came from and the snapshot workers read."""

    source: str
    revision: int = Field(ge=1)
    uid: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    snapshot: str


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


class AgentRunStatus(Model):
    pinned: Pins | None = None
    start_time: datetime | None = None
    slots: SlotCounts | None = None
    done: str | None = Field(default=None, description="succeeded/total, for the printer column")
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None


class AgentRun(Model):
    api_version: Literal["agentrun.dev/v1alpha1"] = names.API_VERSION
    kind: Literal["AgentRun"] = "AgentRun"
    metadata: ObjectMeta
    spec: AgentRunSpec
    status: AgentRunStatus = Field(default_factory=AgentRunStatus)
