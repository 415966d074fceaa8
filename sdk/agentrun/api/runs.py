"""AgentRun: a run R = (tenant, package revision, workflow revision, binding revision).

The user writes ``spec`` (which configuration, by name and optional revision). The
operator resolves it once at launch into ``status.pinned`` (write-once, enforced by
CEL) and never resolves again.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Final, Literal

from pydantic import AfterValidator, ConfigDict, Field
from pydantic.config import JsonDict

from agentrun.api import bounds, names, texts
from agentrun.api.budgets import BUDGET_KEPT, Budget, BudgetStatus
from agentrun.api.conditions import Conditions
from agentrun.api.meta import ObjectMeta
from agentrun.api.models import Model
from agentrun.api.modelusage import ModelUsage
from agentrun.api.policies import RetryPolicy
from agentrun.api.slots import CommandRecord

ClaimPolicy = Literal["Automatic", "Manual"]
CONFIG_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
IMMUTABLE = "is immutable: a run pins its configuration at launch; create a new run instead"


def _immutable(field: str) -> JsonDict:
    return {"x-kubernetes-validations": [
        {"rule": "self == oldSelf", "message": f"spec.{field} {IMMUTABLE}"}]}


class ConfigRef(Model):
    """Names a configuration; no revision means the highest accepted one at launch."""

    name: str = Field(min_length=1, max_length=253, pattern=CONFIG_NAME_PATTERN,
                      description="its ConfigMaps' label agentrun.dev/config-name")
    revision: int | None = Field(default=None, ge=1, le=bounds.MAX_REVISION,
                                 description="the agentrun.dev/revision to pin (accepted); "
                                 "absent: the highest accepted one at launch")


# A fork's starting point: ``<node>:<step>``, a workflow node and a step key in its journal.
FORK_AT_PATTERN: Final = (r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"  # a node (at most 63)
                          r":[a-z0-9]([-a-z0-9]{0,46}[a-z0-9])?$")  # a step key (48)
FORK_AT_CHARS: Final = 63 + 1 + bounds.STEP_KEY_CHARS
RUN_COMMANDS_KEPT: Final = 20  # ledger entries a run keeps (budget raises; the newest)
FORK_KEPT: JsonDict = {
    "rule": "has(self.fork) == has(oldSelf.fork)",
    "message": "spec.fork is set when a run is created and never after: create a new run "
               "to fork (kubectl agentrun fork)",
}


class ForkSpec(Model):
    """Where a fork starts: a run of the same namespace (and so tenant), and the step.

    Written by ``kubectl agentrun fork`` (or by hand, or by GitOps) when the run is created;
    the operator pins the source's snapshots and copies the source's journal up to ``at``
    into the fork's own (docs/design/reruns.md, "Fork").
    """

    run: str = Field(min_length=1, max_length=253, pattern=bounds.RUN_PATTERN,
                     description="the source run, in this run's namespace")
    uid: str | None = Field(
        default=None, max_length=128, pattern=r"^[-a-z0-9]+$",
        description="the source run's uid (the plugin fills it in): a run recreated under "
                    "the source's name is not the source")
    at: str | None = Field(
        default=None, max_length=FORK_AT_CHARS, pattern=FORK_AT_PATTERN,
        description="<node>:<step>: the fork runs that node again from that step (its "
                    "steps before it copied), the nodes after it from their start and every "
                    "other node's committed steps copied; absent: every node's copied")
    reason: texts.Reason = Field(min_length=1, description="why the run was forked")


class AgentRunSpec(Model):
    """What the user asks for: the configuration to pin, and how the slots are claimed and
    retried. Written by the user (kubectl apply, GitOps)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        FORK_KEPT, BUDGET_KEPT]})

    tenant: str | None = Field(default=None, max_length=63, description=(
        "for readability only: where given, the namespace's tenant (its label "
        "agentrun.dev/tenant; admission refuses another); absent: the namespace's all the same"))
    package: ConfigRef = Field(json_schema_extra=_immutable("package"),
                               description="what the run must produce (immutable)")
    workflow: ConfigRef = Field(json_schema_extra=_immutable("workflow"),
                                description="the workflow: its nodes become slots (immutable)")
    bindings: ConfigRef = Field(json_schema_extra=_immutable("bindings"), description=(
        "each node's agent, attachments and effect targets; the prices (immutable)"))
    claim_policy: ClaimPolicy = Field(default="Automatic", description=(
        "Automatic: the operator claims each claimable slot's next attempt itself; Manual: "
        "only a claim command does (kubectl agentrun claim)"))
    retry: RetryPolicy | None = Field(default=None, description=(
        "the run's retry defaults for its slots; a node's own settings win; absent: the "
        "operator's (3 attempts; 10 s, doubling, at most 300 s)"))
    active_deadline_seconds: int | None = Field(
        default=None, ge=1, le=bounds.MAX_DEADLINE_SECONDS, description=(
            "seconds from status.startTime (the pin); then every open slot fails "
            "(DeadlineExceeded, a live attempt fenced) and the run Failed; absent: none"))
    suspend: bool = Field(default=False, description=(
        "true: no new attempt is claimed (running ones go on); false again resumes"))
    max_active: int | None = Field(
        default=None, ge=1, le=1000,
        description="at most this many of the run's slots have an attempt Claiming or Active")
    fork: ForkSpec | None = Field(default=None, json_schema_extra={"x-kubernetes-validations": [
        {"rule": "self == oldSelf", "message": "spec.fork is immutable: a fork's source and "
                                               "step are decided when it is created"}]})
    budget: Budget | None = Field(default=None, json_schema_extra={"x-kubernetes-validations": [
        {"rule": "self == oldSelf", "message": "spec.budget is immutable: raise it with "
         "kubectl agentrun budget <run> --add ... --reason R (its ledger says who and why)"}]})


class Pin(Model):
    """One pinned configuration: where it came from and the snapshot workers read."""

    source: str = Field(min_length=1, max_length=253, description="the source ConfigMap's name")
    revision: int = Field(ge=1, le=bounds.MAX_REVISION, description="the revision pinned")
    uid: str = Field(min_length=1, max_length=128, description="the source ConfigMap's uid")
    sha256: str = Field(min_length=64, max_length=64, pattern=r"^[0-9a-f]{64}$",
                        description="of the configuration's text; workers check their copy")
    snapshot: str = Field(
        min_length=1, max_length=253,
        description="the immutable ConfigMap, owned by the run, that workers read")


# Where a run's journal lives (docs/design/runs-and-configuration.md, "Where the journal
# lives"). Each check is one function, used by the models and by the operator's flags alike.
JOURNAL_ENDPOINT_CHARS: Final = 512
# http or https, a host name, an IPv4 address or a bracketed IPv6 address, an optional
# port; nothing else (no user, path, query or fragment: the bucket and prefix say the rest).
JOURNAL_ENDPOINT_PATTERN: Final = (
    r"^https?://([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?$")
JOURNAL_BUCKET_PATTERN: Final = r"^[a-z0-9][-a-z0-9.]{1,61}[a-z0-9]$"  # S3's naming rules
JOURNAL_PREFIX_CHARS: Final = 512
# Segments of [A-Za-z0-9._-] joined by "/", none "." or "..": an HTTP client may normalise
# those away, and the object written would not be the one the prefix names.
_SEGMENT = r"(\.\.[-A-Za-z0-9._]+|\.?[-A-Za-z0-9_][-A-Za-z0-9._]*)"
JOURNAL_PREFIX_PATTERN: Final = rf"^{_SEGMENT}(/{_SEGMENT})*$"
JOURNAL_REGION_CHARS: Final = 64
JOURNAL_REGION_PATTERN: Final = r"^[A-Za-z0-9]([-A-Za-z0-9._]*[A-Za-z0-9])?$"
JOURNAL_REGION: Final = "us-east-1"  # what S3-compatible stores accept when they ignore it
JOURNAL_SECRET_CHARS: Final = 253
# The operator's base prefix leaves room for "/<namespace>/<run uid>" (a DNS label, a UUID).
JOURNAL_BASE_PREFIX_CHARS: Final = JOURNAL_PREFIX_CHARS - len("/") - 63 - len("/") - 36
JOURNAL_BASE_PREFIX: Final = "agentrun"
# A finished run's journal kept this long at most (the operator's --journal-retention-seconds):
# ten years; 0 deletes it as soon as the run finishes (Kubernetes Jobs' ttlSecondsAfterFinished).
JOURNAL_RETENTION_SECONDS: Final = 10 * 365 * 24 * 3600


def _checked(text: str, *, pattern: str, most: int, what: str, shape: str) -> str:
    if len(text) > most or re.fullmatch(pattern, text) is None:
        shown = text if len(text) <= 60 else f"{text[:60]}…"
        raise ValueError(f"{what} must be {shape} (at most {most} characters), not {shown!r}")
    return text


def journal_endpoint(text: str) -> str:
    """The S3 API's URL, checked: an http(s) URL with a host and an optional port only."""
    _checked(text, pattern=JOURNAL_ENDPOINT_PATTERN, most=JOURNAL_ENDPOINT_CHARS,
             what="the journal endpoint", shape="an http:// or https:// URL with a host and an "
             "optional port and nothing else (no path, not even '/', no query, no user), "
             "such as http://minio.storage:9000")
    found = re.fullmatch(JOURNAL_ENDPOINT_PATTERN, text)
    port = found.group(3) if found is not None else None  # ":<digits>", or None: no port
    if port is not None and not 1 <= int(port[1:]) <= 65535:
        raise ValueError(f"the journal endpoint's port must be between 1 and 65535, "
                         f"not {port[1:]}")
    return text


def journal_bucket(text: str) -> str:
    return _checked(text, pattern=JOURNAL_BUCKET_PATTERN, most=63, what="the journal bucket",
                    shape="an S3 bucket name: 3 or more lowercase letters, digits, dots and "
                    "hyphens, starting and ending with a letter or digit")


def journal_prefix(text: str, *, most: int = JOURNAL_PREFIX_CHARS) -> str:
    return _checked(text, pattern=JOURNAL_PREFIX_PATTERN, most=most, what="the journal prefix",
                    shape="segments of letters, digits, '.', '_' and '-' joined by '/', with no "
                    "leading or trailing '/' and no '.' or '..' segment")


def journal_base_prefix(text: str) -> str:
    """The operator's own prefix: may be empty (runs' journals at the bucket's root)."""
    return text if text == "" else journal_prefix(text, most=JOURNAL_BASE_PREFIX_CHARS)


def journal_region(text: str) -> str:
    return _checked(text, pattern=JOURNAL_REGION_PATTERN, most=JOURNAL_REGION_CHARS,
                    what="the journal region", shape="letters, digits, '.', '_' and '-', such "
                    f"as {JOURNAL_REGION}")


def journal_secret(text: str) -> str:
    return _checked(text, pattern=CONFIG_NAME_PATTERN, most=JOURNAL_SECRET_CHARS,
                    what="the journal Secret", shape="a Secret's name (a DNS subdomain: "
                    "lowercase letters, digits, '.' and '-')")


JournalEndpoint = Annotated[str, Field(min_length=1, max_length=JOURNAL_ENDPOINT_CHARS,
                                       json_schema_extra={"pattern": JOURNAL_ENDPOINT_PATTERN}),
                            AfterValidator(journal_endpoint)]
JournalBucket = Annotated[str, Field(min_length=3, max_length=63,
                                     json_schema_extra={"pattern": JOURNAL_BUCKET_PATTERN}),
                          AfterValidator(journal_bucket)]
JournalRegion = Annotated[str, Field(min_length=1, max_length=JOURNAL_REGION_CHARS,
                                     json_schema_extra={"pattern": JOURNAL_REGION_PATTERN}),
                          AfterValidator(journal_region)]
JournalSecret = Annotated[str, Field(min_length=1, max_length=JOURNAL_SECRET_CHARS,
                                     json_schema_extra={"pattern": CONFIG_NAME_PATTERN}),
                          AfterValidator(journal_secret)]
JournalRetention = Annotated[int, Field(
    ge=0, le=JOURNAL_RETENTION_SECONDS,
    description="seconds a finished run's journal is kept, from the moment the run "
                "finished (Succeeded or Failed); then the operator deletes it and the run "
                "stays; absent: kept until the run is deleted")]


class JournalPin(Model):
    """Where the run's journal lives: an S3-compatible bucket, under the run's own prefix.

    Chosen by the platform (the operator's configuration) and pinned at launch like the
    configuration, so that an operator reconfigured later moves only new runs: a running
    run's journal must stay where its earlier attempts wrote it.
    """

    endpoint: JournalEndpoint = Field(description="the S3 API's URL, such as "
                                                  "http://minio.storage:9000")
    bucket: JournalBucket = Field(description="the bucket the journal is in")
    prefix: Annotated[str, Field(min_length=1, max_length=JOURNAL_PREFIX_CHARS,
                                 json_schema_extra={"pattern": JOURNAL_PREFIX_PATTERN}),
                      AfterValidator(journal_prefix)] = Field(
        description="the run's own: <operator prefix>/<namespace>/<run uid>, so a run "
                    "recreated under the same name never shares a journal")
    region: JournalRegion = Field(default=JOURNAL_REGION,
                                  description="the region requests are signed for")
    secret: JournalSecret | None = Field(
        default=None,
        description="a Secret in the run's namespace with the keys accessKeyId and "
                    "secretAccessKey, mounted into the workers; absent: unsigned requests")
    retention_seconds: JournalRetention | None = None


class JournalSettings(Model):
    """The operator's journal configuration (its ``--journal-*`` flags): where new runs'
    journals go. Not an API document; each run gets its own :class:`JournalPin` from it."""

    endpoint: JournalEndpoint
    bucket: JournalBucket
    prefix: Annotated[str, Field(max_length=JOURNAL_BASE_PREFIX_CHARS),
                      AfterValidator(journal_base_prefix)] = JOURNAL_BASE_PREFIX
    region: JournalRegion = JOURNAL_REGION
    secret: JournalSecret | None = None
    retention_seconds: JournalRetention | None = None


class Pins(Model):
    """The configuration resolved at launch, written once by the operator and never
    changed (the API server refuses a change): the run's slots and workers read only this."""

    package: Pin
    workflow: Pin
    bindings: Pin
    journal: JournalPin | None = Field(
        default=None, description="where the run's journal lives; absent: the operator had "
                                  "none configured when the run was pinned")

    def snapshot_names(self) -> dict[str, str]:
        return {"package": self.package.snapshot, "workflow": self.workflow.snapshot,
                "bindings": self.bindings.snapshot}


class SlotCounts(Model):
    """The run's slots by state, as last counted; a node without its Slot yet is in none."""

    total: int = Field(default=0, description="workflow nodes, with a Slot or not")
    pending: int = Field(default=0, description="Pending: waiting for their dependencies")
    ready: int = Field(default=0, description="Ready: pinned, no attempt yet")
    active: int = Field(default=0, description="Claiming or Active: an attempt under way")
    retry_wait: int = Field(default=0, description="RetryWait: waiting for a retry or a person")
    succeeded: int = Field(default=0, description="Succeeded")
    failed: int = Field(default=0, description="Failed")


# Write-once pins (docs/design/runs-and-configuration.md), checked by the API server on
# every status write.
# At ``status`` level because ``pinned`` is optional: a transition rule on the field itself
# would not run when a write drops it. The root rule covers a write that drops ``status``.
PINNED_WRITE_ONCE: JsonDict = {
    "rule": "!has(oldSelf.pinned) || (has(self.pinned) && self.pinned == oldSelf.pinned)",
    "message": "status.pinned is write-once: a run keeps the configuration it was pinned to "
    "at launch; create a new run to use other revisions",
}
CREATOR_WRITE_ONCE: JsonDict = {
    "rule": "!has(oldSelf.pinned) || (has(self.creator) == has(oldSelf.creator) && "
            "(!has(self.creator) || self.creator == oldSelf.creator))",
    "message": "status.creator is decided once, when the run is pinned: who created a run "
    "never changes, and a run pinned without a verified creator never gets one",
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


class Inherited(Model):
    """What one node of a fork starts from: the source's records copied into the fork's own
    journal as its attempt 0 (a sealed Lease ``<slot>-0`` the operator wrote)."""

    node: str = Field(min_length=1, max_length=63, description="the workflow node")
    records: int = Field(ge=0, le=2**31 - 1, description="records copied")
    bytes: int = Field(ge=0, le=bounds.MAX_REVISION,  # 2^53 - 1: exact as a JSON number
                       description="the copied records' payload bytes")
    commits: int = Field(ge=0, le=2**31 - 1, description="journal nodes written")


class ForkStatus(Model):
    """A fork's provenance, written once when its journal has been copied."""

    run: str = Field(min_length=1, max_length=253, description="the source run's name")
    uid: str = Field(min_length=1, max_length=128, description="the source run's uid")
    node: str | None = Field(default=None, max_length=63, description=(
        "the node run again from step (spec.fork.at); absent: every node's steps copied"))
    step: str | None = Field(default=None, max_length=bounds.STEP_KEY_CHARS,
                             description="the step of node the fork runs again from")
    actor: texts.Actor | None = Field(default=None, description="who forked it: the run's "
                                       "creator as admission stamped it")
    reason: texts.Reason = Field(description="why it was forked (spec.fork.reason)")
    copied: datetime = Field(description="when the source's journal was copied")
    inherited: list[Inherited] = Field(default_factory=list, max_length=256,
                                       description="what each node starts from")


FORK_WRITE_ONCE: JsonDict = {
    "rule": "!has(oldSelf.fork) || (has(self.fork) && self.fork == oldSelf.fork)",
    "message": "status.fork is write-once: a fork's provenance never changes",
}


class AgentRunStatus(Model):
    """Written by the operator only; ``pinned`` once, at launch."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        PINNED_WRITE_ONCE, CREATOR_WRITE_ONCE, FORK_WRITE_ONCE]})

    pinned: Pins | None = None
    fork: ForkStatus | None = None
    creator: texts.Actor | None = Field(
        default=None, description="who created the run, as admission stamped it (the "
        "annotation agentrun.dev/creator under the stamping epoch in force), copied once "
        "at pin time; none: it could not be verified (condition CreatorVerified)")
    start_time: datetime | None = Field(default=None, description=(
        "when the run was pinned; activeDeadlineSeconds counts from it"))
    slots: SlotCounts | None = None
    done: str | None = Field(default=None, max_length=32,
                             description="succeeded/total, for the printer column")
    conditions: Conditions = Field(default_factory=list, description=(
        "Pinned, CreatorVerified, Ready, Succeeded, Failed; Forked, JournalDeleted and "
        "NameSquatted where they apply"))
    usage: ModelUsage | None = Field(default=None, description=(
        "the model usage of the run's slots (the sum of their usage as last read)"))
    budget: BudgetStatus | None = None
    commands: list[CommandRecord] = Field(
        default_factory=list, max_length=RUN_COMMANDS_KEPT,
        description="the run's command ledger (budget raises, accepted or rejected)")
    reruns: int = Field(
        default=0, ge=0, le=bounds.MAX_REVISION,  # 2^53 - 1: exact as a JSON number
        description="the sum of its slots' reruns when the status was last derived: a larger "
                    "sum reopens a Succeeded or Failed verdict (a rerun), a smaller one (a "
                    "stale read) never does")
    observed_generation: int | None = Field(
        default=None, description="the run's metadata.generation this status was derived for")


class AgentRun(Model):
    """A durable run of an agent workflow, pinned to configuration revisions at launch."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [NAME_FITS, STATUS_KEPT]})

    api_version: Literal["agentrun.dev/v1alpha1"] = "agentrun.dev/v1alpha1"
    kind: Literal["AgentRun"] = "AgentRun"
    metadata: ObjectMeta
    spec: AgentRunSpec
    status: AgentRunStatus = Field(default_factory=AgentRunStatus)
