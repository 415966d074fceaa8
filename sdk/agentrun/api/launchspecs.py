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
    """Which slots this spec can start attempts for: those of these worker classes."""

    worker_classes: list[str] = Field(
        min_length=1, max_length=32,
        description="the worker classes (a slot's status.workerClass) it starts workers of",
        json_schema_extra={"items": {"type": "string", "minLength": 1, "maxLength": 63,
                                     "pattern": WORKER_CLASS_PATTERN}},
    )


class Scope(Model):
    """Which runs and nodes this spec may serve; an empty list means all of them."""

    runs: list[str] = Field(default_factory=list, max_length=256, json_schema_extra={
        "items": {"type": "string", "minLength": 1, "maxLength": names.MAX_RUN_NAME}},
        description="the AgentRuns (by name) it may serve; empty: every run of the namespace")
    nodes: list[str] = Field(default_factory=list, max_length=256, json_schema_extra={
        "items": {"type": "string", "minLength": 1, "maxLength": names.MAX_NAME}},
        description="the workflow nodes it may serve; empty: every node")


class LeaseSettings(Model):
    """The lease of each attempt this spec starts."""

    duration_seconds: int = Field(
        default=30, ge=bounds.MIN_LEASE_SECONDS, le=bounds.MAX_LEASE_SECONDS,
        description="seconds without a renewal the operator sees before the attempt's lease "
                    "counts as expired (then its pod is deleted); workers renew every third of it")


class PodTemplateSpec(Model):
    """A PodTemplateSpec, kept whole; only ``spec.restartPolicy`` is checked here."""

    model_config = ConfigDict(extra="allow")

    metadata: dict[str, object] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="labels and annotations for each worker pod (the operator's own win)")
    spec: PodSpecShape


class PodSpecShape(Model):
    """A PodSpec, kept whole; the operator adds the worker's environment, the pinned
    configuration's mounts and the optional sidecar to it."""

    model_config = ConfigDict(extra="allow")

    restart_policy: Literal["Always", "OnFailure", "Never"] | None = Field(
        default=None, description="must be Never: a pod is one attempt; retries are new ones")
    containers: list[dict[str, object]] = Field(
        min_length=1, description="the main containers (a Container each, kept whole)",
        json_schema_extra={"items": {"type": "object",
                                     "x-kubernetes-preserve-unknown-fields": True}})


PodTemplateSpec.model_rebuild()

# The worker sidecar (``spec.sidecar``; docs/worker-sidecar.md). Its port and check-in
# bounds are in :mod:`bounds`, where ``agentrun-worker sidecar`` checks its options by them.
SIDECAR_IMAGE_CHARS = 512


# A resource quantity as Kubernetes writes one (``100m``, ``64Mi``, ``1``, ``0.5``), as a
# string, not negative: the API server's own grammar (its serialization format).
QUANTITY_CHARS = 32
QUANTITY_PATTERN = (r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
                    r"(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
Quantity = Annotated[str, Field(min_length=1, max_length=QUANTITY_CHARS,
                                pattern=QUANTITY_PATTERN)]


class ResourceList(Model):
    """The resources a quota may count on a container: cpu, memory, ephemeral storage."""

    cpu: Quantity | None = Field(default=None, description="CPU, such as 50m or 1")
    memory: Quantity | None = Field(default=None, description="memory, such as 64Mi")
    ephemeral_storage: Quantity | None = Field(default=None, alias="ephemeral-storage",
                                               description="local disk, such as 1Gi")


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


Capability = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Z_]+$")]


class Capabilities(Model):
    """Linux capabilities added to and dropped from the container's default set."""

    add: list[Capability] | None = Field(
        default=None, max_length=16, description="capabilities added, such as NET_BIND_SERVICE")
    drop: list[Capability] | None = Field(
        default=None, max_length=64, description="capabilities dropped, such as ALL")


class SeccompProfile(Model):
    """The seccomp filter the container runs under."""

    type: Literal["RuntimeDefault", "Localhost", "Unconfined"] = Field(
        description="RuntimeDefault (the container runtime's), Localhost (a file on the "
                    "node) or Unconfined")
    localhost_profile: str | None = Field(
        default=None, min_length=1, max_length=255,
        description="with Localhost: the profile's path under the kubelet's seccomp folder")


class SidecarSecurity(Model):
    """The sidecar container's ``securityContext`` (the fields Pod Security Standards
    judge), replacing the default whole when given."""

    run_as_user: int | None = Field(default=None, ge=0, le=2**31 - 1,
                                    description="the user id it runs as")
    run_as_group: int | None = Field(default=None, ge=0, le=2**31 - 1,
                                     description="the group id it runs as")
    run_as_non_root: bool | None = Field(
        default=None, description="true: the kubelet refuses to start it as uid 0")
    read_only_root_filesystem: bool | None = Field(
        default=None, description="true: its root filesystem is mounted read-only")
    allow_privilege_escalation: bool | None = Field(
        default=None, description="false: no process of it gains more privileges than its parent")
    capabilities: Capabilities | None = None
    seccomp_profile: SeccompProfile | None = None


# What the sidecar gets when ``spec.sidecar.securityContext`` is left out: what the
# restricted Pod Security Standard asks of a container, so that a namespace enforcing it
# admits the pod when the template's own containers comply. The project's worker image runs
# as uid 65532, so runAsNonRoot holds.
DEFAULT_SIDECAR_SECURITY = SidecarSecurity(
    run_as_non_root=True, allow_privilege_escalation=False,
    capabilities=Capabilities(drop=["ALL"]), seccomp_profile=SeccompProfile(type="RuntimeDefault"))


class Sidecar(Model):
    """The worker sidecar for main containers in any language: ``image`` (the project's
    worker image) runs ``agentrun-worker sidecar`` as a native sidecar serving the SDK on
    127.0.0.1:``port``, renewing the lease only while a main container checked in within
    ``checkInSeconds``. ``resources`` are its container's (left out: requests cpu 50m,
    memory 64Mi; limits cpu 1, memory 256Mi), as is ``securityContext`` (left out: what the
    restricted Pod Security Standard asks: non-root, no privilege escalation, every
    capability dropped, the runtime's seccomp profile)."""

    image: str = Field(min_length=1, max_length=SIDECAR_IMAGE_CHARS, pattern=r"^\S+$",
                       description="the project's worker image, which runs the sidecar")
    port: int = Field(default=bounds.SIDECAR_DEFAULT_PORT, ge=bounds.SIDECAR_MIN_PORT,
                      le=bounds.SIDECAR_MAX_PORT,
                      description="the port it serves the SDK on, on 127.0.0.1 only")
    check_in_seconds: int = Field(
        default=bounds.SIDECAR_DEFAULT_CHECK_IN, ge=bounds.SIDECAR_MIN_CHECK_IN,
        le=bounds.SIDECAR_MAX_CHECK_IN,
        description="the lease is renewed only while a main container checked in within this")
    # None (not the defaults) when left out: the digest of a spec pinned before this field
    # existed stays the same (core.launchspecs.launchpins), and the pod builder applies the
    # defaults.
    resources: SidecarResources | None = None
    security_context: SidecarSecurity | None = None  # None when left out, as resources

    def container_resources(self) -> dict[str, object]:
        """The sidecar container's ``resources``: as given, else the defaults."""
        return (self.resources or DEFAULT_SIDECAR_RESOURCES).wire()

    def container_security(self) -> dict[str, object]:
        """The sidecar container's ``securityContext``: as given, else the restricted one."""
        return (self.security_context or DEFAULT_SIDECAR_SECURITY).wire()


class ApprovalFloor(Model):
    """An effect this LaunchSpec's workers may send only once ``approvers`` distinct people
    approved its exact payload: a floor a worker cannot lower (it may ask for more)."""

    effect: str = Field(min_length=1, max_length=bounds.EFFECT_NAME_CHARS,
                        pattern=r"^\S(.*\S)?$",
                        description="the effect's name, as the worker's SDK call gives it")
    approvers: int = Field(default=1, ge=1, le=bounds.MAX_APPROVERS,
                           description="distinct people who must approve its payload")


class LaunchSpecSpec(Model):
    """How to start workers, written by GitOps (or a LaunchSpec admin). A slot pins a copy
    when it is made Ready or reassigned: a later edit or deletion moves only later pins."""

    claim: Claim
    scope: Scope = Field(default_factory=Scope)
    priority: int = Field(default=0, ge=-1000, le=1000, description=(
        "among specs that fit a slot, equally specific (scope), the higher wins; then the name"))
    lease: LeaseSettings = Field(default_factory=LeaseSettings)
    start_deadline_seconds: int = Field(default=300, ge=5, le=86400, description=(
        "seconds from the claim for the worker to run and first renew its lease; else its "
        "pod is deleted and the attempt ends StartTimeout"))
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
    """The slots pinned to one generation of the spec."""

    generation: int = Field(ge=0, description="the LaunchSpec's metadata.generation")
    slots: int = Field(ge=0, description="slots that pin this generation")


class LaunchSpecStatus(Model):
    """Written by the operator only: whether the template is valid, and who pins it.

    ``pinnedBy`` counts every slot in the namespace that pins this spec (any generation);
    ``generations`` the slots per generation, newest first, for the last few. The label
    ``agentrun.dev/launch-spec`` on each slot gives the full list (``kubectl get -l``).
    """

    conditions: Conditions = Field(default_factory=list, description=(
        "Valid: whether a server-side dry run of an attempt's pod from this spec passes"))
    observed_generation: int | None = Field(
        default=None, description="the metadata.generation the Valid condition judged")
    pinned_by: int | None = Field(default=None, ge=0, description="slots that pin this spec")
    generations: list[PinnedGeneration] = Field(
        default_factory=list, max_length=GENERATIONS_KEPT,
        description=f"slots per pinned generation, newest first (at most {GENERATIONS_KEPT})")


class LaunchSpec(Model):
    """How to start workers of some classes for some runs and nodes (GitOps-managed)."""

    api_version: Literal["agentrun.dev/v1alpha1"] = "agentrun.dev/v1alpha1"
    kind: Literal["LaunchSpec"] = "LaunchSpec"
    metadata: ObjectMeta
    spec: LaunchSpecSpec
    status: LaunchSpecStatus = Field(default_factory=LaunchSpecStatus)
