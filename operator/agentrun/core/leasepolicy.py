"""The ValidatingAdmissionPolicy on attempt Leases: only the holder renews (issue 7, item 6).

An attempt's Lease (labelled ``agentrun.dev/attempt``; no other Lease is matched) is the
operator's record. Its worker, authenticated by a token bound to its Pod (the API server
puts the pod's name in ``request.userInfo.extra['authentication.kubernetes.io/pod-name']``),
may change ``spec.renewTime`` and nothing else, and only while the Lease names that pod as
its holder and is not tombstoned (holder cleared, or an outcome recorded). Everything else
(creating one, changing any other field, deleting one, touching a tombstone) is the
controller's alone: the operator, the garbage collector, a cluster admin; and a Lease in a
namespace being deleted may be deleted by anyone (the namespace controller empties it
without the controller's rights; nothing of the namespace will outlive it).
"""

from __future__ import annotations

from agentrun.api import names
from agentrun.core import validating

Object = validating.Object
ATTEMPT_LEASES = "agentrun-attempt-leases"
POD_NAME = "authentication.kubernetes.io/pod-name"
KEPT_SPEC = ("holderIdentity", "leaseDurationSeconds", "acquireTime", "leaseTransitions",
             "strategy", "preferredHolder")
KEPT_METADATA = ("labels", "annotations", "ownerReferences", "finalizers")


def _attempt(side: str) -> str:
    return (f"({side} != null && {side}.metadata.?labels.orValue({{}})"
            f".exists(k, k == '{names.ATTEMPT_LABEL}'))")


def attempt_leases() -> list[Object]:
    pod = f"request.userInfo.?extra.orValue({{}})[?'{POD_NAME}'].orValue([])"
    holder = "oldObject.spec.?holderIdentity.orValue('')"
    tombstoned = (f"{holder} == '' || oldObject.metadata.?annotations.orValue({{}})"
                  f".exists(k, k == '{names.OUTCOME_ANNOTATION}')")
    only_renewal = " && ".join(
        [f"object.spec.?{field} == oldObject.spec.?{field}" for field in KEPT_SPEC]
        + [f"object.metadata.?{field} == oldObject.metadata.?{field}"
           for field in KEPT_METADATA])
    renew = "only the pod holding it renews it (spec.renewTime)"
    return validating.policy_pair(
        ATTEMPT_LEASES,
        conditions=[{"name": "an-attempt-lease",
                     "expression": f"{_attempt('object')} || {_attempt('oldObject')}"},
                    {"name": "not-the-controller",
                     "expression": f"!{validating.controller()}"}],
        rules=[validating.match_rule("coordination.k8s.io", "v1", ["leases"],
                                     ["CREATE", "UPDATE", "DELETE"])],
        variables=[{"name": "pod", "expression": pod}],
        validations=[
            validating.validation(
                "request.operation == 'UPDATE' || (request.operation == 'DELETE' && "
                "namespaceObject.metadata.?deletionTimestamp.hasValue())",
                f"an attempt's Lease is the operator's record: only the operator creates or "
                f"deletes it; {renew}"),
            validating.dynamic_validation(
                "request.operation != 'UPDATE' || !("
                f"{tombstoned})",
                "'Lease ' + oldObject.metadata.name + ' is tombstoned (its attempt ended): "
                "nobody but the operator and the garbage collector changes it'"),
            validating.dynamic_validation(
                "request.operation != 'UPDATE' || (variables.pod.size() == 1 && "
                f"variables.pod[0] == {holder} && request.userInfo.username.startsWith("
                "'system:serviceaccount:' + request.namespace + ':'))",
                "'Lease ' + oldObject.metadata.name + ' is held by pod ' + "
                f"{holder} + ': {renew}, with a token bound to that pod "
                "(kubectl create token --bound-object-kind Pod)'"),
            validating.validation(
                f"request.operation != 'UPDATE' || ({only_renewal})",
                f"a worker may change only spec.renewTime of its attempt's Lease; {renew}"),
        ])
