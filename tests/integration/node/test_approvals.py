"""Effects approved by people, bound to the exact payload, on real pods as alice and bob.

alice creates an Automatic run whose LaunchSpec requires approval of the effect
``archive`` (``spec.approvals``, a floor); alice and bob hold ``agentrun-approver``. The
worker (the SDK, in the project's image) does, in every attempt:

- ``archive`` without a payload: refused by the SDK (``ApprovalError``), never sent;
- ``publish`` with a payload and ``approvers=2``: attempt 1 asks (its attempt ends
  ``Asked``); through the plugin, alice (the run's creator) is refused (``SelfApproval``),
  a wrong digest is refused (``DigestMismatch``), bob approves (1 of 2) and is refused a
  second time (``AlreadyApproved``), admin approves: decided; attempt 2's Lease carries
  ``publish.approved`` and the owner applies the publication once;
- ``notify`` with a payload that differs per attempt until attempt 3 (``round``): attempt 2
  asks, bob approves its digest, attempt 3 computes other arguments and asks again; bob
  denies that digest; attempt 4 computes it again and gets ``EffectDenied``: never sent.

No attempt waits in a pod while people decide; the run succeeds with maxAttempts 1 (asking
is not failing).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentrun.api import names
from agentrun.worker import _approvals as approvals
from agentrun.worker import _records as records
from tests.integration.node import stale
from tests.support.actors.operators import OperatorProcess
from tests.support.actors.plugin import plugin
from tests.support.actors.workers import (
    OWNER_ENV,
    grant_worker_role,
    printed,
    real_launch_spec,
)
from tests.support.cluster.clusters import Cluster
from tests.support.plays.scenarios import Scenario, condition_of
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kubelet
owner = stale.owner
__all__ = ["owner"]  # the fixture this module takes from stale
REPORT = {"to": "all", "text": "the report", "token": "s3cret"}
SCRIPT = f"""
from agentrun.worker import ApprovalError, ApprovalRequested, EffectDenied
REPORT = {REPORT!r}
with Worker.from_env(commit_delay=0) as worker:
    attempt = worker.context.attempt
    send = sender(worker)
    try:
        worker.effect("archive", key="archive", call=send)
    except ApprovalError as error:
        say(archive="refused", why=str(error))
    try:
        say(published=worker.effect("publish", key="publish", call=send, payload=REPORT,
                                    approvers=2, redact=["token"]))
        note = {{"text": "published", "round": min(attempt, 3)}}
        say(notified=worker.effect("notify", key="notify", call=send, payload=note,
                                   approvers=1))
    except ApprovalRequested as asked:
        say(asked=asked.key, digest=asked.digest)
    except EffectDenied as denied:
        say(denied=denied.key, digest=denied.digest)
"""


def waiting(scenario: Scenario, slot: str, attempt: int) -> dict[str, Any]:
    """The slot once attempt ``attempt`` ended Asked: its status."""
    def asked(found: dict[str, Any]) -> bool:
        attempts = found["status"].get("attempts") or []
        return len(attempts) >= attempt and attempts[attempt - 1].get("outcome") == "Asked" \
            and (condition_of(found["status"], names.QUESTION_PENDING_CONDITION)
                 or {}).get("status") == "True"
    return dict(scenario.wait_slot(slot, asked, timeout=150,
                                   message=f"attempt {attempt} asked for approval")["status"])


def send(cluster: Cluster, scenario: Scenario, verb: str, slot: str, *, key: str,
         digest: str, user: str, reason: str = "checked it") -> dict[str, Any]:
    """``kubectl agentrun approve|deny`` as ``user``: the ledger entry it printed."""
    done = plugin(cluster, scenario, verb, slot, "--key", key, "--digest", digest,
                  "--reason", reason, "-o", "json", user=user)
    assert done.returncode in (0, 1), (done.stdout, done.stderr)
    return dict(json.loads(done.stdout)["entry"])


def test_effects_wait_for_distinct_approvers_of_their_exact_payload(
        cluster: Cluster, scenario: Scenario, operator: OperatorProcess, worker_image: str,
        owner: stale.TimedOwner) -> None:
    grant_worker_role(scenario)
    scenario.grant_editor("alice", "bob")
    for user in ("alice", "bob"):
        binding: Any = {
            "metadata": {"name": f"{user}-approver"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "agentrun-approver"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": user}]}
        scenario.rbac.create_namespaced_role_binding(scenario.namespace, binding)
    scenario.configs()
    real_launch_spec(scenario, "sdk-workers", classes=["cpu"], image=worker_image,
                     script=stale.PRELUDE + SCRIPT, renewer=False,
                     env={OWNER_ENV: owner.url},
                     extra={"approvals": [{"effect": "archive", "approvers": 1}]})
    scenario.run("study", user="alice", max_attempts=1)
    slot = scenario.slot_name_eventually("study", "research")
    assert scenario.agentrun("study")["status"].get("creator") == "alice"

    # Attempt 1: archive refused by the SDK; publish asks for two approvers.
    status = waiting(scenario, slot, 1)
    said = printed(scenario, f"{slot}-1")
    assert [p["archive"] for p in said if "archive" in p] == ["refused"], said
    digest = approvals.payload_digest(REPORT)
    assert [(p["asked"], p["digest"]) for p in said if "asked" in p] == [("publish", digest)]
    [entry] = status["questions"]
    assert (entry["key"], entry["digest"], entry["approvers"]) == ("publish", digest, 2)
    assert "s3cret" not in entry["question"] and "<redacted>" in entry["question"]
    message = (condition_of(status, names.QUESTION_PENDING_CONDITION) or {})["message"]
    assert f"kubectl agentrun approve {slot} --key publish --digest {digest}" in message
    assert scenario.pod(f"{slot}-2") is None and scenario.lease(f"{slot}-2") is None

    refusals = [
        ("alice", digest, "SelfApproval"), ("bob", "0" * 64, "DigestMismatch")]
    for user, given, predicate in refusals:
        entry_json = send(cluster, scenario, "approve", slot, key="publish", digest=given,
                          user=user)
        assert (entry_json["outcome"], entry_json["predicate"]) == ("Rejected", predicate)
    first = send(cluster, scenario, "approve", slot, key="publish", digest=digest, user="bob")
    assert first["outcome"] == "Accepted" and "1 of 2 approvers" in first["message"], first
    twice = send(cluster, scenario, "approve", slot, key="publish", digest=digest, user="bob")
    assert twice["predicate"] == "AlreadyApproved", twice
    assert scenario.pod(f"{slot}-2") is None  # one approval is not enough
    second = send(cluster, scenario, "approve", slot, key="publish", digest=digest,
                  user="admin")
    assert second["outcome"] == "Accepted", second

    # Attempt 2: publish sent once, as approved; notify (round 2) asks.
    lease = wait_for(lambda: scenario.lease(f"{slot}-2"), timeout=60, message="attempt 2")
    decision = records.on_lease(lease)[0]["publish.approved"].inline
    assert isinstance(decision, dict)
    assert (decision["digest"], decision["value"]) == (
        digest, {"decision": "approved", "required": 2, "approvals": 2})
    status = waiting(scenario, slot, 2)
    said = printed(scenario, f"{slot}-2")
    assert [p["published"] for p in said if "published" in p], said
    asked = [p["digest"] for p in said if p.get("asked") == "notify"]
    assert len(asked) == 1, said
    approved = send(cluster, scenario, "approve", slot, key="notify", digest=asked[0],
                    user="bob")
    assert approved["outcome"] == "Accepted", approved

    # Attempt 3 computes other arguments (round 3): asked again, under a new digest.
    waiting(scenario, slot, 3)
    again = [p["digest"] for p in printed(scenario, f"{slot}-3") if p.get("asked") == "notify"]
    assert len(again) == 1 and again[0] != asked[0], again
    denied = send(cluster, scenario, "deny", slot, key="notify", digest=again[0], user="bob",
                  reason="not this round")
    assert denied["outcome"] == "Accepted", denied

    # Attempt 4: the same arguments as attempt 3: denied, never sent.
    done = scenario.wait_state(slot, "Succeeded", timeout=150)["status"]
    said = printed(scenario, f"{slot}-4")
    assert [(p["denied"], p["digest"]) for p in said if "denied" in p] == [("notify", again[0])]
    assert [a["outcome"] for a in done["attempts"]] == ["Asked", "Asked", "Asked", "Succeeded"]
    sent = [r.key for r in owner.posts()]
    publish = [k for k in owner.applied if k in sent]
    assert len(sent) == 1 and owner.applied[publish[0]] == 1, (sent, owner.applied)
    print(f"ROW approval | alice SelfApproval, DigestMismatch, bob AlreadyApproved; bob+admin "
          f"approved {digest[:12]}: sent once; notify asked again under a new digest, "
          f"denied: never sent; archive (LaunchSpec floor) refused without a payload")
