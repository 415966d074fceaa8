"""The exact words a person reads: verdicts, ledger messages, Events, and what a decision returns.

"...with the failed predicate named in words a person can act on"
(docs/design/commands-and-trust.md).
The wording is part of the interface, so it is pinned here whole.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from agentrun.api.slots import CommandKind, Outcome, Predicate, SlotState, SlotStatus
from agentrun.core.attempts import ending
from agentrun.core.attempts.observations import LeaseStatus, PodPhase, PodView
from agentrun.core.base import events
from agentrun.core.commands import guards
from agentrun.core.launchspecs import launchpins
from agentrun.core.machine import transitions
from tests.unit.core import corefakes as f

S = f.SLOT
FENCE = "deleting the pod to fence the attempt"
VERDICTS = [
    ("Pending", "Expired", True, f"the lease is expired but the pod is still Pending: {FENCE}"),
    ("Running", "Missing", True, f"the lease is missing but the pod is still Running: {FENCE}"),
    ("Running", "Released", True,
     "the lease is released but the pod is still Running: waiting for the pod to finish"),
    ("Failed", "Held", True, "the lease is held; the pod is Failed"),
    ("Unknown", "Expired", True,
     "the pod is Unknown (being deleted, or on a lost node): waiting until it is gone"),
    ("Terminating", "Missing", True,
     "the pod is Terminating (being deleted, or on a lost node): waiting until it is gone"),
    ("Failed", "Expired", True, "the pod Failed with exit code 7; the lease is expired"),
    ("Succeeded", "Released", True, "the pod Succeeded with exit code 7; the lease is released"),
    ("Gone", "Missing", True, "the pod was deleted or lost; the lease is missing"),
    ("Gone", "Expired", False, "the worker never renewed its lease within the start deadline"),
    ("Succeeded", "Expired", False, "the pod Succeeded with exit code 7; the lease is expired"),
]


@pytest.mark.parametrize(("pod", "lease", "renewed", "message"), VERDICTS)
def test_verdict_messages(pod: str, lease: str, renewed: bool, message: str) -> None:
    exit_code = None if pod == "Gone" else 7
    verdict = ending.judge(pod=PodView(phase=PodPhase(pod), exit_code=exit_code),
                             lease=LeaseStatus(lease), renewed=renewed)
    assert verdict.message == message


def test_exit_code_omitted_when_unknown() -> None:
    verdict = ending.judge(pod=PodView(phase=PodPhase.FAILED), lease=LeaseStatus.MISSING,
                             renewed=True)
    assert verdict.message == "the pod Failed; the lease is missing"
    assert verdict == ending.Verdict(ended=True, outcome=Outcome.FAILED, delete_pod=False,
                                       exit_code=None, message=verdict.message)


GPU = f.launch_spec("gpu-spec", classes=["gpu"])
TPU = f.launch_spec("tpu-x", classes=["tpu"], runs=["x"])
TERMINAL = guards.Prior(pod=PodPhase.FAILED, lease=LeaseStatus.RELEASED)
REJECTIONS = [
    ({"tenant": "globex"}, Predicate.WRONG_TENANT,
     f"the command names tenant 'globex' but slot '{S}' belongs to tenant 'acme' "
     "(its namespace's)"),
    ({"run": "other"}, Predicate.WRONG_RUN,
     f"the command names run 'other' but slot '{S}' belongs to run 'research-1'; set "
     "agentrun.dev/reassign-run to the slot's run"),
    ({"state": SlotState.ACTIVE}, Predicate.NOT_RETRY_WAIT,
     f"slot '{S}' is Active, not RetryWait: only a slot whose last attempt ended can be "
     "reassigned"),
    ({"held": True}, Predicate.HELD,
     f"slot '{S}' is held; release it (agentrun.dev/release-id) first"),
    ({"prior": guards.Prior(pod=PodPhase.RUNNING, lease=LeaseStatus.HELD)},
     Predicate.PRIOR_NOT_TERMINAL,
     f"the prior attempt '{S}-1' is not terminal (pod Running, lease Held); wait until its "
     "pod has finished and its lease is released or expired"),
    ({"prior": None}, Predicate.PRIOR_NOT_TERMINAL,
     f"the prior attempt '{S}-1' is not terminal (not observed); wait until its pod has "
     "finished and its lease is released or expired"),
    ({"reason": ""}, Predicate.BLANK_REASON,
     "the reason (agentrun.dev/reassign-reason) must be non-blank and at most 1024 bytes"),
    ({"owner": "bob"}, Predicate.NOT_OWNER,
     "the prior attempt is owned by 'bob', not 'alice'; only the owner, or an admin with the "
     "'override' verb on slots, may reassign it"),
    ({"worker_class": "zzz"}, Predicate.UNKNOWN_WORKER_CLASS,
     "no LaunchSpec in namespace 'team-a' lists worker class 'zzz'; check the class name or "
     "add it to a LaunchSpec's spec.claim.workerClasses"),
    ({"worker_class": "tpu"}, Predicate.NO_COMPATIBLE_LAUNCH_SPEC,
     "LaunchSpecs list worker class 'tpu' (tpu-x) but none has run 'research-1' and node "
     "'review-sources' in its scope; widen a spec's spec.scope"),
]


def reassign(**kw: object) -> tuple[SlotStatus, guards.Decision]:
    status = f.retry_wait(owner=kw.pop("owner", f.CREATOR))  # type: ignore[arg-type]
    if "state" in kw:
        status = status.model_copy(update={"state": kw.pop("state")})
    if kw.pop("held", False):
        status = transitions.hold(status, reason="x", now=f.T0)
    prior = kw.pop("prior", TERMINAL)
    fields: dict[str, object] = {"reason": "evicted", "worker_class": "gpu", "run": f.RUN}
    fields.update(kw)
    command = guards.Command(kind=CommandKind.REASSIGN, request_id="r1", actor="alice",
                             **fields)  # type: ignore[arg-type]
    decision = guards.decide(command=command, slot=f.slot(status), tenant=f.TENANT,
                             prior=prior, launch_specs=[GPU, TPU], now=f.T0)  # type: ignore[arg-type]
    return status, decision


@pytest.mark.parametrize(("change", "predicate", "message"), REJECTIONS)
def test_rejection_messages(change: dict[str, object], predicate: Predicate,
                            message: str) -> None:
    _, decision = reassign(**change)
    entry = decision.status.commands[-1]
    assert (decision.accepted, decision.duplicate, decision.predicate) == (False, False, predicate)
    assert (entry.outcome, entry.predicate, entry.message) == ("Rejected", predicate, message)
    assert decision.event == events.Event(
        type="Warning", reason="CommandRejected",
        message=f"Reassign r1 rejected ({predicate}): {message}")
    rejected = next(c for c in decision.status.conditions if c.type == "CommandRejected")
    assert (rejected.status, rejected.reason, rejected.message) == (
        "True", str(predicate), f"Reassign r1: {message}")
    assert decision.choice is None


def test_acceptance_record_and_event() -> None:
    _, decision = reassign(tenant=f.TENANT)
    message = ("reassigned by alice to worker class 'gpu' (LaunchSpec 'gpu-spec' lists worker "
               "class 'gpu'; its scope covers every run and node, priority 0); reason: "
               "evicted; the next claim creates attempt 2")
    assert (decision.accepted, decision.duplicate, decision.predicate) == (True, False, None)
    assert decision.event == events.Event(type="Normal", reason="Reassigned", message=message)
    entry = decision.status.commands[-1]
    assert entry.model_dump() == {
        "request_id": "r1", "kind": CommandKind.REASSIGN, "actor": "alice", "reason": "evicted",
        "worker_class": "gpu", "run": f.RUN, "override": None, "outcome": "Accepted",
        "predicate": None, "message": message, "time": f.T0}
    reopened = next(c for c in decision.status.conditions if c.type == "Reopened")
    assert (reopened.status, reopened.reason, reopened.message) == ("True", "Reassigned", message)
    assert decision.choice is not None and decision.choice.spec is GPU


def test_reassignment_without_a_class_keeps_the_current_one() -> None:
    status = f.retry_wait().model_copy(update={"worker_class": "gpu"})
    command = guards.Command(kind=CommandKind.REASSIGN, request_id="r1", actor="alice",
                             reason="again", run=f.RUN)
    decision = guards.decide(command=command, slot=f.slot(status), tenant=f.TENANT,
                               prior=TERMINAL, launch_specs=[GPU], now=f.T0)
    assert decision.accepted and decision.status.worker_class == "gpu"


def test_digest_and_pin() -> None:
    canonical = json.dumps(GPU.spec.wire(), sort_keys=True, separators=(",", ":"))
    assert launchpins.digest(GPU.spec) == hashlib.sha256(canonical.encode()).hexdigest()
    assert canonical.startswith('{"claim":{"workerClasses":["gpu"]},"lease":')
    from agentrun.core.launchspecs import selection
    pinned = launchpins.pin(run=f.RUN, choice=selection.Choice(spec=GPU, reason="why"))
    assert (pinned.name, pinned.uid, pinned.generation, pinned.reason) == (
        "gpu-spec", "uid-gpu-spec", 1, "why")
    bare = GPU.model_copy(update={"metadata": GPU.metadata.model_copy(
        update={"uid": None, "generation": None})})
    pinned = launchpins.pin(run=f.RUN, choice=selection.Choice(spec=bare, reason="why"))
    assert (pinned.uid, pinned.generation) == ("", 0)
    assert pinned.snapshot == f"{f.RUN}-lspec-{pinned.digest[:10]}"  # the run's, one per digest


def other(status: SlotStatus, kind: CommandKind, rid: str = "c1",
          **kw: object) -> guards.Decision:
    command = guards.Command(kind=kind, request_id=rid, actor=kw.pop("actor", "alice"),  # type: ignore[arg-type]
                             **kw)  # type: ignore[arg-type]
    return guards.decide(command=command, slot=f.slot(status), tenant=f.TENANT, prior=TERMINAL,
                         launch_specs=[GPU], now=f.T0 + f.seconds(100))


def test_claim_command_words() -> None:
    waiting = f.retry_wait(retry_at=f.T0 + f.seconds(100))
    decision = other(waiting, CommandKind.CLAIM, actor="carol", tenant=f.TENANT)
    assert (decision.accepted, decision.predicate) == (True, None)
    assert decision.event == events.Event(type="Normal", reason="Claimed",
                                          message="claim requested by carol: attempt 2 is next")
    assert decision.status.next_owner_actor == "carol"
    held = transitions.hold(waiting, reason="x", now=f.T0)
    refused = other(held, CommandKind.CLAIM)
    assert refused.status.commands[-1].message == (
        f"slot '{S}' is RetryWait and held: a claim needs a Ready slot, or a RetryWait slot "
        "that was reassigned, answered or whose retry time has come")
    early = other(f.retry_wait(retry_at=f.T0 + f.seconds(101)), CommandKind.CLAIM)
    assert early.status.commands[-1].message == (
        f"slot '{S}' is RetryWait: a claim needs a Ready slot, or a RetryWait slot "
        "that was reassigned, answered or whose retry time has come")


def test_hold_release_words() -> None:
    held = other(f.retry_wait(), CommandKind.HOLD, reason="investigate", tenant=f.TENANT)
    assert (held.accepted, held.predicate) == (True, None)
    assert held.event == events.Event(type="Normal", reason="Held",
                                      message="held by alice: investigate")
    condition = next(c for c in held.status.conditions if c.type == "Held")
    assert (condition.status, condition.message) == ("True", "held by alice: investigate")
    released = other(held.status, CommandKind.RELEASE, "c2")
    assert (released.accepted, released.predicate) == (True, None)
    assert released.event == events.Event(type="Normal", reason="Released",
                                          message="released by alice")
    again = other(released.status, CommandKind.RELEASE, "c3")
    assert (again.accepted, again.predicate) == (False, Predicate.NOT_HELD)
    assert again.status.commands[-1].message == (
        f"slot '{S}' is not held: there is nothing to release")
    assert [c for c in again.status.conditions if c.type == "Held"] == [
        c for c in released.status.conditions if c.type == "Held"]
    blank = other(f.retry_wait(), CommandKind.HOLD, reason=" ")
    assert blank.status.commands[-1].message == (
        "the reason must be non-blank and at most 1024 bytes")


def test_give_up_words() -> None:
    decision = other(f.retry_wait(), CommandKind.GIVE_UP, reason="stop")
    assert decision.event == events.Event(type="Normal", reason="GaveUp",
                                          message="given up by alice: stop")
    assert (decision.accepted, decision.predicate) == (True, None)
    failed = next(c for c in decision.status.conditions if c.type == "Succeeded")
    assert (failed.status, failed.reason) == ("False", "GaveUp")
    again = other(decision.status, CommandKind.GIVE_UP, "c2", reason="stop")
    assert again.status.commands[-1].message == (
        f"slot '{S}' has already finished (Failed); nothing to give up")
    owned = other(f.retry_wait(owner="bob"), CommandKind.GIVE_UP, reason="stop")
    assert owned.status.commands[-1].message == (
        "the attempt is owned by 'bob', not 'alice'; only the owner, or an admin with the "
        "'override' verb on slots, may give up")


def test_duplicates_return_the_status_unchanged() -> None:
    for kind in CommandKind:
        status = other(f.retry_wait(), CommandKind.HOLD, "dup", reason="r").status
        decision = other(status, kind, "dup", reason="r", run=f.RUN, worker_class="gpu")
        assert decision == guards.Decision(accepted=False, duplicate=True,
                                           predicate=Predicate.DUPLICATE, status=status)
