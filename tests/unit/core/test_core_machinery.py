"""Selection order, retries and backoff, naming, builders, other commands, the state machine."""

from __future__ import annotations

from datetime import timedelta

import corefakes as f
import pytest

from agentrun.api import names
from agentrun.api.policies import Backoff, RetryPolicy
from agentrun.api.slots import COMMANDS_KEPT, CommandKind, Outcome, Predicate, SlotState, SlotStatus
from agentrun.core.attempts import attemptobjects
from agentrun.core.base import naming
from agentrun.core.commands import guards
from agentrun.core.launchspecs import selection
from agentrun.core.machine import retries, transitions

# --- selection ---------------------------------------------------------------------------


def pick(*specs: object, worker_class: str = "gpu") -> str:
    chosen = selection.select(specs=specs, namespace=f.NS, run=f.RUN, node=f.NODE,  # type: ignore[arg-type]
                              worker_class=worker_class)
    assert isinstance(chosen, selection.Choice), chosen
    return chosen.spec.metadata.name


def test_most_specific_scope_wins_over_priority() -> None:
    both = f.launch_spec("both", classes=["gpu"], runs=[f.RUN], nodes=[f.NODE], priority=-5)
    runs = f.launch_spec("runs", classes=["gpu"], runs=[f.RUN], priority=500)
    nodes = f.launch_spec("nodes", classes=["gpu"], nodes=[f.NODE], priority=500)
    open_ = f.launch_spec("open", classes=["gpu"], priority=1000)
    assert pick(open_, runs, both, nodes) == "both"
    assert pick(open_, runs) == "runs"
    assert pick(open_, nodes) == "nodes"
    assert pick(open_) == "open"


def test_then_priority_then_name() -> None:
    assert pick(f.launch_spec("b", classes=["gpu"], priority=1),
                f.launch_spec("a", classes=["gpu"])) == "b"
    assert pick(f.launch_spec("b", classes=["gpu"]), f.launch_spec("a", classes=["gpu"])) == "a"


def test_other_namespaces_never_serve() -> None:
    foreign = f.launch_spec("foreign", classes=["gpu"], namespace="team-b")
    chosen = selection.select(specs=[foreign], namespace=f.NS, run=f.RUN, node=f.NODE,
                              worker_class="gpu")
    assert isinstance(chosen, selection.NoChoice)
    assert chosen.predicate is Predicate.UNKNOWN_WORKER_CLASS


def test_unknown_versus_incompatible() -> None:
    wrong_node = f.launch_spec("elsewhere", classes=["gpu"], nodes=["other-node"])
    unknown = selection.select(specs=[wrong_node], namespace=f.NS, run=f.RUN, node=f.NODE,
                               worker_class="tpu")
    incompatible = selection.select(specs=[wrong_node], namespace=f.NS, run=f.RUN, node=f.NODE,
                                    worker_class="gpu")
    assert isinstance(unknown, selection.NoChoice)
    assert isinstance(incompatible, selection.NoChoice)
    assert unknown.predicate is Predicate.UNKNOWN_WORKER_CLASS
    assert incompatible.predicate is Predicate.NO_COMPATIBLE_LAUNCH_SPEC
    assert "elsewhere" in incompatible.message


def test_choice_says_why() -> None:
    chosen = selection.select(specs=[f.launch_spec("x", classes=["gpu"], runs=[f.RUN]),
                                     f.launch_spec("y", classes=["gpu"])],
                              namespace=f.NS, run=f.RUN, node=f.NODE, worker_class="gpu")
    assert isinstance(chosen, selection.Choice)
    assert "'x'" in chosen.reason and "names this run or this node" in chosen.reason
    assert "1 other candidate" in chosen.reason


# --- retries -----------------------------------------------------------------------------


def test_effective_policy_layers() -> None:
    assert retries.effective(node=None, run=None) == retries.Effective(
        max_attempts=3, backoff=Backoff(initial_seconds=10, factor=2.0, max_seconds=300))
    run = RetryPolicy(max_attempts=5, backoff=Backoff(initial_seconds=1))
    node = RetryPolicy(max_attempts=7)
    got = retries.effective(node=node, run=run)
    assert (got.max_attempts, got.backoff.initial_seconds) == (7, 1)
    assert retries.effective(node=None, run=run).max_attempts == 5


def test_backoff_schedule() -> None:
    backoff = retries.DEFAULT_BACKOFF
    got = [retries.delay(backoff=backoff, consumed=n).total_seconds() for n in range(0, 8)]
    assert got == [0, 10, 20, 40, 80, 160, 300, 300]
    assert retries.delay(backoff=backoff, consumed=10_000) == timedelta(seconds=300)


def test_exhaustion_counts_every_consumed_number() -> None:
    policy = retries.effective(node=None, run=None)
    assert retries.retry_at(policy=policy, consumed=2, now=f.T0) == f.T0 + f.seconds(20)
    assert retries.retry_at(policy=policy, consumed=3, now=f.T0) is None
    status = f.retry_wait(attempts_used=2).model_copy(update={"prior_worker": None})
    started = transitions.start_claim(status, slot=f.SLOT, now=f.T0)
    failed = transitions.fail_claim(started, message="422", policy=policy, now=f.T0)
    assert failed.retry_at is None and failed.attempt_count == 3
    assert transitions.conditions.is_true(failed.conditions, transitions.AWAITING_REASSIGNMENT)


# --- naming ------------------------------------------------------------------------------


def test_names_fit_and_are_deterministic() -> None:
    run = "r" * names.MAX_RUN_NAME
    slot = naming.slot_name(run=run, node="n" * 63)
    assert len(slot) == 58 and slot == naming.slot_name(run=run, node="n" * 63)
    assert len(naming.attempt_name(slot=slot, number=9999)) == 63
    with pytest.raises(ValueError, match="longer than"):
        naming.slot_name(run=run + "x", node="n")
    with pytest.raises(ValueError, match="start at 1"):
        naming.attempt_name(slot=slot, number=0)
    assert naming.config_snapshot_name(run="r", kind="package", sha256="abcdef0123456789") == (
        "r-package-abcdef0123")


def test_no_collisions_for_distinct_nodes() -> None:
    nodes = [f"node-{i}" for i in range(5000)] + ["a", "a-", "a" * 63]
    assert len({naming.slot_name(run="r", node=n) for n in nodes}) == len(nodes)


# --- builders ----------------------------------------------------------------------------

SPEC = f.launch_spec(
    "cpu-spec", classes=["cpu"], generation=4,
    containers=[{"name": "worker", "image": "w", "env": [{"name": "AGENTRUN_RUN", "value": "x"},
                                                        {"name": "KEEP", "value": "1"}]},
                {"name": "sidecar", "image": "s"}],
    init_containers=[{"name": "init", "image": "i"}])
PIN = f.PINNED.model_copy(update={"generation": 4})


def test_lease_body() -> None:
    body = attemptobjects.lease_body(slot=f.slot(), attempt=3, owner_actor="alice", tenant=f.TENANT,
                             launch_spec=PIN, lease_duration_seconds=30)
    meta = body["metadata"]
    assert body["apiVersion"] == "coordination.k8s.io/v1" and meta["name"] == f"{f.SLOT}-3"
    assert body["spec"] == {"holderIdentity": f"{f.SLOT}-3", "leaseDurationSeconds": 30}
    assert meta["labels"] == {names.RUN_LABEL: f.RUN, names.SLOT_LABEL: f.SLOT,
                              names.ATTEMPT_LABEL: "3", names.NODE_LABEL: f.NODE,
                              names.TENANT_LABEL: f.TENANT}
    assert meta["annotations"] == {names.OWNER_ACTOR_ANNOTATION: "alice",
                                   names.LAUNCH_SPEC_ANNOTATION: "cpu-spec@4"}
    assert meta["ownerReferences"] == [{
        "apiVersion": "agentrun.dev/v1alpha1", "kind": "Slot", "name": f.SLOT,
        "uid": f.SLOT_UID, "controller": True, "blockOwnerDeletion": True}]
    assert attemptobjects.matches_attempt(body, slot_uid=f.SLOT_UID, attempt=3)


def test_pod_body() -> None:
    body = attemptobjects.pod_body(slot=f.slot(), pins=f.pins(), launch_spec=SPEC.spec, pinned=PIN,
                           attempt=2, owner_actor=None, tenant=None)
    spec = body["spec"]
    assert spec["restartPolicy"] == "Never"
    assert body["metadata"]["labels"]["app"] == "worker"
    assert names.TENANT_LABEL not in body["metadata"]["labels"]
    assert names.OWNER_ACTOR_ANNOTATION not in body["metadata"]["annotations"]
    assert body["metadata"]["ownerReferences"][0]["uid"] == f.SLOT_UID
    volumes = {v["name"]: v["configMap"]["name"] for v in spec["volumes"]}
    assert sorted(volumes.values()) == sorted(f.pins().snapshot_names().values())
    for container in spec["containers"] + spec["initContainers"]:
        mounts = {m["mountPath"]: (m["name"], m["readOnly"]) for m in container["volumeMounts"]}
        for kind in ("package", "workflow", "bindings"):
            assert mounts[f"/etc/agentrun/config/{kind}/"] == (f"agentrun-config-{kind}", True)
        env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
        assert env["AGENTRUN_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
        assert (env["AGENTRUN_RUN"], env["AGENTRUN_SLOT"], env["AGENTRUN_NODE"]) == (
            f.RUN, f.SLOT, f.NODE)
        assert env["AGENTRUN_ATTEMPT"] == env["AGENTRUN_FENCING_TOKEN"] == "2"
        assert env["AGENTRUN_LEASE"] == f"{f.SLOT}-2"
        assert env["AGENTRUN_CONFIG_DIR"] == "/etc/agentrun/config"
        assert len([e for e in container["env"] if e["name"] == "AGENTRUN_RUN"]) == 1
    assert {"name": "KEEP", "value": "1"} in spec["containers"][0]["env"]
    assert SPEC.spec.template.spec.containers[0]["env"][0]["value"] == "x"  # not mutated


def test_already_exists_matches_only_own_attempt() -> None:
    body = attemptobjects.pod_body(slot=f.slot(), pins=f.pins(), launch_spec=SPEC.spec, pinned=PIN,
                           attempt=2, owner_actor=None, tenant=None)
    assert attemptobjects.matches_attempt(body, slot_uid=f.SLOT_UID, attempt=2)
    assert not attemptobjects.matches_attempt(body, slot_uid=f.SLOT_UID, attempt=3)
    assert not attemptobjects.matches_attempt(body, slot_uid="uid-recreated-slot", attempt=2)
    loose = {"metadata": {"labels": body["metadata"]["labels"], "ownerReferences": [
        {**body["metadata"]["ownerReferences"][0], "controller": False}]}}
    assert not attemptobjects.matches_attempt(loose, slot_uid=f.SLOT_UID, attempt=2)
    assert not attemptobjects.matches_attempt({}, slot_uid=f.SLOT_UID, attempt=2)


# --- other commands ----------------------------------------------------------------------


def command(kind: CommandKind, rid: str = "c1", **kw: object) -> guards.Command:
    return guards.Command(kind=kind, request_id=rid, actor=kw.pop("actor", "alice"), **kw)  # type: ignore[arg-type]


def decide(status: SlotStatus, cmd: guards.Command) -> guards.Decision:
    return guards.decide(command=cmd, slot=f.slot(status), tenant=f.TENANT, prior=None,
                         launch_specs=[], now=f.T0)


def test_hold_and_release_commands() -> None:
    status = f.retry_wait(retry_at=f.T0)
    assert decide(status, command(CommandKind.HOLD, reason=" ")).predicate is Predicate.BLANK_REASON
    held = decide(status, command(CommandKind.HOLD, reason="investigate")).status
    assert transitions.is_held(held)
    assert not transitions.is_claimable(held, now=f.T0, claim_policy="Automatic")
    released = decide(held, command(CommandKind.RELEASE, "c2")).status
    assert not transitions.is_held(released)
    assert transitions.is_claimable(released, now=f.T0, claim_policy="Automatic")
    assert [c.request_id for c in released.commands] == ["c1", "c2"]


def test_manual_claim_command() -> None:
    ready = SlotStatus(state=SlotState.READY, worker_class="cpu", launch_spec=f.PINNED)
    assert not transitions.is_claimable(ready, now=f.T0, claim_policy="Manual")
    decision = decide(ready, command(CommandKind.CLAIM, actor="carol"))
    assert decision.accepted and decision.status.next_owner_actor == "carol"
    active = transitions.finish_claim(
        transitions.start_claim(decision.status, slot=f.SLOT, now=f.T0), now=f.T0)
    assert active.attempts[-1].owner_actor == "carol"
    again = decide(active, command(CommandKind.CLAIM, "c2"))
    assert again.predicate is Predicate.NOT_CLAIMABLE


def test_give_up_command() -> None:
    active = transitions.finish_claim(transitions.start_claim(
        f.retry_wait(owner="bob", retry_at=f.T0), slot=f.SLOT, now=f.T0), now=f.T0)
    stranger = decide(active, command(CommandKind.GIVE_UP, reason="stop"))
    assert stranger.accepted  # the live attempt was claimed automatically: no owner
    decision = decide(active, command(CommandKind.GIVE_UP, reason="stop", override=True))
    assert decision.accepted
    assert decision.status.state is SlotState.FAILED
    assert decision.status.attempts[-1].outcome is Outcome.GAVE_UP
    assert decision.status.prior_worker == f"{f.SLOT}-2" and decision.status.active_worker is None
    done = decide(decision.status, command(CommandKind.GIVE_UP, "c2", reason="again"))
    assert done.predicate is Predicate.NOT_RETRY_WAIT
    assert decide(active, command(CommandKind.GIVE_UP, "c3", reason="")).predicate is (
        Predicate.BLANK_REASON)
    wrong = decide(active, command(CommandKind.HOLD, "c4", reason="x", tenant="globex"))
    assert wrong.predicate is Predicate.WRONG_TENANT


def test_give_up_is_owner_checked() -> None:
    owned = f.retry_wait(owner="bob")
    assert decide(owned, command(CommandKind.GIVE_UP, reason="x")).predicate is Predicate.NOT_OWNER
    assert decide(owned, command(CommandKind.GIVE_UP, reason="x", actor="bob")).accepted


def test_ledger_keeps_the_last_commands() -> None:
    status = f.retry_wait()
    for i in range(COMMANDS_KEPT + 5):
        status = decide(status, command(CommandKind.HOLD, f"h{i}", reason="r")).status
    assert len(status.commands) == COMMANDS_KEPT
    assert status.commands[0].request_id == "h5"


# --- the state machine -------------------------------------------------------------------

POLICY = retries.effective(node=None, run=None)


@pytest.mark.parametrize("state", list(SlotState))
def test_illegal_transitions_raise(state: SlotState) -> None:
    status = SlotStatus(state=state, launch_spec=f.PINNED, worker_class="cpu")
    calls = {
        "deps_met": (lambda: transitions.deps_met(status, worker_class="c", launch_spec=f.PINNED,
                                                  now=f.T0), {SlotState.PENDING}),
        "start_claim": (lambda: transitions.start_claim(status, slot=f.SLOT, now=f.T0),
                        {SlotState.READY, SlotState.RETRY_WAIT}),
        "reopen": (lambda: transitions.reopen(status, worker_class="c", launch_spec=f.PINNED,
                                              owner_actor=None, message="m", now=f.T0),
                   {SlotState.RETRY_WAIT}),
        "fail": (lambda: transitions.fail(status, reason="DeadlineExceeded", message="m",
                                          now=f.T0), transitions.OPEN_STATES),
    }
    for call, allowed in calls.values():
        if state in allowed:
            call()
        else:
            with pytest.raises(transitions.IllegalTransition, match=str(state)):
                call()
    if state is not SlotState.ACTIVE:
        with pytest.raises(transitions.IllegalTransition):
            transitions.end_attempt(status, outcome=Outcome.FAILED, message="m", exit_code=1,
                                    policy=POLICY, now=f.T0)
    if state is not SlotState.CLAIMING:
        with pytest.raises(transitions.IllegalTransition):
            transitions.finish_claim(status, now=f.T0)
        with pytest.raises(transitions.IllegalTransition):
            transitions.fail_claim(status, message="m", policy=POLICY, now=f.T0)


def test_claim_needs_a_free_slot_and_a_spec() -> None:
    busy = f.retry_wait().model_copy(update={"active_worker": "x"})
    with pytest.raises(transitions.IllegalTransition, match="already pending or active"):
        transitions.start_claim(busy, slot=f.SLOT, now=f.T0)
    bare = SlotStatus(state=SlotState.READY)
    with pytest.raises(transitions.IllegalTransition, match="no launch spec"):
        transitions.start_claim(bare, slot=f.SLOT, now=f.T0)
    assert not transitions.is_claimable(bare, now=f.T0, claim_policy="Automatic")


def test_claimable_after_retry_time() -> None:
    waiting = f.retry_wait(retry_at=f.T0 + f.seconds(10))
    assert not transitions.is_claimable(waiting, now=f.T0, claim_policy="Automatic")
    assert transitions.is_claimable(waiting, now=f.T0 + f.seconds(10), claim_policy="Automatic")
    pending = waiting.model_copy(update={"pending_worker": "p"})
    assert not transitions.is_claimable(pending, now=f.T0 + f.seconds(10),
                                        claim_policy="Automatic")
    for state in (SlotState.PENDING, SlotState.ACTIVE, SlotState.SUCCEEDED):
        other = waiting.model_copy(update={"state": state})
        assert not transitions.is_claimable(other, now=f.T0 + f.seconds(99),
                                            claim_policy="Automatic")


def test_success_and_deadline() -> None:
    active = transitions.finish_claim(transitions.start_claim(
        f.retry_wait(retry_at=f.T0), slot=f.SLOT, now=f.T0), now=f.T0)
    done = transitions.end_attempt(active, outcome=Outcome.SUCCEEDED, message="ok", exit_code=0,
                                   policy=POLICY, now=f.T0)
    assert done.state is SlotState.SUCCEEDED and done.prior_worker == f"{f.SLOT}-2"
    assert transitions.conditions.is_true(done.conditions, transitions.SUCCEEDED)
    failed = transitions.fail(f.retry_wait(), reason="DependencyFailed", message="dep x failed",
                              now=f.T0)
    assert failed.state is SlotState.FAILED and failed.attempts == f.retry_wait().attempts
