"""Every name the project's objects, tests and people rely on (docs/design/names.md).

One place, so that a label or annotation is never spelt twice. ``docs/design/names.md`` is
the human-readable copy of this table.
"""

from typing import Final

GROUP: Final = "agentrun.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
CATEGORY: Final = "durable"
# The journal read path: an aggregated API the operator serves (controller.historyserver),
# so people read a slot's journal through the API server, under its RBAC.
HISTORY_GROUP: Final = "history.agentrun.dev"
HISTORY_VERSION: Final = "v1alpha1"
HISTORY_RESOURCE: Final = "slothistories"
HISTORY_KIND: Final = "SlotHistory"
HISTORY_APISERVICE: Final = f"{HISTORY_VERSION}.{HISTORY_GROUP}"
HISTORY_SERVICE: Final = "agentrun-operator-history"
# The history API's serving certificate and key (kubernetes.io/tls), in the operator's
# namespace: made by the leader, served by every replica (controller.servingcerts).
HISTORY_TLS_SECRET: Final = "agentrun-operator-history-tls"

# Namespace and configuration labels.
TENANT_LABEL: Final = "agentrun.dev/tenant"
CONFIG_KIND_LABEL: Final = "agentrun.dev/config-kind"
CONFIG_NAME_LABEL: Final = "agentrun.dev/config-name"
REVISION_LABEL: Final = "agentrun.dev/revision"
ACCEPTED_LABEL: Final = "agentrun.dev/accepted"
CONFIG_KINDS: Final = ("package", "workflow", "bindings")
CONFIG_DATA_KEYS: Final = {kind: f"{kind}.yaml" for kind in CONFIG_KINDS}

# Labels on the objects the operator creates.
RUN_LABEL: Final = "agentrun.dev/run"
NODE_LABEL: Final = "agentrun.dev/node"
SLOT_LABEL: Final = "agentrun.dev/slot"
ATTEMPT_LABEL: Final = "agentrun.dev/attempt"
SNAPSHOT_LABEL: Final = "agentrun.dev/snapshot-of"
LAUNCH_SPEC_LABEL: Final = "agentrun.dev/launch-spec"  # on a Slot: the LaunchSpec it pins

# Command annotations on a Slot. Every command has an id, and admission stamps an actor.
REASSIGN_REASON: Final = "agentrun.dev/reassign-reason"
REASSIGN_WORKER_CLASS: Final = "agentrun.dev/reassign-worker-class"
REASSIGN_RUN: Final = "agentrun.dev/reassign-run"
REASSIGN_ID: Final = "agentrun.dev/reassign-id"
REASSIGN_TENANT: Final = "agentrun.dev/reassign-tenant"
REASSIGN_ACTOR: Final = "agentrun.dev/reassign-actor"
CLAIM_ID: Final = "agentrun.dev/claim-id"
CLAIM_ACTOR: Final = "agentrun.dev/claim-actor"
HOLD_ID: Final = "agentrun.dev/hold-id"
HOLD_REASON: Final = "agentrun.dev/hold-reason"
HOLD_ACTOR: Final = "agentrun.dev/hold-actor"
RELEASE_ID: Final = "agentrun.dev/release-id"
RELEASE_ACTOR: Final = "agentrun.dev/release-actor"
GIVE_UP_ID: Final = "agentrun.dev/give-up-id"
GIVE_UP_REASON: Final = "agentrun.dev/give-up-reason"
GIVE_UP_ACTOR: Final = "agentrun.dev/give-up-actor"
# Stamped with the actor by admission: the epoch of stamping in force when it was written,
# and (on the commands an owner check guards) whether the actor holds `override` on slots.
REASSIGN_EPOCH: Final = "agentrun.dev/reassign-epoch"
REASSIGN_OVERRIDE: Final = "agentrun.dev/reassign-override"
CLAIM_EPOCH: Final = "agentrun.dev/claim-epoch"
HOLD_EPOCH: Final = "agentrun.dev/hold-epoch"
RELEASE_EPOCH: Final = "agentrun.dev/release-epoch"
GIVE_UP_EPOCH: Final = "agentrun.dev/give-up-epoch"
GIVE_UP_OVERRIDE: Final = "agentrun.dev/give-up-override"
# resolve-effect: a person records the owner's answer about an effect
# the worker could not settle (the slot condition EffectUnresolved).
RESOLVE_EFFECT_ID: Final = "agentrun.dev/resolve-effect-id"
RESOLVE_EFFECT_KEY: Final = "agentrun.dev/resolve-effect-key"
RESOLVE_EFFECT_OUTCOME: Final = "agentrun.dev/resolve-effect-outcome"
RESOLVE_EFFECT_REASON: Final = "agentrun.dev/resolve-effect-reason"
RESOLVE_EFFECT_RESULT: Final = "agentrun.dev/resolve-effect-result"
RESOLVE_EFFECT_ACTOR: Final = "agentrun.dev/resolve-effect-actor"
RESOLVE_EFFECT_EPOCH: Final = "agentrun.dev/resolve-effect-epoch"
RESOLVE_EFFECT_OVERRIDE: Final = "agentrun.dev/resolve-effect-override"
# answer: a person answers a question a worker asked (the slot condition QuestionPending).
ANSWER_ID: Final = "agentrun.dev/answer-id"
ANSWER_KEY: Final = "agentrun.dev/answer-key"
ANSWER_VALUE: Final = "agentrun.dev/answer-value"
ANSWER_VALUE_FROM: Final = "agentrun.dev/answer-value-from"  # <configmap>/<key>@sha256:<hex>
ANSWER_REASON: Final = "agentrun.dev/answer-reason"
ANSWER_RUN: Final = "agentrun.dev/answer-run"
ANSWER_TENANT: Final = "agentrun.dev/answer-tenant"
ANSWER_ACTOR: Final = "agentrun.dev/answer-actor"
ANSWER_EPOCH: Final = "agentrun.dev/answer-epoch"
ANSWER_OVERRIDE: Final = "agentrun.dev/answer-override"
OVERRIDE_VERB: Final = "override"
# A run's creator: stamped by admission when the AgentRun is created (with the stamping
# epoch in force, as a command's actor is), restored on every update; the operator copies
# it to status.creator once, at pin time, if the epoch is the current one.
CREATOR_ANNOTATION: Final = "agentrun.dev/creator"
CREATOR_EPOCH_ANNOTATION: Final = "agentrun.dev/creator-epoch"

# Actor stamping: the MutatingAdmissionPolicy (and its binding, same name) and the Secret
# in the operator's namespace that holds the current epoch (the policy's params).
OPERATOR_NAMESPACE: Final = "agentrun-system"
STAMP_POLICY: Final = "agentrun-stamp-actors"
STAMPING_SECRET: Final = "agentrun-stamping"
# Leader election (core.policies.leadership): the Lease the replicas elect on, in the
# operator's namespace; the fencing token, a Secret there naming the leader and its term;
# and the policy that refuses a non-leader's writes (core.policies.fencing).
OPERATOR_APP: Final = "agentrun-operator"  # app.kubernetes.io/name, the ServiceAccount's name
LEADER_LEASE: Final = "agentrun-operator"
LEADER_SECRET: Final = "agentrun-operator-leader"
LEADER_ANNOTATION: Final = "agentrun.dev/leader"
LEADER_TERM_ANNOTATION: Final = "agentrun.dev/leader-term"
FENCE_POLICY: Final = "agentrun-fence-operator"

# Attempt tombstone: annotations on the Lease when its attempt ends.
OUTCOME_ANNOTATION: Final = "agentrun.dev/outcome"
# On a fork's attempt-0 Lease: "<source run> <source uid>[ at <node>:<step>]", for people.
FORKED_FROM_ANNOTATION: Final = "agentrun.dev/forked-from"
ENDED_AT_ANNOTATION: Final = "agentrun.dev/ended-at"
# Written once by the holder as its worker ends (its last write: when, RFC 3339): the Lease
# is then sealed as if tombstoned, so a finished pod's attempt ends without waiting for
# its lease to expire (docs/design/states.md).
RELEASED_ANNOTATION: Final = "agentrun.dev/released"
OWNER_ACTOR_ANNOTATION: Final = "agentrun.dev/owner-actor"
LAUNCH_SPEC_ANNOTATION: Final = "agentrun.dev/launch-spec"
# The uid of the pod the operator created for the attempt, on the tombstone: a successor
# trusts a predecessor's records only if the Lease's holder uid is this one.
POD_UID_ANNOTATION: Final = "agentrun.dev/pod-uid"
# The uid of the pod whose token first wrote the Lease as a worker, stamped by admission
# (agentrun-bind-attempt-leases) and never changed: only that pod renews it or adds records.
HOLDER_UID_ANNOTATION: Final = "agentrun.dev/holder-uid"

# Effects: the slot condition and its reasons, the Event reasons, and
# the record suffixes on attempt Leases (record.agentrun.dev/<key>.<suffix>).
EFFECT_UNRESOLVED_CONDITION: Final = "EffectUnresolved"
EFFECT_OWNER_ANSWER_UNKNOWN: Final = "OwnerAnswerUnknown"  # reconcile answered "unknown"
EFFECT_NO_RECONCILE: Final = "NoReconcile"  # the worker had no reconcile to ask the owner
EFFECT_RESOLVED: Final = "Resolved"  # the condition's reason once none is open
EFFECT_NOT_SHOWN: Final = "NotShown"  # none shown is open; more were recorded than shown
EFFECT_RESOLVED_EVENT: Final = "EffectResolved"
UNRESOLVED_SUFFIX: Final = ".unresolved"  # written by the worker that stopped
RESOLVED_SUFFIX: Final = ".resolved"  # written by the operator on a successor's Lease

# Questions (docs/design/questions.md): the slot condition, its reasons and the Events, and
# the record suffixes: ``<key>.question`` written by the worker that asked (on its Lease),
# ``<key>.answer`` by the operator on a later attempt's Lease.
QUESTION_PENDING_CONDITION: Final = "QuestionPending"
# A slot's attempt whose pod cannot be confirmed gone: its node is lost (core.attempts.lostnodes).
NODE_LOST_CONDITION: Final = "NodeLost"
QUESTION_ASKED: Final = "Asked"  # the condition's reason while one is pending; the Event's
QUESTION_ANSWERED: Final = "Answered"  # its reason once none is pending
# A deadline passed: the slot failed, or took the default.
QUESTION_EXPIRED: Final = "QuestionExpired"
QUESTION_ASKED_EVENT: Final = "QuestionAsked"
QUESTION_ANSWERED_EVENT: Final = "QuestionAnswered"
QUESTION_SUFFIX: Final = ".question"
ANSWERED_SUFFIX: Final = ".answer"
# Approvals: the worker's request (kind decision, on its own Lease, as a question is) and
# the operator's decision on each later attempt's Lease (approved or denied, by whom).
APPROVAL_SUFFIX: Final = ".approval"
APPROVED_SUFFIX: Final = ".approved"
# The payload an approval is asked for (in the journal, for approvers to read): a later
# attempt that computes other arguments commits it again, by design.
PAYLOAD_SUFFIX: Final = ".payload"
VERB_APPROVE: Final = "approve"  # on slots: may approve or deny an effect
VERB_APPROVE_OWN: Final = "approve-own"  # on slots: may approve the effects of one's own run
# Where the next attempt's pod finds an answer given by reference: <root>/<question key>/value.
ANSWERS_MOUNT_ROOT: Final = "/etc/agentrun/answers"
ANSWERS_FILE: Final = "value"
# The worker pod's env: the LaunchSpec's approval floors, canonical JSON {effect: approvers}.
ENV_APPROVALS: Final = "AGENTRUN_APPROVALS"
APPROVAL_DENIED_EVENT: Final = "EffectDenied"
APPROVED_EVENT: Final = "EffectApproved"
# Records only the operator writes (a holder adding one is refused by admission), and
# records trusted only on a Lease, never from a journal (the operator reads them there).
OPERATOR_SUFFIXES: Final = (RESOLVED_SUFFIX, ANSWERED_SUFFIX, APPROVED_SUFFIX)
# Budgets: the worker's record that it stopped at its run's budget (kind decision, on its
# own Lease: ``budget.exceeded``), the run's budget the operator writes on each attempt's
# Lease when it creates it, and the slot's condition while it waits for a person to raise it.
EXCEEDED_SUFFIX: Final = ".exceeded"
BUDGET_KEY: Final = "budget"
BUDGET_ANNOTATION: Final = "agentrun.dev/budget"
# On a tenant's namespace, set by a tenant admin: the budget of its runs that name none
# (JSON, as spec.budget: {"tokens": n, "cost": "x", "currency": "EUR"}).
DEFAULT_BUDGET_ANNOTATION: Final = "agentrun.dev/default-budget"
DEFAULT_BUDGET_BYTES: Final = 256
BUDGET_EXCEEDED_CONDITION: Final = "BudgetExceeded"
BUDGET_RAISED: Final = "BudgetRaised"  # the condition's reason once a raise reopened it
LEASE_ONLY_SUFFIXES: Final = (RESOLVED_SUFFIX, UNRESOLVED_SUFFIX, ANSWERED_SUFFIX, QUESTION_SUFFIX,
                              APPROVAL_SUFFIX, APPROVED_SUFFIX, EXCEEDED_SUFFIX)

# Worker environment and configuration mount.
ENV_NAMESPACE: Final = "AGENTRUN_NAMESPACE"
ENV_RUN: Final = "AGENTRUN_RUN"
ENV_RUN_UID: Final = "AGENTRUN_RUN_UID"  # the run's metadata.uid: effects' idempotency keys
ENV_SLOT: Final = "AGENTRUN_SLOT"
ENV_NODE: Final = "AGENTRUN_NODE"
ENV_ATTEMPT: Final = "AGENTRUN_ATTEMPT"
ENV_FENCING_TOKEN: Final = "AGENTRUN_FENCING_TOKEN"
ENV_LEASE: Final = "AGENTRUN_LEASE"
ENV_CONFIG_DIR: Final = "AGENTRUN_CONFIG_DIR"
# The pinned digest of each configuration snapshot (``AGENTRUN_PACKAGE_SHA256`` ...): the
# operator's pod builder sets them, the worker verifies the mounted snapshots against them
# without reading the run (its ServiceAccount may read only its Lease).
ENV_PINNED_SHA256: Final = {kind: f"AGENTRUN_{kind.upper()}_SHA256"
                            for kind in CONFIG_KINDS}
CONFIG_MOUNT_ROOT: Final = "/etc/agentrun/config"
# The worker sidecar (LaunchSpec ``spec.sidecar``): its init container's name, and where
# every main container finds it (``http://127.0.0.1:<port>``).
SIDECAR_CONTAINER: Final = "agentrun-worker"
ENV_SIDECAR_URL: Final = "AGENTRUN_SIDECAR_URL"

# The slot's journal (docs/design/journal.md): where it lives, pinned on the run at launch
# (``status.pinned.journal``) and given to every worker container; and the head of an
# attempt's journal on its Lease, which only the holder advances (admission).
ENV_JOURNAL_ENDPOINT: Final = "AGENTRUN_JOURNAL_ENDPOINT"  # the S3 API's URL
ENV_JOURNAL_BUCKET: Final = "AGENTRUN_JOURNAL_BUCKET"
ENV_JOURNAL_PREFIX: Final = "AGENTRUN_JOURNAL_PREFIX"  # the run's own: <base>/<namespace>/<run uid>
ENV_JOURNAL_REGION: Final = "AGENTRUN_JOURNAL_REGION"
# A directory holding the pinned Secret's keys as files (accessKeyId, secretAccessKey),
# mounted so that a rotated Secret reaches running workers; absent: unsigned requests.
ENV_JOURNAL_CREDENTIALS: Final = "AGENTRUN_JOURNAL_CREDENTIALS"
JOURNAL_CREDENTIALS_MOUNT: Final = "/var/run/agentrun/journal"
JOURNAL_CREDENTIALS_VOLUME: Final = "agentrun-journal-credentials"
JOURNAL_ACCESS_KEY: Final = "accessKeyId"
JOURNAL_SECRET_KEY: Final = "secretAccessKey"
JOURNAL_HEAD_ANNOTATION: Final = "journal.agentrun.dev/head"
# Beside the head, in the same write: "<n> records, <n> bytes" (api.journalnodes.Usage).
JOURNAL_USAGE_ANNOTATION: Final = "journal.agentrun.dev/usage"
# Beside the head, in the same write: the attempt's model usage, "<n> input tokens, <n>
# output tokens, <n> micro-<currency>" (api.modelusage.ModelUsage).
MODEL_USAGE_ANNOTATION: Final = "journal.agentrun.dev/model-usage"
# What reruns took out of the slot's prefix (api.cuts), written by the operator on each
# attempt's Lease at its claim: the worker reads its prefix without those records.
JOURNAL_CUTS_ANNOTATION: Final = "journal.agentrun.dev/cuts"
# Effects a rerun sends again on purpose (api.cuts.Resend), beside the cuts.
JOURNAL_RESENDS_ANNOTATION: Final = "journal.agentrun.dev/resends"
# The name of the journal's Secret the operator may read to check it before a launch (its
# ClusterRole's resourceNames): the chart's default journal.secretName.
JOURNAL_SECRET: Final = "agentrun-journal"
# On a run with a journal: its journal is deleted with it (the store is no cluster object
# the garbage collector could delete), then the finalizer removed.
JOURNAL_FINALIZER: Final = "agentrun.dev/journal"
JOURNAL_DELETED_CONDITION: Final = "JournalDeleted"
JOURNAL_RETENTION_EXPIRED: Final = "RetentionExpired"  # its reason once retention deleted it
# The journal's store not answering, as the worker last saw it: set on its own Lease at the
# first failed try of an outage, removed once the store answers (agentrun.worker._journal);
# the operator shows it as the slot condition JOURNAL_UNAVAILABLE_CONDITION.
JOURNAL_ERROR_ANNOTATION: Final = "journal.agentrun.dev/error"
JOURNAL_UNAVAILABLE_CONDITION: Final = "JournalUnavailable"
# What a trusted head reaches the store no longer has intact (a lost or altered volume), as
# the worker that could not read its prefix found it: on its own Lease, the slot condition
# JOURNAL_LOST_CONDITION (never a silent restart from step one).
JOURNAL_LOST_ANNOTATION: Final = "journal.agentrun.dev/lost"
JOURNAL_LOST_CONDITION: Final = "JournalLost"
JOURNAL_WORK_MISSING: Final = "CommittedWorkMissing"  # its reason while shown
JOURNAL_READ: Final = "JournalRead"  # its reason once a later attempt read its prefix
JOURNAL_STORE_FAILING: Final = "StoreNotAnswering"  # its reason while the error is on the Lease
JOURNAL_STORE_ANSWERS: Final = "StoreAnswering"  # its reason once the error is gone

# Length limits. A slot name plus "-<attempt>" (up to 4 digits) must stay a DNS label.
MAX_NAME: Final = 63
MAX_ATTEMPT_SUFFIX: Final = 5  # "-9999"
MAX_SLOT_NAME: Final = MAX_NAME - MAX_ATTEMPT_SUFFIX  # 58
SLOT_HASH_LENGTH: Final = 8
MAX_RUN_NAME: Final = MAX_SLOT_NAME - SLOT_HASH_LENGTH - 1  # 49
MAX_REASON_BYTES: Final = 1024

# A worker class, as a workflow's node and a LaunchSpec name it (a DNS-1123 subdomain's
# characters): here, not with the models, so the worker's bounds need no model loaded.
WORKER_CLASS_PATTERN: Final = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
