"""An unknown effect, end to end over the real API server (no node).

alice claims a Manual run's slot; attempt 1's worker, through the SDK with a token bound
to its Pod, commits two effects' intents (the owner's call "dies" after each), asks the
owner, hears "unknown" and so commits ``publish.unresolved`` and ``notify.unresolved``;
its pod then fails. Covers: the slot shows EffectUnresolved (effect, record key,
idempotency key and owner in the message; ``status.effects``; a Warning Event); with the
run switched to Automatic (backoff 0) no attempt is claimed; alice's reassignment is
accepted and the condition stays True; bob's resolve-effect is rejected NotOwner, alice's
with a blank reason BlankReason, one for a key that is not open NoUnresolvedEffect;
alice's answers (publish applied with a result, notify not applied) are accepted, the
condition turns False only after the second, and the operator then claims attempt 2,
whose Lease carries ``publish.resolved`` and ``notify.resolved``. The successor's SDK,
as pod 2's identity, returns publish's recorded result without calling or asking the
owner, and re-sends notify with the same idempotency key under its own intent and
fencing token: the owner applied notify once and was never sent publish. With the Lease
policy in force, a holder cannot write a ``.resolved`` record itself, nor a question's
``.answer`` (the refusal names the policy), but may record its own stop (``.unresolved``)
and its own question (``.question``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kubernetes
import pytest

from agentrun import manifests, rest
from agentrun.api import bounds, names
from agentrun.worker import _effects as effects
from agentrun.worker import _prefix as prefix
from agentrun.worker import _records as records
from tests.support.actors.operators import OperatorProcess
from tests.support.cluster.clusters import Cluster
from tests.support.plays.convergence import assert_converged, assert_nothing_stray, crashed
from tests.support.plays.scenarios import Scenario, condition_of, holds_throughout, request_id
from tests.support.waiting import wait_for

from .test_worker_records import Attempt, annotation, attempts  # noqa: F401 (a fixture)

RUN = "study"
CONDITION = "EffectUnresolved"


class Live:
    """The keeper's side the ledger needs: this test's leases never lapse."""

    def ensure_live(self) -> None:
        return None


class Died(Exception):
    """The worker was killed between the intent and the owner's answer."""


class Owner:
    """The effect owner: deduplicates by idempotency key, rejects lower fencing tokens."""

    def __init__(self) -> None:
        self.applied: dict[str, Any] = {}
        self.requests: list[tuple[str, str, int | None]] = []
        self.highest = 0

    def call(self, key: str, token: int) -> Any:
        self.requests.append(("call", key, token))
        if token < self.highest:
            raise PermissionError(f"fencing token {token} < {self.highest}")
        self.highest = token
        return self.applied.setdefault(key, {"sent": token})

    def unknown(self, key: str) -> effects.Reconciled:
        self.requests.append(("reconcile", key, None))
        return effects.Reconciled(answer=effects.Answer.UNKNOWN)


def dies(key: str, token: int) -> Any:
    raise Died(f"killed while sending {key} with token {token}")


def pod_api(scenario: Scenario, pod: str) -> rest.Rest:
    """The API as ``pod``'s worker: a token of its service account bound to that pod."""
    found = scenario.core.read_namespaced_pod(pod, scenario.namespace)
    token = scenario.core.create_namespaced_service_account_token(
        found.spec.service_account_name or "default", scenario.namespace, {"spec": {
            "expirationSeconds": 600, "boundObjectRef": {
                "apiVersion": "v1", "kind": "Pod", "name": pod, "uid": found.metadata.uid}}}
    ).status.token
    admin = scenario.core.api_client.configuration
    configuration = kubernetes.client.Configuration()
    configuration.host, configuration.ssl_ca_cert = admin.host, admin.ssl_ca_cert
    configuration.verify_ssl = admin.verify_ssl
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return rest.Rest(kubernetes.client.ApiClient(configuration))


def ledger(scenario: Scenario, *, slot: str, attempt: int, run_uid: str) -> effects.Ledger:
    """The SDK's ledger of attempt ``attempt``, as its pod (its prefix read as the pod)."""
    api = pod_api(scenario, f"{slot}-{attempt}")
    leases = prefix.list_leases(api=api, namespace=scenario.namespace, slot=slot, run=RUN)
    found = prefix.prefix(leases=leases, attempt=attempt)
    assert found.unsealed == (), found
    own = records.LeaseRecords(api=api, namespace=scenario.namespace,
                               lease=f"{slot}-{attempt}", attempt=attempt)
    return effects.Ledger(steps=prefix.Steps(prefix=found, ledger=own), keeper=Live(),
                          run_uid=run_uid, slot=slot)


def resolve(scenario: Scenario, slot: str, *, user: str, key: str, outcome: str,
            reason: str, **extra: str) -> str:
    rid = request_id()
    result = scenario.annotate(slot, user=user, resolve_effect_id=rid, resolve_effect_key=key,
                               resolve_effect_outcome=outcome, resolve_effect_reason=reason,
                               **extra)
    assert result.returncode == 0, result.stderr
    return rid


def publish(scenario: Scenario) -> None:
    """Configuration, a LaunchSpec, editors, and the worker role for the pods' account."""
    scenario.grant_editor("alice", "bob")
    scenario.configs()
    scenario.launch_spec("cpu-workers", classes=["cpu"])
    api = scenario.core.api_client
    kubernetes.client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(
        scenario.namespace, {
            "metadata": {"name": manifests.WORKER_ROLE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": manifests.WORKER_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": "default",
                          "namespace": scenario.namespace}]})


def stop_on_unknown(scenario: Scenario, *, slot: str, run_uid: str, key: str,
                    owner: Owner) -> None:
    """Attempt 1's worker: the intent, killed before the answer; then "unknown"."""
    with pytest.raises(Died):
        ledger(scenario, slot=slot, attempt=1, run_uid=run_uid).effect(
            f"{key}-report", key=key, call=dies, owner="publisher")
    # The worker, its prefix read again, finds its intent without an outcome.
    with pytest.raises(effects.AmbiguousEffect, match="answered unknown"):
        ledger(scenario, slot=slot, attempt=1, run_uid=run_uid).effect(
            f"{key}-report", key=key, call=dies, reconcile=owner.unknown, owner="publisher")


def manual_slot(scenario: Scenario) -> str:
    """alice's Manual run (five attempts) published; its slot, once Ready."""
    publish(scenario)
    scenario.run(RUN, user="alice", claim_policy="Manual", max_attempts=5)
    slot = scenario.slot_name_eventually(RUN, "research")
    scenario.wait_state(slot, "Ready")
    return slot


def test_an_unknown_effect_waits_for_the_owners_answer_and_the_successor_uses_it(
        scenario: Scenario, operator: OperatorProcess) -> None:
    slot = manual_slot(scenario)
    assert scenario.annotate(slot, user="alice", claim_id=request_id()).returncode == 0
    scenario.wait_state(slot, "Active")
    run_uid = scenario.agentrun(RUN)["metadata"]["uid"]

    owner = Owner()
    for key in ("publish", "notify"):
        stop_on_unknown(scenario, slot=slot, run_uid=run_uid, key=key, owner=owner)
    assert [r for r in owner.requests if r[0] == "call"] == []
    scenario.finish(f"{slot}-1", "Failed", exit_code=1)

    shown = scenario.wait_slot(slot, lambda s: (condition_of(s["status"], CONDITION) or {})
                               .get("status") == "True", message="EffectUnresolved True")
    found = condition_of(shown["status"], CONDITION)
    assert found is not None and found["reason"] == "OwnerAnswerUnknown"
    shown = scenario.wait_slot(slot, lambda s: len(s["status"].get("effects", [])) == 2,
                               message="both effects in status.effects")
    found = condition_of(shown["status"], CONDITION)
    assert found is not None
    idem = effects.idempotency_key(run_uid=run_uid, slot=slot, key="notify")
    assert sorted((e["key"], e["state"], e["owner"], e["idempotencyKey"])
                  for e in shown["status"]["effects"]) == [
        ("notify", "Unresolved", "publisher", idem),
        ("publish", "Unresolved", "publisher",
         effects.idempotency_key(run_uid=run_uid, slot=slot, key="publish"))]
    named = shown["status"]["effects"][0]  # the condition names the first open one
    for text in (f"effect {named['key']}-report", f"record key {named['key']}",
                 named["idempotencyKey"], "owner publisher",
                 f"agentrun.dev/resolve-effect-key={named['key']}", "1 more open"):
        assert text in found["message"], text
    assert "record key publish" in scenario.wait_event(CONDITION, "publish-report")

    # Automatic from now on, backoff 0: without the open effects it would claim at once.
    scenario.custom.patch_namespaced_custom_object(
        "agentrun.dev", "v1alpha1", scenario.namespace, "agentruns", RUN,
        {"spec": {"claimPolicy": "Automatic"}})
    rid = request_id()
    assert scenario.annotate(slot, user="alice", reassign_id=rid, reassign_run=RUN,
                             reassign_worker_class="cpu",
                             reassign_reason="try once more").returncode == 0
    assert scenario.wait_ledger(slot, rid)["outcome"] == "Accepted"
    holds_throughout(lambda: scenario.lease(f"{slot}-2") is None and condition_of(
        scenario.slot(slot)["status"], CONDITION)["status"] == "True", seconds=4,
        message="no attempt 2 and EffectUnresolved True while effects are open")

    before = scenario.slot(slot)["status"]["effects"]
    # Each sent once the one before is decided: `kubectl annotate` patches only the keys
    # whose value differs from what it read, with no precondition, so an outcome equal
    # to the previous command's is left out of its patch and then removed with it.
    rejections = [
        (dict(user="bob", key="publish", outcome="applied", reason="I think so"),
         "NotOwner"),
        (dict(user="alice", key="publish", outcome="applied", reason=" "), "BlankReason"),
        (dict(user="alice", key="gather", outcome="applied", reason="no such effect"),
         "NoUnresolvedEffect"),
    ]
    for sent, predicate in rejections:
        rid = resolve(scenario, slot, **sent)
        entry = scenario.wait_ledger(slot, rid)
        assert (entry["outcome"], entry["predicate"]) == ("Rejected", predicate), entry
    assert scenario.slot(slot)["status"]["effects"] == before  # rejections change nothing

    done = resolve(scenario, slot, user="alice", key="publish", outcome="applied",
                   reason="the owner's log shows report 1 published",
                   resolve_effect_result='{"url": "reports/1"}')
    assert scenario.wait_ledger(slot, done)["outcome"] == "Accepted"
    status = scenario.slot(slot)["status"]
    assert condition_of(status, CONDITION)["status"] == "True"  # notify is still open
    assert scenario.lease(f"{slot}-2") is None
    done = resolve(scenario, slot, user="alice", key="notify", outcome="not-applied",
                   reason="the owner has no trace of it")
    assert scenario.wait_ledger(slot, done)["outcome"] == "Accepted"
    resolved = scenario.wait_slot(slot, lambda s: (condition_of(s["status"], CONDITION)
                                                   or {}).get("status") == "False",
                                  message="EffectUnresolved False")
    assert condition_of(resolved["status"], CONDITION)["reason"] == "Resolved"
    assert "notify" in scenario.wait_event("EffectResolved", "not-applied")

    lease = wait_for(lambda: scenario.lease(f"{slot}-2"), timeout=60,
                     message="attempt 2 claimed automatically once nothing is open")
    found_records, problems = records.on_lease(lease)
    assert problems == []
    assert found_records["publish.resolved"].inline == {
        "answer": "applied", "result": {"url": "reports/1"}, "actor": "alice",
        "reason": "the owner's log shows report 1 published", "unresolvedAttempt": 1}
    assert found_records["notify.resolved"].inline["answer"] == "not-applied"
    wait_for(lambda: scenario.pod(f"{slot}-2"), timeout=60, message="attempt 2's pod")

    second = ledger(scenario, slot=slot, attempt=2, run_uid=run_uid)
    asked = len(owner.requests)
    assert second.effect("publish-report", key="publish", call=owner.call,
                         reconcile=owner.unknown, owner="publisher") == {"url": "reports/1"}
    assert len(owner.requests) == asked  # neither called nor asked
    assert second.effect("notify-report", key="notify", call=owner.call,
                         reconcile=owner.unknown, owner="publisher") == {"sent": 2}
    assert owner.requests[asked:] == [("call", idem, 2)]
    assert owner.applied == {idem: {"sent": 2}}
    committed = records.LeaseRecords(api=pod_api(scenario, f"{slot}-2"),
                                     namespace=scenario.namespace, lease=f"{slot}-2",
                                     attempt=2).read()
    assert committed["publish.outcome"].inline["via"] == "resolve-effect"
    assert committed["notify.intent"].inline["fencingToken"] == 2


def test_crash_after_the_effect_is_shown(scenario: Scenario, cluster: Cluster,
                                        process: OperatorProcess) -> None:
    """``effect-unresolved``: SIGKILL right after the write; while the operator is down
    the attempt fails; the restart shows the effect once and claims nothing until an
    answer is recorded, then attempt 2 carries it."""
    publish(scenario)
    process.start(crash_at="effect-unresolved")
    scenario.run(RUN, max_attempts=3)  # Automatic, backoff 0
    slot = scenario.slot_name_eventually(RUN, "research")
    scenario.wait_state(slot, "Active")
    run_uid = scenario.agentrun(RUN)["metadata"]["uid"]
    stop_on_unknown(scenario, slot=slot, run_uid=run_uid, key="publish", owner=Owner())
    crashed(process)
    written = scenario.slot(slot)["status"]
    assert [e["key"] for e in written["effects"]] == ["publish"]
    assert condition_of(written, CONDITION)["status"] == "True"
    scenario.finish(f"{slot}-1", "Failed", exit_code=1)

    process.start()
    scenario.wait_state(slot, "RetryWait")
    holds_throughout(lambda: scenario.lease(f"{slot}-2") is None, seconds=3,
                     message="no attempt 2 while the effect is open")
    after = scenario.slot(slot)["status"]
    assert [e["key"] for e in after["effects"]] == ["publish"]  # observed once
    assert_converged(scenario, cluster, slot, count=1, state="RetryWait")
    done = resolve(scenario, slot, user="admin", key="publish", outcome="not-applied",
                   reason="not in the owner's log")
    assert scenario.wait_ledger(slot, done)["outcome"] == "Accepted"
    lease = wait_for(lambda: scenario.lease(f"{slot}-2"), timeout=60,
                     message="attempt 2 claimed once the answer is recorded")
    assert records.on_lease(lease)[0]["publish.resolved"].inline["answer"] == "not-applied"
    scenario.wait_state(slot, "Active")
    assert_converged(scenario, cluster, slot, count=2, state="Active")
    assert_nothing_stray(scenario)


@pytest.mark.serial
def test_admission_refuses_at_once_what_the_operator_would(
        scenario: Scenario, operator: OperatorProcess, validating: None) -> None:
    """With the validating policies in force: the worker's records pass the Lease policy;
    while the effect is open a claim is refused at once, and so is bob's resolve-effect
    (not the owner) and one with a bad outcome; alice's answer is admitted and decided,
    after which a claim is admitted again (a dry run)."""
    publish(scenario)
    scenario.run(RUN, user="alice", claim_policy="Manual", max_attempts=3)
    slot = scenario.slot_name_eventually(RUN, "research")
    scenario.wait_state(slot, "Ready")
    assert scenario.annotate(slot, user="alice", claim_id=request_id()).returncode == 0
    scenario.wait_state(slot, "Active")
    run_uid = scenario.agentrun(RUN)["metadata"]["uid"]
    stop_on_unknown(scenario, slot=slot, run_uid=run_uid, key="publish", owner=Owner())
    scenario.finish(f"{slot}-1", "Failed", exit_code=1)
    scenario.wait_slot(slot, lambda s: s["status"]["state"] == "RetryWait" and (
        condition_of(s["status"], CONDITION) or {}).get("status") == "True",
        message="RetryWait with EffectUnresolved True")

    claim = scenario.annotate(slot, user="alice", claim_id=request_id())
    assert claim.returncode != 0 and "agentrun-slot-commands" in claim.stderr, claim.stderr
    assert "an effect of this slot is unresolved" in claim.stderr
    bob = scenario.annotate(slot, user="bob", resolve_effect_id=request_id(),
                            resolve_effect_key="publish", resolve_effect_outcome="applied",
                            resolve_effect_reason="I think so")
    assert bob.returncode != 0 and "owned by alice, not bob" in bob.stderr, bob.stderr
    bad = scenario.annotate(slot, user="alice", resolve_effect_id=request_id(),
                            resolve_effect_key="publish", resolve_effect_outcome="maybe",
                            resolve_effect_reason="unsure")
    assert bad.returncode != 0 and "resolve-effect-outcome is required" in bad.stderr
    done = resolve(scenario, slot, user="alice", key="publish", outcome="not-applied",
                   reason="no trace at the owner")
    assert scenario.wait_ledger(slot, done)["outcome"] == "Accepted"
    scenario.wait_slot(slot, lambda s: condition_of(s["status"], CONDITION)["status"]
                       == "False", message="EffectUnresolved False")
    again = scenario.cluster.kubectl(
        "-n", scenario.namespace, "annotate", "--dry-run=server", f"slots.agentrun.dev/{slot}",
        f"agentrun.dev/claim-id={request_id()}", user="alice")
    assert again.returncode == 0, again.stderr


@pytest.mark.serial
def test_a_worker_cannot_write_the_owners_answer_itself(
        attempts: Callable[[int], Attempt]) -> None:  # noqa: F811 (the fixture)
    holder = attempts(1)
    forged = records.encode(records.make(
        key="publish.resolved", kind=records.Kind.DECISION, attempt=1,
        payload={"answer": "applied", "result": "x", "unresolvedAttempt": 1}))
    body = annotation("publish.resolved", forged)

    def dry_run_refusal() -> str:
        """The refusal of the forged record in a dry run ('' while the policy is not yet
        in force on this API server: the probe of the fixture is another policy's)."""
        try:
            holder.api.request("PATCH", holder.records().path, body=body,
                               content_type=rest.MERGE_PATCH, query={"dryRun": "All"})
        except rest.ApiError as error:
            return error.message
        return ""

    wait_for(dry_run_refusal, timeout=30, message="the Lease policy in force")
    refused = holder.raw_patch(body)
    assert "agentrun-attempt-leases" in refused and "cannot write one" in refused, refused
    answer = records.encode(records.make(  # nor a person's answer to a question
        key="plan.answer", kind=records.Kind.DECISION, attempt=1,
        payload={"value": True, "digest": "0" * 64, "questionAttempt": 1}))
    refused = holder.raw_patch(annotation("plan.answer", answer))
    assert "agentrun-attempt-leases" in refused and "cannot write one" in refused, refused
    stopped = records.make(key="publish.unresolved", kind=records.Kind.DECISION, attempt=1,
                           payload={"effect": "publish", "reason": "unknown"})
    assert holder.records().commit(stopped) == stopped  # its own stop it may record
    asked = records.make(key="plan.question", kind=records.Kind.DECISION, attempt=1,
                         payload={"question": "Go on?", "schema": None})
    assert holder.records().commit(asked) == asked  # and its own question
    annotations = holder.lease()["metadata"]["annotations"]
    assert set(annotations) == {bounds.RECORD_ANNOTATION_PREFIX + "publish.unresolved",
                                bounds.RECORD_ANNOTATION_PREFIX + "plan.question",
                                names.HOLDER_UID_ANNOTATION}  # bound by its first write
    assert annotations[names.HOLDER_UID_ANNOTATION] == holder.pod.metadata.uid
