"""``core.policies.stamping.assess``: when a stamped actor can be believed (no cluster).

Covers: in force only with the policy and binding as shipped *and* as recorded with the
epoch; missing, edited (spec differs), re-created (uid differs) or changed (generation
differs) objects each say so and carry no epoch; a missing or unreadable Secret asks for a
minting; the Secret minted for an identity is read back as in force under its epoch.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agentrun.api import names
from agentrun.core.policies import admission, stamping

Object = dict[str, Any]


def live(spec: Object, *, uid: str, generation: int = 1) -> Object:
    return {"metadata": {"uid": uid, "generation": generation}, "spec": copy.deepcopy(spec)}


NAMESPACE = "agentrun-ops"  # the operator's: any namespace the chart was installed in
POLICY = live(admission.stamp_policy_spec(), uid="p-1")
BINDING = live(admission.stamp_binding_spec(namespace=NAMESPACE), uid="b-1")
IDENTITY = stamping.Identity.of(policy=POLICY, binding=BINDING)


def minted(identity: stamping.Identity = IDENTITY) -> Object:
    body = stamping.secret_body(epoch=bytes(range(16)), identity=identity,
                                resource_version=None, namespace=NAMESPACE)
    body["metadata"]["resourceVersion"] = "42"
    return body


def test_the_minted_secret_is_read_back_as_in_force_under_its_epoch() -> None:
    found = stamping.assess(policy=POLICY, binding=BINDING, secret=minted(),
                            namespace=NAMESPACE)
    assert found.epoch == minted()["data"]["epoch"]  # what the policy stamps, verbatim
    assert (found.problem, found.identity, found.secret_version) == (None, IDENTITY, "42")
    assert not found.mint_needed
    assert stamping.Identity(policy="p-1/1", binding="b-1/1") == IDENTITY


def edited(spec: Object) -> Object:
    changed = copy.deepcopy(spec)
    changed["failurePolicy" if "mutations" in spec else "policyName"] = "x"
    return changed


@pytest.mark.parametrize(("policy", "binding", "says"), [
    (None, BINDING, "MutatingAdmissionPolicy agentrun-stamp-actors is missing"),
    (POLICY, None, "MutatingAdmissionPolicyBinding agentrun-stamp-actors is missing"),
    (live(edited(POLICY["spec"]), uid="p-1", generation=2), BINDING,
     "MutatingAdmissionPolicy agentrun-stamp-actors is not as shipped"),
    (POLICY, live(edited(BINDING["spec"]), uid="b-1", generation=2),
     "MutatingAdmissionPolicyBinding agentrun-stamp-actors is not as shipped"),
], ids=["policy-missing", "binding-missing", "policy-edited", "binding-edited"])
def test_missing_or_edited_objects_are_not_in_force_and_nothing_is_minted(
        policy: Object | None, binding: Object | None, says: str) -> None:
    found = stamping.assess(policy=policy, binding=binding, secret=minted(),
                            namespace=NAMESPACE)
    assert found.epoch is None and found.identity is None and not found.mint_needed
    assert found.problem is not None and says in found.problem
    assert "make install" in found.problem


@pytest.mark.parametrize(("policy", "binding"), [
    (live(admission.stamp_policy_spec(), uid="p-2"), BINDING),
    (POLICY, live(admission.stamp_binding_spec(namespace=NAMESPACE), uid="b-2")),
    (live(admission.stamp_policy_spec(), uid="p-1", generation=3), BINDING),
    (POLICY, live(admission.stamp_binding_spec(namespace=NAMESPACE), uid="b-1", generation=3)),
], ids=["policy-recreated", "binding-recreated", "policy-changed-back", "binding-changed-back"])
def test_objects_as_shipped_but_not_as_recorded_need_a_new_epoch(
        policy: Object, binding: Object) -> None:
    found = stamping.assess(policy=policy, binding=binding, secret=minted(),
                            namespace=NAMESPACE)
    assert found.epoch is None and found.mint_needed
    assert found.identity == stamping.Identity.of(policy=policy, binding=binding)
    assert found.problem is not None and "changed since the current stamping epoch" in \
        found.problem
    assert found.secret_version == "42"  # the precondition of the new minting


@pytest.mark.parametrize("secret", [
    None,
    {"metadata": {}, "data": {}},
    {"metadata": {}, "data": {"epoch": "ZQ==", "policy": "!!", "binding": "!!"}},
], ids=["missing", "empty", "garbled"])
def test_no_usable_secret_asks_for_a_minting(secret: Object | None) -> None:
    found = stamping.assess(policy=POLICY, binding=BINDING, secret=secret, namespace=NAMESPACE)
    assert found.epoch is None and found.mint_needed and found.identity == IDENTITY


def test_the_binding_takes_its_params_from_the_operators_namespace() -> None:
    """Installed in ``agentrun-ops``, the operator ships a binding whose params are the
    Secret there; a binding naming another namespace (the plain manifests') is not as
    shipped, so no epoch is believed under it, and a missing Secret is named where it is
    looked for."""
    assert BINDING["spec"]["paramRef"] == {"name": names.STAMPING_SECRET,
                                           "namespace": NAMESPACE,
                                           "parameterNotFoundAction": "Deny"}
    other = live(admission.stamp_binding_spec(namespace=names.OPERATOR_NAMESPACE), uid="b-1")
    found = stamping.assess(policy=POLICY, binding=other, secret=minted(), namespace=NAMESPACE)
    assert found.epoch is None and not found.mint_needed
    assert found.problem is not None and "is not as shipped" in found.problem
    missing = stamping.assess(policy=POLICY, binding=BINDING, secret=None, namespace=NAMESPACE)
    assert missing.problem is not None and f"{NAMESPACE}/{names.STAMPING_SECRET}" in \
        missing.problem
    assert minted()["metadata"]["namespace"] == NAMESPACE
