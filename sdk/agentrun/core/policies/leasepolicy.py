"""The ValidatingAdmissionPolicy on attempt Leases: only the holder renews.

An attempt's Lease (labelled ``agentrun.dev/attempt``; no other Lease is matched) is the
operator's record. Its worker, authenticated by a token bound to its Pod (the API server
puts the pod's name in ``request.userInfo.extra['authentication.kubernetes.io/pod-name']``),
may change ``spec.renewTime``, add durable records, advance its journal's head (and the
usage beside it, in the same write) and set or clear its journal's store error and loss
(``journal.agentrun.dev/error``, ``/lost``, bounded), and release it
(``agentrun.dev/released``: when, RFC 3339; its last write as its worker ends), and only
while the Lease names that pod as its holder and is not tombstoned (holder cleared, an
outcome recorded, or released: a released Lease is sealed against its own holder too,
which is what lets the operator end a finished pod's attempt without waiting for the
lease to expire).

A name is not a pod: an editor of the namespace may delete the attempt's pod and run one
of their own under the same name and ServiceAccount, whose token carries the same
``pod-name``. So a Lease is also *bound* to one pod by uid: the MutatingAdmissionPolicy
:data:`BIND_HOLDERS` stamps ``agentrun.dev/holder-uid`` with the writer's
``authentication.kubernetes.io/pod-uid`` on the first worker write to a Lease that has
none (a write that is then refused leaves nothing stamped), and this policy refuses any
worker write whose token's pod uid is not that annotation's, or that changes or removes
it. The first pod to renew wins the binding; the operator trusts it only when it is the
uid of the pod it created (``core.attempts.observations.renewals_count``), and a successor drops
the records of a Lease bound to another pod than that one (``api.records.written_by``;
with no uid recorded for the attempt's pod it trusts the bound writer).

A *record* is an annotation under ``record.agentrun.dev/``
(:data:`agentrun.api.bounds.RECORD_ANNOTATION_PREFIX`): write-once (once present it never
changes or goes), at most :data:`~agentrun.api.bounds.MAX_RECORDS` of them, each at most
:data:`~agentrun.api.bounds.RECORD_BYTES` bytes, whose JSON document starts with the
Lease's own attempt number and names its own key (the encoding is canonical:
``agentrun.worker._records``), so no record can claim another attempt. CEL cannot parse
JSON; the rest of a record's shape is checked where it is read. A record whose key ends
in ``.resolved`` is the operator's alone (the owner's answer a person recorded for an
unresolved effect): a holder cannot add one. The tombstone seals the
records with no write of its own: a predecessor's late record is refused by the tombstone
check, from ``oldObject`` alone. Everything else
(creating one, changing any other field, deleting one, touching a tombstone) is the
controller's alone: the operator, the garbage collector, a cluster admin; and a Lease in a
namespace being deleted may be deleted by anyone (the namespace controller empties it
without the controller's rights; nothing of the namespace will outlive it).
"""

from __future__ import annotations

from agentrun.api import bounds, journalnodes, modelusage, names
from agentrun.core.policies import admission, validating

Object = validating.Object
validation = validating.validation
ATTEMPT_LEASES = "agentrun-attempt-leases"
BIND_HOLDERS = "agentrun-bind-attempt-leases"
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
HOLDER_UID = names.HOLDER_UID_ANNOTATION
KEPT_SPEC = ("holderIdentity", "leaseDurationSeconds", "acquireTime", "leaseTransitions",
             "strategy", "preferredHolder")
KEPT_METADATA = ("labels", "ownerReferences", "finalizers")
PREFIX = bounds.RECORD_ANNOTATION_PREFIX
RECORDS_CHANGED = "changing or removing a committed record"
HEAD = names.JOURNAL_HEAD_ANNOTATION
USAGE = names.JOURNAL_USAGE_ANNOTATION
MODEL_USAGE = names.MODEL_USAGE_ANNOTATION
ERROR = names.JOURNAL_ERROR_ANNOTATION
LOST = names.JOURNAL_LOST_ANNOTATION
RELEASED = names.RELEASED_ANNOTATION
RELEASED_SHAPE = "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]{1,9})?Z$"
HEAD_SHAPE = "^[0-9]{10}-[0-9a-f]{64}$"


def _attempt(side: str) -> str:
    return (f"({side} != null && {side}.metadata.?labels.orValue({{}})"
            f".exists(k, k == '{names.ATTEMPT_LABEL}'))")


ANNOTATIONS = [
    {"name": "new", "expression": "object == null ? {} : "
                                  "object.metadata.?annotations.orValue({})"},
    {"name": "old", "expression": "oldObject == null ? {} : "
                                  "oldObject.metadata.?annotations.orValue({})"},
    {"name": "added", "expression": f"variables.new.filter(k, k.startsWith('{PREFIX}') && "
                                    "!(k in variables.old))"},
]
UID = {"name": "uid",
       "expression": f"request.userInfo.?extra.orValue({{}})[?'{POD_UID}'].orValue([])"}
NOT_THE_CONTROLLER = {"name": "not-the-controller", "expression": f"!{validating.controller()}"}


def bind_holders() -> list[Object]:
    """The MutatingAdmissionPolicy (and binding) that binds an attempt Lease to a pod uid.

    It applies to a worker's UPDATE of an attempt Lease that carries no holder uid yet,
    made with a pod-bound token, and stamps that token's pod uid; what it stamps is then
    checked by :func:`attempt_leases` like any other write, so a write refused there
    binds nothing. Never the controller's writes (the operator's own pod has a pod-bound
    token too: its tombstone must not bind the Lease to the operator).
    """
    stamp = (f"Object{{metadata: Object.metadata{{annotations: "
             f"{{'{HOLDER_UID}': variables.uid[0]}}}}}}")
    spec: Object = {
        "matchConstraints": {
            "namespaceSelector": {}, "objectSelector": {},
            "resourceRules": [validating.match_rule("coordination.k8s.io", "v1", ["leases"],
                                                    ["UPDATE"])],
            "matchPolicy": "Equivalent"},
        "matchConditions": [
            {"name": "an-attempt-lease", "expression": _attempt("oldObject")},
            {"name": "not-yet-bound", "expression": (
                f"!oldObject.metadata.?annotations.orValue({{}}).exists(k, k == '{HOLDER_UID}')")},
            {"name": "a-pod-bound-token", "expression": f"{UID['expression']}.size() == 1"},
            NOT_THE_CONTROLLER],
        "variables": [UID],
        "mutations": [{"patchType": "ApplyConfiguration",
                       "applyConfiguration": {"expression": stamp}}],
        "failurePolicy": "Fail",
        "reinvocationPolicy": "Never",
    }
    return [
        {"apiVersion": admission.ADMISSION_API, "kind": "MutatingAdmissionPolicy",
         "metadata": {"name": BIND_HOLDERS}, "spec": spec},
        {"apiVersion": admission.ADMISSION_API, "kind": "MutatingAdmissionPolicyBinding",
         "metadata": {"name": BIND_HOLDERS}, "spec": {"policyName": BIND_HOLDERS}},
    ]


def binding_checks() -> list[Object]:
    """The worker's token must be the bound pod's, and the binding stays as stamped.

    The first applies to a pod of the holder's name only (an impostor: another pod under
    that name), and comes before the tombstone check, so an impostor is told it is not the
    bound pod whatever the Lease's state (its holder may have released it as its pod was
    deleted); a pod of another name is told the Lease is not its own by the later checks."""
    bound = f"variables.old[?'{HOLDER_UID}']"
    holder = "oldObject.spec.?holderIdentity.orValue('')"
    return [
        validating.dynamic_validation(
            f"request.operation != 'UPDATE' || !{bound}.hasValue() || "
            f"!(variables.pod.size() == 1 && variables.pod[0] == {holder}) || "
            f"(variables.uid.size() == 1 && {bound}.value() == variables.uid[0])",
            f"'Lease ' + oldObject.metadata.name + ' is bound to the pod of uid ' + "
            f"{bound}.value() + ' ({HOLDER_UID}, the pod of its attempt): a pod of the same "
            "name with another uid (' + (variables.uid.size() == 1 ? variables.uid[0] : "
            "'none') + ') is not that pod, and may neither renew the Lease nor add records'"),
        validation(f"request.operation != 'UPDATE' || (variables.uid.size() == 1 && "
                   f"variables.new[?'{HOLDER_UID}'].orValue('') == variables.uid[0])",
                   f"a worker's write to its attempt's Lease leaves {HOLDER_UID} as admission "
                   f"stamps it: the uid of the pod its token is bound to (the "
                   f"MutatingAdmissionPolicy {BIND_HOLDERS} stamps it at the first renewal; "
                   "if it is not in force, re-apply manifests/admission)"),
    ]


def head_checks() -> list[Object]:
    """The journal head (:data:`HEAD`, ``<10-digit seq>-<sha256>``) a holder advances: well
    formed, and only to a higher sequence number (the fixed width makes comparing the
    digits as strings a numeric comparison), never removed; the tombstone check above
    stops it moving after the attempt ended. Admission cannot read the node a head names,
    so within its own attempt a holder could still advance to a node that does not chain
    to the one before: the reader verifies every link, and a broken one is
    ``JournalDamaged``, not a shorter prefix."""
    new, old = f"variables.new[?'{HEAD}']", f"variables.old[?'{HEAD}']"
    seq = "value().substring(0, 10)"
    return [
        validation(f"request.operation != 'UPDATE' || !{new}.hasValue() || "
                   f"({new}.value().matches('{HEAD_SHAPE}') && {new}.{seq} != '0000000000')",
                   f"{HEAD} is <seq, 10 digits, from 1>-<sha256 of the commit's node> (write "
                   "it with the worker SDK, agentrun.worker)"),
        validation(f"request.operation != 'UPDATE' || !{old}.hasValue() || "
                   f"({new}.hasValue() && ({new}.value() == {old}.value() || "
                   f"{new}.{seq} > {old}.{seq}))",
                   f"{HEAD} only moves forward: a later commit's sequence number, never the "
                   "same one with another node, and the head is never removed"),
    ]


def usage_checks() -> list[Object]:
    """The usages beside the head (the journal's, :data:`USAGE`, ``<n> records, <n>
    bytes``, and the model calls', :data:`MODEL_USAGE`, ``<n> input tokens, <n> output
    tokens, <n> micro-<currency>``): each well formed (so bounded), changed only in the
    write that moves the head, never decreasing (and the model usage's currency never
    changing), and never removed (the kept check). They are the holder's report: admission
    cannot read the nodes to check the numbers, only that they are shaped and only grow."""
    return [
        *_growing(USAGE, shape=journalnodes.USAGE_SHAPE, numbers=(0, 2),
                  said="'<n> records, <n> bytes'"),
        *_growing(MODEL_USAGE, shape=modelusage.SHAPE, numbers=(0, 3, 6), same=7,
                  said="'<n> input tokens, <n> output tokens, <n> micro-<currency>'"),
    ]


def _growing(annotation: str, *, shape: str, numbers: tuple[int, ...], said: str,
             same: int | None = None) -> list[Object]:
    """The checks of one usage annotation: ``numbers`` are the indexes of its words that
    never decrease, ``same`` the one that never changes."""
    new, old = f"variables.new[?'{annotation}']", f"variables.old[?'{annotation}']"
    head_new, head_old = f"variables.new[?'{HEAD}']", f"variables.old[?'{HEAD}']"

    def word(side: str, index: int) -> str:
        return f"{side}.value().split(' ')[{index}]"

    grows = " && ".join(f"int({word(new, i)}) >= int({word(old, i)})" for i in numbers)
    kept = "" if same is None else f" && {word(new, same)} == {word(old, same)}"
    return [
        validation(f"request.operation != 'UPDATE' || !{new}.hasValue() || "
                   f"{new}.value().matches('{shape}')",
                   f"{annotation} is {said} (written with the head by the worker "
                   "SDK, agentrun.worker)"),
        validation(f"request.operation != 'UPDATE' || {new} == {old} || ({head_new}.hasValue()"
                   f" && {head_new} != {head_old})",
                   f"{annotation} changes only in the write that advances {HEAD}: it counts "
                   "what the head reaches"),
        validation(f"request.operation != 'UPDATE' || !{new}.hasValue() || !{old}.hasValue() "
                   f"|| !{new}.value().matches('{shape}') || "
                   f"!{old}.value().matches('{shape}') || ({grows}{kept})",
                   f"{annotation} never decreases: a later commit adds to what the earlier "
                   "ones hold" + ("" if same is None else ", in the same currency")),
    ]


def record_checks() -> list[Object]:
    """What a holder's added records must be (see the module docstring)."""
    new, old = "variables.new", "variables.old"
    kept = (f"{new}.filter(k, !k.startsWith('{PREFIX}') && k != '{HOLDER_UID}' && "
            f"k != '{HEAD}' && k != '{USAGE}' && k != '{MODEL_USAGE}' && k != '{ERROR}' && "
            f"k != '{LOST}' && k != '{RELEASED}').all(k, k in {old} && {old}[k] == {new}[k]) "
            f"&& {old}.all(k, "
            f"k == '{ERROR}' || k == '{LOST}' || (k in {new} && (k == '{HEAD}' || "
            f"k == '{USAGE}' || k == '{MODEL_USAGE}' || {new}[k] == {old}[k])))")
    attempt = f"oldObject.metadata.?labels.orValue({{}})[?'{names.ATTEMPT_LABEL}'].orValue('')"
    shaped = (f"variables.added.all(k, bytes({new}[k]).size() <= {bounds.RECORD_BYTES} && "
              f"{new}[k].startsWith('{{\"attempt\":' + {attempt} + ',') && "
              f"{new}[k].contains('\"key\":\"' + k.substring({len(PREFIX)}) + '\"'))")
    return [
        validation(f"request.operation != 'UPDATE' || ({kept})",
                   f"a worker may add records ({PREFIX}<key>) to its attempt's Lease, "
                   f"advance {HEAD} (and {USAGE} and {MODEL_USAGE} with it), set or "
                   f"remove {ERROR} and {LOST} and release it ({RELEASED}), but not change "
                   f"other annotations; {RECORDS_CHANGED} is refused: records are "
                   "write-once"),
        validation(f"request.operation != 'UPDATE' || {new}.filter(k, k.startsWith("
                   f"'{PREFIX}')).size() <= {bounds.MAX_RECORDS}",
                   f"an attempt's Lease holds at most {bounds.MAX_RECORDS} records; store "
                   "fewer, larger ones by reference"),
        validation(f"request.operation != 'UPDATE' || {shaped}",
                   f"a record ({PREFIX}<key>) is at most {bounds.RECORD_BYTES} bytes of "
                   "canonical JSON that starts with the Lease's attempt number and names "
                   "its own key (write it with the worker SDK, agentrun.worker)"),
        *head_checks(),
        *usage_checks(),
        validation("request.operation != 'UPDATE' || " + " && ".join(
                       f"(!{new}[?'{key}'].hasValue() || bytes({new}['{key}']).size() <= "
                       f"{bounds.JOURNAL_ERROR_BYTES})" for key in (ERROR, LOST)),
                   f"{ERROR} and {LOST} (the journal's store error, and what it no longer has, "
                   f"as the worker saw them) are at most {bounds.JOURNAL_ERROR_BYTES} bytes "
                   "each"),
        validation("request.operation != 'UPDATE' || variables.added.all(k, " + " && ".join(
                       f"!k.endsWith('{suffix}')" for suffix in names.OPERATOR_SUFFIXES) + ")",
                   f"a record <key>{names.RESOLVED_SUFFIX} (the owner's answer to an "
                   f"unresolved effect), <key>{names.ANSWERED_SUFFIX} (a person's answer to a "
                   f"question) or <key>{names.APPROVED_SUFFIX} (people's decision on an effect's "
                   "approval) is written by the operator from a person's command: a worker "
                   "cannot write one"),
        validation(f"request.operation != 'UPDATE' || !{new}[?'{RELEASED}'].hasValue() || "
                   f"{new}['{RELEASED}'].matches('{RELEASED_SHAPE}')",
                   f"{RELEASED} is when the worker released its Lease, in RFC 3339 UTC "
                   "(2026-01-02T03:04:05Z); its worker's last write: none is accepted after "
                   "it"),
    ]


def attempt_leases() -> list[Object]:
    pod = f"request.userInfo.?extra.orValue({{}})[?'{POD_NAME}'].orValue([])"
    holder = "oldObject.spec.?holderIdentity.orValue('')"
    tombstoned = (f"{holder} == '' || oldObject.metadata.?annotations.orValue({{}})"
                  f".exists(k, k == '{names.OUTCOME_ANNOTATION}' || k == '{RELEASED}')")
    only_renewal = " && ".join(
        [f"object.spec.?{field} == oldObject.spec.?{field}" for field in KEPT_SPEC]
        + [f"object.metadata.?{field} == oldObject.metadata.?{field}"
           for field in KEPT_METADATA])
    renew = "only the pod holding it renews it (spec.renewTime)"
    binding = binding_checks()
    return validating.policy_pair(
        ATTEMPT_LEASES,
        conditions=[{"name": "an-attempt-lease",
                     "expression": f"{_attempt('object')} || {_attempt('oldObject')}"},
                    NOT_THE_CONTROLLER],
        rules=[validating.match_rule("coordination.k8s.io", "v1", ["leases"],
                                     ["CREATE", "UPDATE", "DELETE"])],
        variables=[{"name": "pod", "expression": pod}, UID, *ANNOTATIONS],
        validations=[
            validating.validation(
                "request.operation == 'UPDATE' || (request.operation == 'DELETE' && "
                "namespaceObject.metadata.?deletionTimestamp.hasValue())",
                f"an attempt's Lease is the operator's record: only the operator creates or "
                f"deletes it; {renew}"),
            binding[0],
            validating.dynamic_validation(
                "request.operation != 'UPDATE' || !("
                f"{tombstoned})",
                "'Lease ' + oldObject.metadata.name + ' is tombstoned (its attempt ended, "
                "or its worker released it): nobody but the operator and the garbage "
                "collector changes it'"),
            validating.dynamic_validation(
                "request.operation != 'UPDATE' || (variables.pod.size() == 1 && "
                f"variables.pod[0] == {holder} && request.userInfo.username.startsWith("
                "'system:serviceaccount:' + request.namespace + ':'))",
                "'Lease ' + oldObject.metadata.name + ' is held by pod ' + "
                f"{holder} + ': {renew}, with a token bound to that pod "
                "(kubectl create token --bound-object-kind Pod)'"),
            binding[1],
            validating.validation(
                f"request.operation != 'UPDATE' || ({only_renewal})",
                f"a worker may change only spec.renewTime of its attempt's Lease (and add "
                f"records); {renew}"),
            *record_checks(),
        ])
