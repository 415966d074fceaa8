"""The verb ``override`` on slots, decided by admission with the requester's groups.

alice owns the slot's prior attempt. Covers: bob, an editor without ``override``, writing
``reassign-actor: alice`` and ``reassign-override: "true"`` ends up as the actor with
override ``false`` and is rejected NotOwner; the cluster admin (``override`` only through
the group ``system:masters``, which a SubjectAccessReview for the bare user name would not
see) reassigns it (the run is Manual: the slot waits, reopened, for a claim), and the
ledger records that override was used; bob granted ``override`` by a Role may then give
the slot up, recorded the same way.
"""

from __future__ import annotations

from tests.support.actors.operators import OperatorProcess
from tests.support.plays.scenarios import Scenario, request_id, unchanged

OVERRIDE_RULE = {"apiGroups": ["agentrun.dev"], "resources": ["slots"], "verbs": ["override"]}


def reassign(scenario: Scenario, slot: str, *, user: str, **extra: str) -> str:
    rid = request_id()
    result = scenario.annotate(slot, user=user, reassign_id=rid, reassign_run="study",
                               reassign_worker_class="cpu", reassign_reason="take it over",
                               **extra)
    assert result.returncode == 0, result.stderr
    return rid


def test_override_is_stamped_from_rbac_and_recorded_when_used(
        scenario: Scenario, operator: OperatorProcess) -> None:
    slot = scenario.owned_retry_wait(owner="alice")
    before = scenario.slot(slot)

    forged = reassign(scenario, slot, user="bob", reassign_actor="alice",
                      reassign_override="true")
    entry = scenario.wait_ledger(slot, forged)
    assert (entry["outcome"], entry["predicate"], entry["actor"]) == ("Rejected", "NotOwner",
                                                                      "bob")
    assert entry.get("override") is None
    assert "owned by 'alice', not 'bob'" in entry["message"]
    unchanged(before, scenario.slot(slot))

    rid = reassign(scenario, slot, user="admin")
    entry = scenario.wait_ledger(slot, rid)
    assert (entry["outcome"], entry["actor"], entry["override"]) == ("Accepted", "admin", True)
    status = scenario.slot(slot)["status"]
    assert (status["state"], status["nextOwnerActor"]) == ("RetryWait", "admin")

    # bob is granted `override` in this namespace: he may give up alice's slot.
    scenario.rbac.create_namespaced_role(scenario.namespace, {
        "metadata": {"name": "slot-override"}, "rules": [OVERRIDE_RULE]})
    scenario.rbac.create_namespaced_role_binding(scenario.namespace, {
        "metadata": {"name": "slot-override"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "slot-override"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": "bob"}]})
    give_up = request_id()
    assert scenario.annotate(slot, user="bob", give_up_id=give_up,
                             give_up_reason="the question was wrong").returncode == 0
    entry = scenario.wait_ledger(slot, give_up)
    assert (entry["outcome"], entry["actor"], entry["override"]) == ("Accepted", "bob", True)
    assert scenario.wait_state(slot, "Failed")["status"]["state"] == "Failed"
