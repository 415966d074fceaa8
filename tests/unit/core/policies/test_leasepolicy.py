"""The attempt-Lease policy as generated: the record checks carry the bounds of
``api.bounds``, agree with the worker's canonical encoding, guard UPDATEs only (create and
delete stay the operator's), and the worker's role has exactly the verbs the SDK uses.
What the API server makes of them: tests/integration/operator/test_lease_policy.py."""

from __future__ import annotations

import re
from typing import Any

from agentrun import manifests
from agentrun.api import bounds, modelusage, names
from agentrun.core.policies import leasepolicy
from agentrun.worker import _records as records


def policy() -> dict[str, Any]:
    found = leasepolicy.attempt_leases()
    assert [d["kind"] for d in found] == ["ValidatingAdmissionPolicy",
                                          "ValidatingAdmissionPolicyBinding"]
    return found[0]["spec"]


def record_checks() -> list[dict[str, Any]]:
    checks = leasepolicy.record_checks()
    assert policy()["validations"][-len(checks):] == checks  # in force, after the others
    return checks


def test_records_are_checked_with_the_documented_bounds() -> None:
    checks = record_checks()
    # four on records, two on the journal head, three on each of its two usages, one on
    # its error, one on the release
    assert len(checks) == 14
    text = " ".join(c["expression"] for c in checks)
    assert f"<= {bounds.MAX_RECORDS}" in text and f"<= {bounds.RECORD_BYTES}" in text
    assert f"<= {bounds.JOURNAL_ERROR_BYTES}" in text
    assert all(c["expression"].startswith("request.operation != 'UPDATE' || ")
               for c in checks)
    assert "write-once" in checks[0]["message"]


def test_the_model_usage_grows_in_one_currency_with_the_head() -> None:
    text = " ".join(c["expression"] for c in record_checks())
    usage = names.MODEL_USAGE_ANNOTATION
    assert f"variables.new[?'{usage}'].value().matches('{modelusage.SHAPE}')" in text
    for index in (0, 3, 6):  # input tokens, output tokens, cost: never smaller
        assert (f"int(variables.new[?'{usage}'].value().split(' ')[{index}]) >= "
                f"int(variables.old[?'{usage}'].value().split(' ')[{index}])") in text
    assert (f"variables.new[?'{usage}'].value().split(' ')[7] == "
            f"variables.old[?'{usage}'].value().split(' ')[7]") in text
    assert re.fullmatch(modelusage.SHAPE, modelusage.ModelUsage(
        input_tokens=12, output_tokens=3, cost_micros=99, currency="EUR").text())


def test_the_checked_prefix_is_what_the_worker_writes() -> None:
    shaped = record_checks()[2]["expression"]
    assert "startsWith('{\"attempt\":' + " in shaped
    assert f"k.substring({len(bounds.RECORD_ANNOTATION_PREFIX)})" in shaped
    record = records.make(key="gather", kind=records.Kind.STEP_RESULT, attempt=12,
                          payload={"key": "other"})
    text = records.encode(record)
    assert text.startswith('{"attempt":12,') and '"key":"gather"' in text


def test_annotations_are_no_longer_compared_whole_but_labels_are() -> None:
    renewal = next(v for v in policy()["validations"]
                   if "only spec.renewTime" in v.get("message", ""))
    assert "object.metadata.?annotations" not in renewal["expression"]
    assert "object.metadata.?labels == oldObject.metadata.?labels" in renewal["expression"]
    names = [v["name"] for v in policy()["variables"]]
    assert names == ["pod", "uid", "new", "old", "added"]


def test_the_worker_role_has_the_verbs_the_sdk_uses() -> None:
    assert manifests.WORKER_RULES == [{"apiGroups": ["coordination.k8s.io"],
                                       "resources": ["leases"],
                                       "verbs": ["get", "list", "update", "patch"]}]


def test_the_binding_is_stamped_once_by_admission_and_never_for_the_controller() -> None:
    mutating, binding = leasepolicy.bind_holders()
    assert (mutating["kind"], binding["spec"]) == (
        "MutatingAdmissionPolicy", {"policyName": leasepolicy.BIND_HOLDERS})
    spec = mutating["spec"]
    assert spec["matchConstraints"]["resourceRules"][0]["operations"] == ["UPDATE"]
    conditions = {c["name"]: c["expression"] for c in spec["matchConditions"]}
    assert set(conditions) == {"an-attempt-lease", "not-yet-bound", "a-pod-bound-token",
                               "not-the-controller"}
    assert names.HOLDER_UID_ANNOTATION in conditions["not-yet-bound"]
    assert conditions["not-the-controller"].startswith("!authorizer.")
    (mutation,) = spec["mutations"]
    assert mutation["patchType"] == "ApplyConfiguration"
    assert f"'{names.HOLDER_UID_ANNOTATION}': variables.uid[0]" in mutation[
        "applyConfiguration"]["expression"]
    assert (spec["failurePolicy"], spec["reinvocationPolicy"]) == ("Fail", "Never")
    # Shipped with the other mutating policy (installed once, with the operator).
    shipped = manifests.rendered()["admission/stamp-actors.yaml"]
    assert f"name: {leasepolicy.BIND_HOLDERS}" in shipped


def test_an_impostor_meets_the_binding_before_the_tombstone_and_the_stamp_after_the_name(
) -> None:
    """A pod under the holder's name but of another uid is told so first, whether or not
    the Lease was released as the real pod went; the stamp is checked once the writer is
    known to be the holder."""
    uid, stamp = leasepolicy.binding_checks()
    validations = policy()["validations"]
    at = validations.index(uid)
    assert "is tombstoned" in validations[at + 1]["messageExpression"]
    assert "is bound to the pod of uid" in uid["messageExpression"]
    assert "variables.pod[0] == oldObject.spec.?holderIdentity.orValue('')" in uid["expression"]
    assert "held by pod" in validations[validations.index(stamp) - 1]["messageExpression"]
    assert leasepolicy.BIND_HOLDERS in stamp["message"]


def test_the_journal_usage_is_checked_in_the_shape_the_worker_writes() -> None:
    from agentrun.api import journalnodes
    shape, with_head, growing = leasepolicy.usage_checks()[:3]
    assert all(check in record_checks() for check in (shape, with_head, growing))
    assert "never decreases" in growing["message"]
    text = journalnodes.Usage(records=12, bytes=3 * 1024 * 1024).text()
    assert re.fullmatch(journalnodes.USAGE_SHAPE.strip("^$"), text)
    assert journalnodes.USAGE_PATTERN.fullmatch(text)
    assert journalnodes.USAGE_SHAPE in shape["expression"]
    assert "advances" in with_head["message"]


def test_the_journal_head_is_checked_in_the_shape_the_worker_writes_and_only_forward() -> None:
    from agentrun.worker import _journal as journal

    shape, forward = leasepolicy.head_checks()
    assert shape in record_checks() and forward in record_checks()
    text = journal.Head(seq=7, digest="a" * 64).text()
    assert re.fullmatch(leasepolicy.HEAD_SHAPE.strip("^$"), text)
    assert f"{leasepolicy.HEAD_SHAPE}" in shape["expression"]
    assert "substring(0, 10) > variables.old[?" in forward["expression"]
    assert "!= '0000000000'" in shape["expression"]
    # the fixed width makes a later commit's head the larger string, as CEL compares them
    later, earlier = journal.Head(seq=10, digest="0" * 64), journal.Head(seq=9, digest="f" * 64)
    assert later.text() > earlier.text()
