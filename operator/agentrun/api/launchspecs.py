"""LaunchSpec: how to start a worker of some classes for some runs and nodes.

GitOps owns ``spec``; the operator writes only ``status``. A *worker class* is a
label of capability (``cpu``, ``gpu``); a spec's ``scope`` limits which runs and
nodes it may serve (empty lists mean every run, or every node, in the namespace).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from agentrun.api import bounds, names
from agentrun.api.conditions import Conditions
from agentrun.api.configs import WORKER_CLASS_PATTERN
from agentrun.api.meta import ObjectMeta
from agentrun.api.models import Model

RESTART_NEVER_RULE: JsonDict = {
    "rule": "has(self.spec) && has(self.spec.restartPolicy) && self.spec.restartPolicy == 'Never'",
    "message": "template.spec.restartPolicy must be Never: a worker pod is one attempt, "
    "and retries are new attempts made by the operator",
}


class Claim(Model):
    worker_classes: list[str] = Field(
        min_length=1, max_length=32,
        json_schema_extra={"items": {"type": "string", "minLength": 1, "maxLength": 63,
                                     "pattern": WORKER_CLASS_PATTERN}},
    )


class Scope(Model):
    """Which runs and nodes this spec may serve; an empty list means all of them."""

    runs: list[str] = Field(default_factory=list, max_length=256, json_schema_extra={
        "items": {"type": "string", "minLength": 1, "maxLength": names.MAX_RUN_NAME}})
    nodes: list[str] = Field(default_factory=list, max_length=256, json_schema_extra={
        "items": {"type": "string", "minLength": 1, "maxLength": names.MAX_NAME}})


class LeaseSettings(Model):
    duration_seconds: int = Field(default=30, ge=bounds.MIN_LEASE_SECONDS,
                                  le=bounds.MAX_LEASE_SECONDS)


class PodTemplateSpec(Model):
    """A PodTemplateSpec, kept whole; only ``spec.restartPolicy`` is checked here."""

    model_config = ConfigDict(extra="allow")

    metadata: dict[str, object] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    spec: PodSpecShape


class PodSpecShape(Model):
    model_config = ConfigDict(extra="allow")

    restart_policy: Literal["Always", "OnFailure", "Never"] | None = None
    containers: list[dict[str, object]] = Field(
        min_length=1, json_schema_extra={"items": {"type": "object",
                                                    "x-kubernetes-preserve-unknown-fields": True}})


PodTemplateSpec.model_rebuild()

# The worker sidecar (``spec.sidecar``; docs/worker-sidecar.md). Its bounds are here, where
# the LaunchSpec is parsed, and ``agentrun-worker sidecar`` checks its options by them.
SIDECAR_IMAGE_CHARS = 512
SIDECAR_MIN_PORT, SIDECAR_MAX_PORT, SIDECAR_DEFAULT_PORT = 1024, 65535, 8686
SIDECAR_MIN_CHECK_IN, SIDECAR_MAX_CHECK_IN, SIDECAR_DEFAULT_CHECK_IN = 5, 600, 30


# A resource quantity as Kubernetes writes one (``100m``, ``64Mi``, ``1``, ``0.5``), as a
# string, not negative: the API server's own grammar (its serialization format).
QUANTITY_CHARS = 32
QUANTITY_PATTERN = (r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
                    r"(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
Quantity = Annotated[str, Field(min_length=1, max_length=QUANTITY_CHARS,
                                pattern=QUANTITY_PATTERN)]


class ResourceList(Model):
    """The resources a quota may count on a container: cpu, memory, ephemeral storage."""

    cpu: Quantity | None = None
    memory: Quantity | None = None
    ephemeral_storage: Quantity | None = Field(default=None, alias="ephemeral-storage")


class SidecarResources(Model):
    """The sidecar container's ``resources``, as written (a list left out is not set)."""

    requests: ResourceList | None = None
    limits: ResourceList | None = None


# What the sidecar gets when ``spec.sidecar.resources`` is left out: requests and limits
# both, so that a namespace whose ResourceQuota counts limits (or requests) accepts it.
# The sidecar is one Python process renewing a Lease and serving 127.0.0.1; a limit of one
# CPU never throttles it, and 256 MiB is about three times what it uses.
DEFAULT_SIDECAR_RESOURCES = SidecarResources(
    requests=ResourceList(cpu="50m", memory="64Mi"),
    limits=ResourceList(cpu="1", memory="256Mi"))


class Sidecar(Model):
    """The worker sidecar for main containers in any language: ``image`` (the project's
    worker image) runs ``agentrun-worker sidecar`` as a native sidecar serving the SDK on
    127.0.0.1:``port``, renewing the lease only while a main container checked in within
    ``checkInSeconds``. ``resources`` are its container's (left out: requests cpu 50m,
    memory 64Mi; limits cpu 1, memory 256Mi)."""

    image: str = Field(min_length=1, max_length=SIDECAR_IMAGE_CHARS, pattern=r"^\S+$")
    port: int = Field(default=SIDECAR_DEFAULT_PORT, ge=SIDECAR_MIN_PORT, le=SIDECAR_MAX_PORT)
    check_in_seconds: int = Field(default=SIDECAR_DEFAULT_CHECK_IN, ge=SIDECAR_MIN_CHECK_IN,
                                  le=SIDECAR_MAX_CHECK_IN)
    # None (not the defaults) when left out: the digest of a spec pinned before this field
    # existed stays the same (core.launchspecs.launchpins), and the pod builder applies the
    # defaults.
    resources: SidecarResources | None = None

    def container_resources(self) -> dict[str, object]:
        """The sidecar container's ``resources``: as given, else the defaults."""
        return (self.resources or DEFAULT_SIDECAR_RESOURCES).wire()


class ApprovalFloor(Model):
    """An effect this LaunchSpec's workers may send only once ``approvers`` distinct people
    approved its exact payload: a floor a worker cannot lower (it may ask for more)."""

    effect: str = Field(min_length=1, max_length=bounds.EFFECT_NAME_CHARS,
                        pattern=r"^\S(.*\S)?$",
                        description="the effect's name, as the worker's SDK call gives it")
    approvers: int = Field(default=1, ge=1, le=bounds.MAX_APPROVERS)


class LaunchSpecSpec(Model):
    claim: Claim
    scope: Scope = Field(default_factory=Scope)
    priority: int = Field(default=0, ge=-1000, le=1000)
    lease: LeaseSettings = Field(default_factory=LeaseSettings)
    start_deadline_seconds: int = Field(default=300, ge=5, le=86400)
    template: PodTemplateSpec = Field(
        json_schema_extra={"x-kubernetes-validations": [RESTART_NEVER_RULE]})
    sidecar: Sidecar | None = None
    # None, not []: a LaunchSpec without floors keeps the digest it always had (its pins).
    approvals: list[ApprovalFloor] | None = Field(
        default=None, max_length=bounds.APPROVAL_FLOORS,
        description="effects that need approval before a worker sends them (given to the "
        "worker as AGENTRUN_APPROVALS; its SDK enforces it)",
        json_schema_extra={"x-kubernetes-list-type": "map",
                           "x-kubernetes-list-map-keys": ["effect"]})

    def approval_floors(self) -> dict[str, int]:
        """Effect name -> approvers, as the worker's env carries it."""
        return {floor.effect: floor.approvers for floor in self.approvals or ()}

    def sidecar_conflict(self) -> str | None:
        """Why ``sidecar`` cannot be added to ``template`` (None: it can): a container or
        init container there already has its name, which pods keep unique."""
        if self.sidecar is None:
            return None
        spec = self.template.spec
        extra = spec.model_extra or {}
        for field, found in (("containers", spec.containers),
                             ("initContainers", extra.get("initContainers") or [])):
            for container in found if isinstance(found, list) else []:
                if isinstance(container, dict) and container.get("name") == names.SIDECAR_CONTAINER:
                    return (f"template.spec.{field} has a container named "
                            f"{names.SIDECAR_CONTAINER!r}, the name spec.sidecar adds; "
                            "rename it, or remove spec.sidecar")
        return None


GENERATIONS_KEPT = 5


class PinnedGeneration(Model):
    generation: int = Field(ge=0)
    slots: int = Field(ge=0, description="slots that pin this generation")


class LaunchSpecStatus(Model):
    """Written by the operator only: whether the template is valid, and who pins it.

    ``pinnedBy`` counts every slot in the namespace that pins this spec (any generation);
    ``generations`` the slots per generation, newest first, for the last few. The label
    ``agentrun.dev/launch-spec`` on each slot gives the full list (``kubectl get -l``).
    """

    conditions: Conditions = Field(default_factory=list)
    observed_generation: int | None = None
    pinned_by: int | None = Field(default=None, ge=0, description="slots that pin this spec")
    generations: list[PinnedGeneration] = Field(default_factory=list,
                                                max_length=GENERATIONS_KEPT)


class LaunchSpec(Model):
    """How to start workers of some classes for some runs and nodes (GitOps-managed)."""

    api_version: Literal["agentrun.dev/v1alpha1"] = "agentrun.dev/v1alpha1"
    kind: Literal["LaunchSpec"] = "LaunchSpec"
    metadata: ObjectMeta
    spec: LaunchSpecSpec
    status: LaunchSpecStatus = Field(default_factory=LaunchSpecStatus)
