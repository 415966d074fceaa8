"""Unresolved effects in the core: observed, shown, holding claims, resolved.

Covers, each by the exact step and its content:
- a ``.unresolved`` record on the prior attempt's Lease: one status write (point
  ``effect-unresolved``) with the entry in ``status.effects``, condition EffectUnresolved
  True (OwnerAnswerUnknown, or NoReconcile) naming effect, key, idempotency key, owner and
  the resolve-effect command, and a Warning Event; seen again, nothing new; a record that
  is not an effect's (a step result, a bad key, another attempt's) is not observed; at most
  EFFECTS_KEPT entries, resolved ones of earlier attempts dropped first;
- while one is open: no automatic claim (a Wait naming the command), a claim command
  rejected EffectUnresolved, a reassignment accepted with the condition still True;
- resolve-effect, exhaustively over state x actor x override x reason x key x outcome
  against an oracle of the predicate order (NotRetryWait, BlankReason, NotOwner,
  Malformed, NoUnresolvedEffect); out-of-bound values Malformed (BlankReason for the
  reason); a result too large once encoded, or nested deeper than its record may hold
  (just under the bound: decodable); a replayed id is a duplicate;
- accepted: the entry resolved with outcome, reason, actor; condition False (Resolved),
  Event EffectResolved; the annotations removed; then the automatic claim's Lease carries
  ``<key>.resolved`` of the new attempt, decodable by the one record decoder, with the
  answer, the result (JSON when it parses), reason, actor and the unresolved attempt.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from agentrun.api import bounds, conditions, names, records
from agentrun.api.slots import (
    CommandKind,
    EffectEntry,
    EffectState,
    Predicate,
    SlotState,
    SlotStatus,
)
from agentrun.core.attempts import effectrecords
from agentrun.core.base.actions import Create, RemoveCommand, Wait, WriteStatus
from agentrun.core.commands import guards, parsing
from agentrun.core.slots import steps
from agentrun.core.slots.inputs import World
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect

IDEM = "f" * 64
CONDITION = names.EFFECT_UNRESOLVED_CONDITION


def unresolved_record(*, attempt: int = 1, key: str = "publish", cause: str = "owner-"
                      "answered-unknown", kind: records.Kind = records.Kind.DECISION,
                      suffix: str = ".unresolved") -> tuple[str, str]:
    payload = {"effect": "publish-report", "idempotencyKey": IDEM, "owner": "publisher",
               "cause": cause, "reason": "the owner answered unknown"}
    data = records.canonical(payload)
    record = records.Record(attempt=attempt, digest=records.digest(data), inline=payload,
                            key=f"{key}{suffix}", kind=kind, size=len(data))
    return record.annotation, records.encode(record)


def lease_with(*found: tuple[str, str], number: int = 1) -> dict[str, Any]:
    lease = f.lease(number, outcome="Failed")
    lease["metadata"]["annotations"].update(dict(found))
    return lease


def failed_world(status: SlotStatus, *found: tuple[str, str], **kwargs: Any) -> World:
    return f.world(status, attempt=f.objects(1, pod=f.pod(1, "Failed"),
                                             lease=lease_with(*found)), **kwargs)


def open_status(*, owner: str | None = "alice", state: SlotState = SlotState.RETRY_WAIT
                ) -> SlotStatus:
    status = f.retry_wait(retry_at=f.T0, owner=owner)
    step = expect(steps.next_step(failed_world(status, unresolved_record())), WriteStatus)
    return step.status.model_copy(update={"state": state})


def test_an_unresolved_record_is_shown_once_with_what_to_do() -> None:
    world = failed_world(f.retry_wait(retry_at=f.T0, owner="alice"), unresolved_record())
    step = expect(steps.next_step(world), WriteStatus)
    assert step.point == "effect-unresolved"
    [entry] = step.status.effects
    assert (entry.key, entry.attempt, entry.effect, entry.owner, entry.idempotency_key,
            entry.state) == ("publish", 1, "publish-report", "publisher", IDEM,
                             EffectState.UNRESOLVED)
    found = f.condition(step.status, CONDITION)
    assert (found.status, found.reason) == ("True", "OwnerAnswerUnknown")
    for text in ("publish-report", "record key publish", IDEM, "owner publisher",
                 f"{names.RESOLVE_EFFECT_KEY}=publish", names.RESOLVE_EFFECT_OUTCOME,
                 "a reassignment alone does not clear it"):
        assert text in found.message, text
    assert step.event is not None and (step.event.type, step.event.reason) == (
        "Warning", "EffectUnresolved")
    again = failed_world(step.status, unresolved_record())
    waited = expect(steps.next_step(again), Wait)  # Automatic, backoff over: no claim
    assert "unresolved effect (record key publish)" in waited.message


def test_no_reconcile_is_its_own_reason() -> None:
    world = failed_world(f.retry_wait(retry_at=f.T0), unresolved_record(cause="no-reconcile"))
    step = expect(steps.next_step(world), WriteStatus)
    assert f.condition(step.status, CONDITION).reason == "NoReconcile"


@pytest.mark.parametrize("record", [
    unresolved_record(kind=records.Kind.STEP_RESULT),
    unresolved_record(suffix=".intent", kind=records.Kind.EFFECT_INTENT),
    unresolved_record(key="bad.key"),
    unresolved_record(attempt=2),  # names another attempt than the Lease's: not decoded
], ids=["step-result", "intent", "bad-key", "other-attempt"])
def test_records_that_are_not_an_unresolved_effect_are_not_observed(
        record: tuple[str, str]) -> None:
    step = steps.next_step(failed_world(f.retry_wait(retry_at=f.T0), record))
    assert expect(step, Create).point == "claim-lease"  # the claim goes on as before


def test_the_list_is_bounded_and_drops_old_resolved_entries_first() -> None:
    old = [EffectEntry(key=f"old-{n}", attempt=1, observed_at=f.T0,
                       state=EffectState.RESOLVED, outcome="applied")
           for n in range(bounds.EFFECTS_KEPT)]
    status = f.retry_wait(retry_at=f.T0, attempts_used=2).model_copy(update={"effects": old})
    lease = lease_with(*(unresolved_record(attempt=2, key=f"new-{n}")
                         for n in range(bounds.EFFECTS_KEPT + 3)), number=2)
    new, found = effectrecords.observed(status, lease=lease, slot=f.SLOT, now=f.T0)
    assert len(found) == bounds.EFFECTS_KEPT == len(new.effects)
    assert all(e.key.startswith("new-") and e.attempt == 2 for e in new.effects)
    assert "7 more open" in f.condition(new, CONDITION).message


def test_an_open_effect_holds_claims_but_not_a_reassignment() -> None:
    status = open_status()
    claim = f.world(status, annotations=f.command("claim"),
                    attempt=f.objects(1, pod=f.pod(1, "Failed"), lease=lease_with()))
    rejected = expect(steps.next_step(claim), WriteStatus)
    entry = rejected.status.commands[-1]
    assert (entry.outcome, entry.predicate) == ("Rejected", Predicate.EFFECT_UNRESOLVED)
    assert "resolve-effect-key=publish" in entry.message
    reassign = f.world(status, annotations=f.command(
        "reassign", reason="try again", run=f.RUN, worker_class="cpu"),
        attempt=f.objects(1, pod=f.pod(1, "Failed"), lease=lease_with()),
        snapshots=frozenset({f.PINNED_RUN_SNAPSHOT}))
    accepted = expect(steps.next_step(reassign), WriteStatus)
    assert accepted.status.commands[-1].outcome == "Accepted"
    assert f.condition(accepted.status, CONDITION).status == "True"
    assert accepted.status.effects == status.effects
    after = f.world(accepted.status, attempt=f.objects(1, pod=f.pod(1, "Failed"),
                                                       lease=lease_with()))
    assert "unresolved effect" in expect(steps.next_step(after), Wait).message


def resolve(status: SlotStatus, *, actor: str | None = "alice", override: bool = False,
            reason: str | None = "the owner says it went out", key: str | None = "publish",
            outcome: str | None = "applied", result: str | None = None,
            request_id: str = "r-1") -> guards.Decision:
    command = guards.Command(kind=CommandKind.RESOLVE_EFFECT, request_id=request_id,
                             actor=actor, override=override, reason=reason, effect_key=key,
                             outcome=outcome, result=result)
    return guards.decide(command=command, slot=f.slot(status), tenant=f.TENANT, prior=None,
                         launch_specs=(f.CPU_SPEC,), now=f.T0)


STATES = list(SlotState)
CASES = list(itertools.product(STATES, ["alice", "bob"], [False, True], ["why", " ", None],
                               ["publish", "other", None], ["applied", "not-applied", None]))


@pytest.mark.parametrize(("state", "actor", "override", "reason", "key", "outcome"), CASES)
def test_resolve_effect_predicates_in_order(state: SlotState, actor: str, override: bool,
                                            reason: str | None, key: str | None,
                                            outcome: str | None) -> None:
    status = open_status(state=state)
    decision = resolve(status, actor=actor, override=override, reason=reason, key=key,
                       outcome=outcome)
    if state in (SlotState.SUCCEEDED, SlotState.FAILED):
        expected: Predicate | None = Predicate.NOT_RETRY_WAIT
    elif reason is None or not reason.strip():
        expected = Predicate.BLANK_REASON
    elif actor != "alice" and not override:
        expected = Predicate.NOT_OWNER
    elif key is None or outcome is None:
        expected = Predicate.MALFORMED
    elif key != "publish":
        expected = Predicate.NO_UNRESOLVED_EFFECT
    else:
        expected = None
    assert decision.predicate is expected
    assert decision.accepted is (expected is None)
    if expected is not None:
        assert decision.status.effects == status.effects  # nothing else changes
        assert decision.status.commands[-1].outcome == "Rejected"
        rejected = f.condition(decision.status, "CommandRejected")
        assert rejected.reason == str(expected)
    else:
        [entry] = decision.status.effects
        assert (entry.state, entry.outcome, entry.actor, entry.resolution) == (
            EffectState.RESOLVED, outcome, actor, reason)
        assert decision.status.commands[-1].override is (True if actor != "alice" else None)


def test_accepted_clears_the_condition_and_the_next_claim_carries_the_answer() -> None:
    status = open_status()
    decision = resolve(status, result='{"url": "https://example.invalid/r/1"}')
    assert decision.event is not None and decision.event.reason == "EffectResolved"
    found = f.condition(decision.status, CONDITION)
    assert (found.status, found.reason) == ("False", "Resolved")
    assert "resolved applied by alice" in found.message
    world = f.world(decision.status, attempt=f.objects(1, pod=f.pod(1, "Failed"),
                                                       lease=lease_with()))
    create = expect(steps.next_step(world), Create)
    assert create.point == "claim-lease" and create.body["metadata"]["name"] == f.worker(2)
    decoded, problems = records.on_lease(create.body)
    assert problems == []
    record = decoded["publish.resolved"]
    assert (record.attempt, record.kind) == (2, records.Kind.DECISION)
    assert record.inline == {"answer": "applied",
                             "result": {"url": "https://example.invalid/r/1"},
                             "reason": "the owner says it went out", "actor": "alice",
                             "unresolvedAttempt": 1}


def test_a_plain_text_result_and_not_applied() -> None:
    applied = resolve(open_status(), result="report 7 published")
    payload = effectrecords.resolved_payload(applied.status.effects[0])
    assert payload["result"] == "report 7 published"
    dropped = resolve(open_status(), outcome="not-applied", result="ignored")
    payload = effectrecords.resolved_payload(dropped.status.effects[0])
    assert (payload["answer"], payload["result"]) == ("not-applied", None)


def test_texts_give_way_so_the_answer_stays_inline() -> None:
    decision = resolve(open_status(), actor="alice", reason="\x01" * bounds.REASON_BYTES,
                       result="r" * bounds.RESOLVE_RESULT_BYTES)
    payload = effectrecords.resolved_payload(decision.status.effects[0])
    assert payload["result"] == "r" * bounds.RESOLVE_RESULT_BYTES
    assert len(records.canonical(payload)) <= bounds.INLINE_PAYLOAD_BYTES
    [value] = effectrecords.resolved_annotations(decision.status, attempt=2).values()
    assert len(value.encode()) <= bounds.RECORD_BYTES


def test_a_result_too_large_once_encoded_is_malformed() -> None:
    decision = resolve(open_status(), result='"' * bounds.RESOLVE_RESULT_BYTES)
    assert decision.predicate is Predicate.MALFORMED
    assert names.RESOLVE_EFFECT_RESULT in decision.status.commands[-1].message


@pytest.mark.parametrize("depth", [63, 64, 256])
def test_a_result_nested_deeper_than_a_record_holds_is_malformed(depth: int) -> None:
    result = "[" * depth + "]" * depth  # 256 deep is 512 bytes: RESOLVE_RESULT_BYTES
    decision = resolve(open_status(), result=result)
    if depth < bounds.PAYLOAD_DEPTH:  # the record's payload wraps the result once
        [value] = effectrecords.resolved_annotations(decision.status, attempt=2).values()
        assert records.decode(annotation=f"{records.PREFIX}publish.resolved", value=value,
                              attempt=2).inline["result"] == json.loads(result)
        return
    assert decision.predicate is Predicate.MALFORMED
    assert f"at most {bounds.PAYLOAD_DEPTH} levels" in decision.status.commands[-1].message
    assert decision.status.effects == open_status().effects


@pytest.mark.parametrize(("fields", "predicate"), [
    ({"key": "publish", "outcome": "maybe", "reason": "x"}, Predicate.MALFORMED),
    ({"key": "Pub.lish", "outcome": "applied", "reason": "x"}, Predicate.MALFORMED),
    ({"key": "k" * 49, "outcome": "applied", "reason": "x"}, Predicate.MALFORMED),
    ({"key": "publish", "outcome": "applied", "reason": "x",
      "result": "r" * (bounds.RESOLVE_RESULT_BYTES + 1)}, Predicate.MALFORMED),
    ({"key": "publish", "outcome": "applied", "reason": "x" * 2000}, Predicate.BLANK_REASON),
    ({"key": "publish", "outcome": "applied", "reason": "   "}, Predicate.BLANK_REASON),
    ({"outcome": "applied", "reason": "x"}, Predicate.MALFORMED),
])
def test_out_of_bound_commands_are_rejected_and_change_nothing(
        fields: dict[str, str], predicate: Predicate) -> None:
    status = open_status()
    world = f.world(status, annotations=f.command("resolve-effect", **fields),
                    attempt=f.objects(1, pod=f.pod(1, "Failed"), lease=lease_with()))
    step = expect(steps.next_step(world), WriteStatus)
    assert step.status.commands[-1].predicate is predicate
    assert step.status.effects == status.effects
    assert conditions.is_true(step.status.conditions, CONDITION)


def test_the_command_shape_is_read_stamped_and_removed() -> None:
    status = open_status()
    annotations = {**f.command("resolve-effect", key="publish", outcome="not-applied",
                               reason="they have no trace of it"),
                   names.RESOLVE_EFFECT_OVERRIDE: "false"}
    pending = parsing.pending(annotations)
    assert pending is not None and pending.malformed is None
    assert (pending.command.kind, pending.command.effect_key, pending.command.outcome) == (
        CommandKind.RESOLVE_EFFECT, "publish", "not-applied")
    world = f.world(status, annotations=annotations,
                    attempt=f.objects(1, pod=f.pod(1, "Failed"), lease=lease_with()))
    step = expect(steps.next_step(world), WriteStatus)
    assert step.status.commands[-1].outcome == "Accepted"
    stored = World(**{**world.__dict__, "slot": world.slot.model_copy(
        update={"status": step.status})})
    removed = expect(steps.next_step(stored), RemoveCommand)
    assert set(removed.keys) == set(annotations)
    replay = resolve(step.status, request_id="req-1")
    assert replay.duplicate and replay.predicate is Predicate.DUPLICATE


def test_the_stamping_policy_and_the_command_policy_cover_resolve_effect() -> None:
    from agentrun.core.policies import admission, validating

    shape = next(s for s in parsing.SHAPES if s.kind is CommandKind.RESOLVE_EFFECT)
    assert shape.override == names.RESOLVE_EFFECT_OVERRIDE
    mutations = json.dumps(admission.stamp_policy_spec()["mutations"])
    assert "resolve-effect-actor" in mutations and "resolve-effect-override" in mutations
    checks = json.dumps(validating.slot_commands())
    assert "variables.resolveeffect ||" in checks and "not-applied" in checks
