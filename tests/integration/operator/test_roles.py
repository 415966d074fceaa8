"""The shipped roles, aggregated into the standard ones.

As the real users, with only the standard ClusterRoles bound in the namespace: ``bob``
with ``edit`` runs a Manual run and claims its slot (``agentrun-editor`` and
``agentrun-viewer`` aggregated into ``edit``); ``alice`` with ``admin`` holds ``override``
(``agentrun-slot-override`` aggregated into ``admin``) and reassigns bob's attempt, the
ledger saying so; a ServiceAccount with ``view`` may read slots but not write commands.
"""

from __future__ import annotations

from tests.support.actors.operators import OperatorProcess
from tests.support.plays.scenarios import Scenario, request_id
from tests.support.waiting import wait_for, wait_for_default_service_account


def bind(scenario: Scenario, role: str, subject: dict[str, str]) -> None:
    scenario.rbac.create_namespaced_role_binding(scenario.namespace, {
        "metadata": {"name": f"{role}-{subject['name'].replace(':', '-')}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": role},
        "subjects": [subject]})


def user(name: str) -> dict[str, str]:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}


def can(scenario: Scenario, who: str, verb: str, resource: str, *sub: str) -> bool:
    result = scenario.cluster.kubectl("-n", scenario.namespace, "auth", "can-i", verb,
                                      resource, *sub, "--as", who)
    return result.stdout.strip() == "yes"


def test_the_standard_roles_carry_agentruns_rights(
        scenario: Scenario, operator: OperatorProcess) -> None:
    bind(scenario, "edit", user("bob"))
    bind(scenario, "admin", user("alice"))
    viewer = f"system:serviceaccount:{scenario.namespace}:default"
    bind(scenario, "view", {"kind": "ServiceAccount", "name": "default",
                            "namespace": scenario.namespace})
    wait_for(lambda: can(scenario, "alice", "override", "slots.agentrun.dev")
             and can(scenario, "bob", "patch", "slots.agentrun.dev")
             and can(scenario, viewer, "get", "slots.agentrun.dev"),
             timeout=60, message="the aggregated rights")
    assert not can(scenario, "bob", "override", "slots.agentrun.dev")
    assert not can(scenario, viewer, "patch", "slots.agentrun.dev")
    # Not the controller: the validating policies tell it by this right.
    assert not can(scenario, "bob", "update", "slots.agentrun.dev", "--subresource=status")
    assert not can(scenario, "bob", "create", "launchspecs.agentrun.dev")

    scenario.configs()
    scenario.launch_spec("cpu-workers", classes=["cpu"])
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)
    scenario.run("study", user="bob", claim_policy="Manual")
    slot = scenario.slot_name_eventually("study", "research")
    scenario.wait_state(slot, "Ready")
    assert scenario.annotate(slot, user="bob", claim_id=request_id()).returncode == 0
    scenario.wait_state(slot, "Active")
    scenario.finish(f"{slot}-1", "Failed", exit_code=1)
    scenario.wait_state(slot, "RetryWait")
    rid = request_id()
    assert scenario.annotate(slot, user="alice", reassign_id=rid, reassign_run="study",
                             reassign_worker_class="cpu",
                             reassign_reason="bob is away").returncode == 0
    entry = scenario.wait_ledger(slot, rid)
    assert (entry["outcome"], entry["actor"], entry["override"]) == ("Accepted", "alice", True)
