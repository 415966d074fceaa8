"""Slot: one workflow node's unit of work, which outlives the pods that attempt it.

Terms:
- *attempt*: one worker Pod plus one Lease, both named ``<slot>-<n>``; ``n`` is the
  attempt number and the worker's fencing token. The Lease is the attempt's durable
  record: tombstoned when the attempt ends, kept until the run is deleted.
- *pending / active / prior worker*: the attempt being created, the one running, and
  the last one that ended (``<slot>-<n>`` names).
- *ledger* (``status.commands``): every command the operator decided on, accepted or
  rejected, by request id; a request id already there is never applied again.
- *owner actor*: the authenticated person whose command led to an attempt (a manual
  claim, or a reassignment followed by a claim); automatic claims record none.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from agentrun.api import bounds, names, texts
from agentrun.api.conditions import Conditions
from agentrun.api.configs import MAX_NODES, NODE_NAME_PATTERN, WORKER_CLASS_PATTERN
from agentrun.api.cuts import (
    CUT_CHARS,
    CUT_PATTERN,
    MAX_CUTS,
    MAX_RESENDS,
    RESEND_CHARS,
    RESEND_PATTERN,
)
from agentrun.api.meta import ObjectMeta
from agentrun.api.models import Model
from agentrun.api.modelusage import ModelUsage
from agentrun.api.policies import RetryPolicy

ATTEMPTS_KEPT = 10
# A count that only grows, by one per rerun of the slot or of a slot it depends on: a bound
# no slot reaches (a rerun is a person's command), kept so the schema states one.
MAX_RERUNS = 2**31 - 1
COMMANDS_KEPT = 50


class SlotState(StrEnum):
    PENDING = "Pending"
    READY = "Ready"
    CLAIMING = "Claiming"
    ACTIVE = "Active"
    RETRY_WAIT = "RetryWait"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


TERMINAL_STATES = frozenset({SlotState.SUCCEEDED, SlotState.FAILED})


class Outcome(StrEnum):
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    LOST = "Lost"
    START_TIMEOUT = "StartTimeout"
    CLAIM_FAILED = "ClaimFailed"
    GAVE_UP = "GaveUp"
    ASKED = "Asked"  # the worker asked a person a question (not a failure; no maxAttempts)
    SUPERSEDED = "Superseded"  # a dependency was rerun: this attempt's work is redone after it
    OVER_BUDGET = "OverBudget"  # the worker stopped at its run's budget (no maxAttempts)


class CommandKind(StrEnum):
    REASSIGN = "Reassign"
    CLAIM = "Claim"
    HOLD = "Hold"
    RELEASE = "Release"
    GIVE_UP = "GiveUp"
    RESOLVE_EFFECT = "ResolveEffect"
    ANSWER = "Answer"
    APPROVE = "Approve"
    DENY = "Deny"
    RERUN = "Rerun"
    BUDGET = "Budget"  # sent to a run: raise its budget


class Predicate(StrEnum):
    """Why a command was rejected: one id per guard predicate (docs/design/names.md)."""

    WRONG_TENANT = "WrongTenant"
    WRONG_RUN = "WrongRun"
    NOT_RETRY_WAIT = "NotRetryWait"
    HELD = "Held"
    PRIOR_NOT_TERMINAL = "PriorNotTerminal"
    BLANK_REASON = "BlankReason"
    NOT_OWNER = "NotOwner"
    UNKNOWN_WORKER_CLASS = "UnknownWorkerClass"
    NO_COMPATIBLE_LAUNCH_SPEC = "NoCompatibleLaunchSpec"
    DUPLICATE = "Duplicate"
    NOT_CLAIMABLE = "NotClaimable"
    COMMANDS_REFUSED = "CommandsRefused"
    UNSTAMPED = "Unstamped"
    STALE_EPOCH = "StaleEpoch"
    MALFORMED = "Malformed"
    ATTEMPT_LIMIT = "AttemptLimitReached"
    NOT_HELD = "NotHeld"
    EFFECT_UNRESOLVED = "EffectUnresolved"  # a claim while an effect waits for an answer
    NO_UNRESOLVED_EFFECT = "NoUnresolvedEffect"  # resolve-effect of a key that is not open
    NO_PENDING_QUESTION = "NoPendingQuestion"  # an answer to a key with no pending question
    ANSWER_INVALID = "AnswerInvalid"  # an answer the question's schema refuses
    QUESTION_EXPIRED = "QuestionExpired"  # an answer after the question's deadline
    DIGEST_MISMATCH = "DigestMismatch"  # an approval or deny of another payload than waits
    SELF_APPROVAL = "SelfApproval"  # the run's creator approving its own effect
    NOT_APPROVER = "NotApprover"  # no verb 'approve' on the slot
    ALREADY_APPROVED = "AlreadyApproved"  # the same approver twice
    NOT_RERUNNABLE = "NotRerunnable"  # a rerun of a slot that is not RetryWait or finished
    QUESTION_PENDING = "QuestionPending"  # a rerun while a question or approval waits
    STEP_NOT_COMMITTED = "StepNotCommitted"  # a rerun from a step the journal does not hold
    RERUN_LIMIT = "RerunLimitReached"  # a rerun past the cuts a slot keeps
    NO_APPLIED_EFFECT = "NoAppliedEffect"  # a re-send of an effect with no applied outcome
    JOURNAL_GONE = "JournalGone"  # a rerun of a run whose journal was (being) deleted


SPEC_IMMUTABLE: JsonDict = {
    "rule": "self == oldSelf",
    "message": "spec is immutable: the operator writes a slot's spec once, at creation; a "
    "slot's identity (run, node) never changes, and reassignment keeps the slot (it changes "
    "status only)",
}


class SlotSpec(Model):
    """Written once by the operator from the pinned workflow; identity (run, node) never changes."""

    # Immutable as a whole, not only its identity: the `patch slots` right that commands
    # need must not let anyone edit dependencies, retries or the worker class.
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [SPEC_IMMUTABLE]})

    run: str = Field(min_length=1, max_length=names.MAX_RUN_NAME,
                     description="the AgentRun the slot belongs to (its controlling owner)")
    node: str = Field(min_length=1, max_length=63, pattern=NODE_NAME_PATTERN,
                      description="the workflow node the slot does the work of")
    worker_class: str = Field(min_length=1, max_length=63, pattern=WORKER_CLASS_PATTERN,
                              description="the node's worker class (a reassignment may change "
                                          "status.workerClass, never this)")
    depends_on: list[str] = Field(
        default_factory=list, max_length=MAX_NODES,
        description="nodes whose slots must succeed before this one starts",
        json_schema_extra={"items": {"type": "string", "minLength": 1, "maxLength": 63,
                                     "pattern": NODE_NAME_PATTERN}})
    retry: RetryPolicy | None = Field(default=None, description=(
        "the node's own retry settings; unset ones come from the run's spec.retry"))


class PinnedLaunchSpec(Model):
    """The LaunchSpec a slot's next attempts use, copied so GitOps edits cannot move it."""

    name: str = Field(description="the LaunchSpec's name")
    uid: str = Field(description="the LaunchSpec's uid")
    generation: int = Field(description="its metadata.generation when pinned")
    digest: str = Field(pattern=r"^[0-9a-f]{64}$",
                        description="sha256 of its spec's canonical JSON")
    snapshot: texts.LongName = Field(description=(
        "the immutable ConfigMap, owned by the run, pods are built from"))
    reason: texts.RecordMessage = Field(default="", description="why it was chosen")


class AttemptRecord(Model):
    """One attempt: a worker Pod and its Lease, both named ``<slot>-<n>``."""

    number: int = Field(ge=1, description="the attempt number n, the worker's fencing token")
    pod: texts.ShortText = Field(description="the attempt's Pod")
    lease: texts.ShortText = Field(description=(
        "the attempt's Lease: its durable record, kept until the run is deleted"))
    pod_uid: texts.ShortText | None = Field(default=None, description=(
        "the uid of the Pod the operator made (another pod of its name is not the attempt's)"))
    worker_class: texts.ShortText = Field(description="the worker class it ran as")
    launch_spec: str = Field(max_length=300, description="name@generation of the pinned LaunchSpec")
    owner_actor: texts.Actor | None = Field(default=None, description=(
        "the person whose command led to it, else the run's verified creator; absent: no "
        "one's (only the verb override acts on it)"))
    started_at: datetime = Field(description="when it was recorded (its Pod and Lease made)")
    ended_at: datetime | None = Field(default=None, description=(
        "when the operator found it ended (pod and lease terminal); absent: not ended"))
    outcome: Outcome | None = Field(default=None, description=(
        "how it ended: Succeeded, Failed (its pod's phase), Lost (lease expired), StartTimeout, "
        "ClaimFailed (objects not made), GaveUp, Asked (a question or approval), Superseded "
        "(a dependency rerun), OverBudget; absent: not ended"))
    reason: texts.RecordMessage | None = Field(default=None, description="why, in words")
    exit_code: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1, description=(
        "the first non-zero exit code of its pod's containers, else 0; absent: none seen"))
    usage: ModelUsage | None = Field(default=None, description=(
        "the model usage the attempt reported (its Lease's sum when the slot's status was "
        "last written while the Lease was there)"))


class CommandRecord(Model):
    """One command the operator decided (an entry of the ledger); a request id already in
    the ledger is never applied again."""

    request_id: str = Field(min_length=1, max_length=bounds.REQUEST_ID_CHARS,
                            description="the command's id (its -id annotation)")
    kind: CommandKind = Field(description="which command: Reassign, Claim, Hold, Release, "
                              "GiveUp, ResolveEffect, Answer, Approve, Deny, Rerun, Budget")
    actor: texts.Actor | None = Field(default=None, description=(
        "who sent it, as admission stamped it; absent: no stamp that could be believed"))
    reason: texts.Reason | None = Field(default=None, description="the reason it gave")
    worker_class: texts.ShortText | None = Field(default=None, description=(
        "the worker class a reassignment asked for"))
    run: texts.ShortText | None = Field(default=None, description="the run the command named")
    override: bool | None = Field(
        default=None, description="true: accepted only because the actor holds the verb "
        "'override' on slots (the owner was someone else)")
    outcome: Literal["Accepted", "Rejected"] = Field(description="the decision")
    predicate: Predicate | None = None
    message: texts.RecordMessage = Field(default="", description="what was decided, in words")
    time: datetime = Field(description="when it was decided")


class EffectState(StrEnum):
    UNRESOLVED = "Unresolved"
    RESOLVED = "Resolved"


class EffectEntry(Model):
    """An effect a worker could not settle (its ``<key>.unresolved`` record: the intent was
    committed, no outcome, and its owner could not say), and once a person recorded the
    owner's answer (resolve-effect), that answer; claims wait while one is Unresolved."""

    key: str = Field(max_length=bounds.STEP_KEY_CHARS, description=(
        "the effect's step key (records <key>.intent, .outcome, .unresolved)"))
    attempt: int = Field(ge=1, le=bounds.MAX_ATTEMPT_NUMBER,
                         description="the attempt whose Lease holds the record")
    effect: texts.ShortText = Field(default="", description="the effect's name")
    idempotency_key: str | None = Field(default=None, max_length=bounds.IDEMPOTENCY_KEY_CHARS,
                                        description="the key its owner deduplicates by")
    owner: texts.ShortText = Field(default="", description="the service the effect goes to")
    reason: texts.RecordMessage = Field(default="", description="the worker's why")
    cause: texts.ShortText = Field(default="", description="the worker's: owner-answered-"
                                    "unknown or no-reconcile")
    state: EffectState = Field(default=EffectState.UNRESOLVED,
                               description="Unresolved, or Resolved by a resolve-effect")
    observed_at: datetime = Field(description="when the operator saw the record")
    outcome: Literal["applied", "not-applied"] | None = Field(default=None, description=(
        "the answer recorded: applied (the next attempt takes the result) or not-applied "
        "(it sends the effect again, same idempotency key)"))
    result: str | None = Field(default=None, max_length=bounds.RESOLVE_RESULT_BYTES,
                               description="the effect's result, for applied")
    resolution: texts.Reason | None = Field(default=None, description=(
        "the resolve-effect command's reason"))
    actor: texts.Actor | None = Field(default=None, description="who resolved it")
    resolved_at: datetime | None = Field(default=None, description="when it was resolved")


class QuestionState(StrEnum):
    PENDING = "Pending"
    ANSWERED = "Answered"
    EXPIRED = "Expired"
    CLOSED = "Closed"  # no longer waits: the slot was reassigned, given up or failed


class QuestionEntry(Model):
    """A question a worker asked (its ``<key>.question`` record) or an effect's request for
    approval (``<key>.approval``), and once answered, the answer. Why it was answered is in
    the ledger (``status.commands``): the worst-case status bound leaves no room here."""

    key: str = Field(max_length=bounds.STEP_KEY_CHARS, description="the question's step key")
    attempt: int = Field(ge=1, le=bounds.MAX_ATTEMPT_NUMBER, description="the attempt that asked")
    question: str = Field(default="", max_length=bounds.QUESTION_BYTES, description=(
        "the question's text; for an approval, the payload's redacted view"))
    json_schema: str | None = Field(default=None, max_length=bounds.SCHEMA_BYTES, description=(
        "the JSON Schema an answer must satisfy (canonical JSON); absent: any JSON"))
    digest: str = Field(max_length=bounds.DIGEST_CHARS, description=(
        "sha256 of the question and its schema (an approval: of the payload): an answer is "
        "bound to it"))
    deadline: datetime | None = Field(default=None, description=(
        "when it expires, counted from askedAt; absent: never"))
    on_expiry: Literal["fail", "default"] = Field(default="fail", description=(
        "at the deadline: fail the slot, or take default as the answer"))
    default: str | None = Field(default=None, max_length=bounds.ANSWER_VALUE_BYTES,
                                description="the answer taken at the deadline (canonical JSON)")
    state: QuestionState = Field(default=QuestionState.PENDING, description=(
        "Pending, Answered, Expired, or Closed (the slot was reassigned, given up or failed)"))
    asked_at: datetime = Field(description="when the operator saw the question")
    value: str | None = Field(default=None, max_length=bounds.ANSWER_VALUE_BYTES, description=(
        "the answer (canonical JSON); an approval's: {\"decision\": \"approved\"|\"denied\"}"))
    value_from: str | None = Field(
        default=None, max_length=bounds.VALUE_FROM_CHARS, pattern=bounds.VALUE_FROM_PATTERN,
        description="an answer too large for value: <configmap>/<key>@sha256:<hex>, which the "
                    "next attempt's pod mounts")
    actor: texts.Actor | None = Field(default=None, description=(
        "who answered; absent: the deadline did"))
    answered_at: datetime | None = Field(default=None, description="when it was answered")
    approvers: int | None = Field(default=None, ge=1, le=bounds.MAX_APPROVERS, description=(
        "an approval: distinct people who must approve; absent: a question"))
    approved_by: list[Annotated[str, Field(max_length=bounds.APPROVER_DIGEST_CHARS)]] = Field(
        default_factory=list, max_length=bounds.MAX_APPROVERS, description=(
            f"who approved so far: the first {bounds.APPROVER_DIGEST_CHARS} hex digits of "
            "sha256 of each name (the names are in the ledger)"))


class SlotStatus(Model):
    """Written by the operator only: where the slot is, its attempts, and what it decided."""

    state: SlotState = Field(default=SlotState.PENDING, description=(
        "Pending (dependencies), Ready (pinned, not claimed), Claiming (a claim under way), "
        "Active (an attempt runs), RetryWait (for retryAt or a person), Succeeded, Failed "
        "(given up, the run's deadline, a failed dependency)"))
    worker_class: texts.ShortText | None = Field(default=None, description=(
        "the worker class of the next or current attempt (spec.workerClass unless reassigned)"))
    launch_spec: PinnedLaunchSpec | None = None
    pending_worker: texts.ShortText | None = Field(
        default=None, description="the attempt a claim is making (<slot>-<n>), while Claiming")
    active_worker: texts.ShortText | None = Field(
        default=None, description="the attempt running (<slot>-<n>), while Active")
    prior_worker: texts.ShortText | None = Field(
        default=None, description="the last attempt that ended (<slot>-<n>)")
    attempts: list[AttemptRecord] = Field(default_factory=list, max_length=ATTEMPTS_KEPT,
                                          description=f"the last {ATTEMPTS_KEPT} attempts, "
                                          "oldest first (every one's Lease keeps its record)")
    usage: ModelUsage | None = Field(default=None, description=(
        "the model usage of all the slot's attempts (kept whole: not only those in attempts)"))
    attempt_count: int = Field(default=0, ge=0, le=bounds.MAX_ATTEMPT_NUMBER, description=(
        "attempt numbers used (one per claim); the next attempt is number attemptCount+1"))
    retry_at: datetime | None = Field(default=None, description=(
        "RetryWait: when the next automatic attempt may be claimed; absent: none is due "
        "(attempts used up, a question, a budget: a person decides)"))
    next_owner_actor: texts.Actor | None = Field(
        default=None, description="the actor of the accepted command the next claim serves")
    commands: list[CommandRecord] = Field(
        default_factory=list, max_length=COMMANDS_KEPT,
        description=f"the ledger: the last {COMMANDS_KEPT} commands decided, oldest first")
    conditions: Conditions = Field(default_factory=list, description=(
        "Held, Reopened, AwaitingReassignment, CommandRejected, EffectUnresolved, "
        "QuestionPending, NodeLost, LaunchSpecSelected, ... (docs/design/names.md)"))
    effects: list[EffectEntry] = Field(default_factory=list, max_length=bounds.EFFECTS_KEPT,
                                       description="unresolved effects, and their answers")
    effects_not_shown: int = Field(
        default=0, ge=0, le=bounds.MAX_RECORDS,
        description="unresolved effects the latest attempt recorded beyond what "
                    f"status.effects shows (at most {bounds.EFFECTS_KEPT} entries): a later "
                    "attempt that meets one records it again, and it is shown then")
    questions: list[QuestionEntry] = Field(
        default_factory=list, max_length=bounds.QUESTIONS_KEPT,
        description="questions and approvals its attempts asked people, and their answers")
    budget_raises: int | None = Field(
        default=None, ge=0, le=bounds.MAX_REVISION,
        description="while BudgetExceeded: the run's accepted budget raises when the slot "
        "stopped at its budget (a later raise reopens it)")
    asked_attempts: int = Field(
        default=0, ge=0, le=bounds.MAX_ATTEMPT_NUMBER,
        description="attempts that ended asking a person (outcome Asked: a question or an "
                    "approval; OverBudget: a budget): they do not count against maxAttempts")
    reruns: int = Field(
        default=0, ge=0, le=MAX_RERUNS,
        description="how many times the slot was rerun (a rerun command, or a dependency "
                    "rerun): its dependents compare it with dependencyReruns to rerun after it")
    cuts: list[Annotated[str, Field(max_length=CUT_CHARS, pattern=CUT_PATTERN)]] = Field(
        default_factory=list, max_length=MAX_CUTS,
        description="what reruns took out of the slot's recoverable prefix "
                    "(<attempt>.<seq>.<index>-<last attempt>: the records committed from that "
                    "position on, by attempts up to the last one), carried on every later "
                    "attempt's Lease; the records stay in the journal")
    resends: list[Annotated[str, Field(max_length=RESEND_CHARS, pattern=RESEND_PATTERN)]] = (
        Field(default_factory=list, max_length=MAX_RESENDS,
              description="applied effects a rerun sends again on purpose "
                          "(<key>=<generation>@<last attempt>: a new idempotency key; the "
                          "effect's records of attempts up to the last one are left out)"))
    dependency_reruns: int = Field(
        default=0, ge=0, le=MAX_NODES * MAX_RERUNS,
        description="the sum of its dependencies' reruns when this slot last left Pending "
                    "(reruns only grow): a dependency rerun since makes it run again from its "
                    "start")
    attempts_before_rerun: int = Field(
        default=0, ge=0, le=bounds.MAX_ATTEMPT_NUMBER,
        description="attempts (not asking) used before the latest rerun: maxAttempts counts "
                    "afresh after a rerun")
    observed_generation: int | None = Field(
        default=None, description="the slot's metadata.generation this status was written for")


NAME_FITS: JsonDict = {
    "rule": f"self.metadata.name.size() <= {names.MAX_SLOT_NAME}",
    "message": f"metadata.name must be at most {names.MAX_SLOT_NAME} characters, so that "
    f"attempt names (<slot>-<n>, up to {names.MAX_ATTEMPT_SUFFIX - 1} digits) fit in "
    f"{names.MAX_NAME}",
}


class Slot(Model):
    """One workflow node's unit of work; it keeps its identity across worker attempts."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [NAME_FITS]})

    api_version: Literal["agentrun.dev/v1alpha1"] = "agentrun.dev/v1alpha1"
    kind: Literal["Slot"] = "Slot"
    metadata: ObjectMeta
    spec: SlotSpec
    status: SlotStatus = Field(default_factory=SlotStatus)
