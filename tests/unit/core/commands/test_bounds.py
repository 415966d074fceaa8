"""Bounded state: what a person writes cannot grow a Slot, break a reconcile, or overflow.

Covers:
- the worst-case Slot status (every list at its cap, every text at its bound, written in
  the characters JSON escapes most) fits ``bounds.SLOT_STATUS_BYTES``, and that bound
  leaves room under the API server's object limit with 256 KiB of annotations;
- a slot driven through the core by a stream of worst-case commands (200 KiB values,
  control characters, every kind, more than the ledger keeps) stays under the bound, with
  every stored value clipped, and a ledger entry for each command;
- a garbage command on an Active slot whose pod has Failed: the attempt still ends first;
- a command the guard cannot decide is rejected into the ledger, never raised;
- the attempt-number cap rejects a reassignment and a claim command;
- hypothesis at each numeric bound: the run's deadline, the retry time, lease expiry and
  the start deadline stay within ``datetime`` and int64 nanoseconds.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrun.api import bounds, conditions, names
from agentrun.api.conditions import MAX_CONDITIONS
from agentrun.api.launchspecs import LaunchSpecSpec
from agentrun.api.modelusage import MAX_COST_MICROS, MAX_TOKENS, ModelUsage
from agentrun.api.policies import Backoff
from agentrun.api.slots import (
    ATTEMPTS_KEPT,
    COMMANDS_KEPT,
    AttemptRecord,
    CommandKind,
    CommandRecord,
    EffectEntry,
    EffectState,
    Outcome,
    PinnedLaunchSpec,
    Predicate,
    QuestionEntry,
    QuestionState,
    Slot,
    SlotState,
    SlotStatus,
)
from agentrun.core.attempts import observations
from agentrun.core.base.actions import RemoveCommand, WriteStatus
from agentrun.core.commands import guards, parsing
from agentrun.core.machine import retries
from agentrun.core.slots import inputs, steps
from agentrun.core.slots.inputs import World
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect

API_OBJECT_LIMIT = 1536 * 1024  # etcd's default request limit, what an object must stay under
ANNOTATIONS_LIMIT = 256 * 1024
WORST_CHAR = "\x01"  # JSON writes it as \u0001: six bytes for one character


def size(status: SlotStatus) -> int:
    return len(json.dumps(status.wire(), ensure_ascii=True, separators=(",", ":")))


def text(n: int) -> str:
    return WORST_CHAR * n


def worst_case_status() -> SlotStatus:
    """Every list at its cap and every field at its bound, in the costliest characters."""
    long_name = "n" * 253
    short = "s" * names.MAX_NAME
    pinned = PinnedLaunchSpec(name=long_name, uid="u" * 63, generation=2**63 - 1,
                              digest="0" * 64, snapshot=long_name,
                              reason=text(bounds.RECORD_MESSAGE_CHARS))
    moment = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    usage = ModelUsage(input_tokens=MAX_TOKENS, output_tokens=MAX_TOKENS,
                       cost_micros=MAX_COST_MICROS, currency="USD", saturated=True)
    attempt = AttemptRecord(number=bounds.MAX_ATTEMPT_NUMBER, pod=short, lease=short,
                            pod_uid=short, worker_class=short, launch_spec="l" * 300,
                            owner_actor=text(bounds.ACTOR_CHARS), started_at=moment,
                            ended_at=moment, outcome=Outcome.START_TIMEOUT,
                            reason=text(bounds.RECORD_MESSAGE_CHARS), exit_code=-(2**31),
                            usage=usage)
    command = CommandRecord(request_id="r" * bounds.REQUEST_ID_CHARS, kind=CommandKind.REASSIGN,
                            actor=text(bounds.ACTOR_CHARS), reason=text(bounds.REASON_BYTES),
                            worker_class=short, run=short, outcome="Rejected",
                            predicate=Predicate.NO_COMPATIBLE_LAUNCH_SPEC,
                            message=text(bounds.RECORD_MESSAGE_CHARS), time=moment)
    condition = conditions.Condition(type="t" * 316, status="Unknown", reason="R" * 1024,
                                     message=text(bounds.MESSAGE_CHARS),
                                     observed_generation=2**63 - 1,
                                     last_transition_time=moment)
    return SlotStatus(
        state=SlotState.RETRY_WAIT, worker_class=short, launch_spec=pinned,
        pending_worker=short, active_worker=short, prior_worker=short,
        attempts=[attempt] * ATTEMPTS_KEPT, attempt_count=bounds.MAX_ATTEMPT_NUMBER, usage=usage,
        retry_at=moment, next_owner_actor=text(bounds.ACTOR_CHARS),
        commands=[command] * COMMANDS_KEPT,
        conditions=[condition.model_copy(update={"type": f"{i:03d}" + "t" * 313})
                    for i in range(MAX_CONDITIONS)],
        effects=[EffectEntry(key="k" * bounds.STEP_KEY_CHARS, attempt=bounds.MAX_ATTEMPT_NUMBER,
                             effect=short, idempotency_key="0" * 64, owner=short,
                             reason=text(bounds.RECORD_MESSAGE_CHARS), cause=short,
                             state=EffectState.RESOLVED, observed_at=moment,
                             outcome="not-applied", result=text(bounds.RESOLVE_RESULT_BYTES),
                             resolution=text(bounds.REASON_BYTES),
                             actor=text(bounds.ACTOR_CHARS), resolved_at=moment)]
        * bounds.EFFECTS_KEPT,
        effects_not_shown=bounds.MAX_RECORDS,
        questions=[QuestionEntry(key="k" * bounds.STEP_KEY_CHARS,
                                 attempt=bounds.MAX_ATTEMPT_NUMBER,
                                 question=text(bounds.QUESTION_BYTES),
                                 json_schema=text(bounds.SCHEMA_BYTES), digest="0" * 64,
                                 deadline=moment, on_expiry="default",
                                 default=text(bounds.ANSWER_VALUE_BYTES),
                                 state=QuestionState.ANSWERED, asked_at=moment,
                                 value=text(bounds.ANSWER_VALUE_BYTES),
                                 actor=text(bounds.ACTOR_CHARS), answered_at=moment,
                                 value_from=("c" * 200 + "/" + "k" * 100 + "@sha256:")
                                 .ljust(bounds.VALUE_FROM_CHARS, "0"),
                                 approvers=bounds.MAX_APPROVERS,
                                 approved_by=["0" * bounds.APPROVER_DIGEST_CHARS]
                                 * bounds.MAX_APPROVERS)]
        * bounds.QUESTIONS_KEPT, asked_attempts=bounds.MAX_ATTEMPT_NUMBER,
        observed_generation=2**63 - 1)


def test_the_worst_case_status_fits_its_bound_and_the_object_fits_the_api_server() -> None:
    worst = size(worst_case_status())
    assert worst <= bounds.SLOT_STATUS_BYTES, worst
    # The rest of a Slot: annotations (the API server caps them) and a few KiB of metadata
    # and spec; managedFields name keys, never values.
    assert bounds.SLOT_STATUS_BYTES + ANNOTATIONS_LIMIT + 64 * 1024 < API_OBJECT_LIMIT


def test_an_oversize_stored_status_is_clipped_when_read() -> None:
    """What an older operator stored oversize is trimmed on read, not a failing parse."""
    wire = f.retry_wait().wire()
    wire["commands"] = [{"requestId": "r", "kind": "Hold", "outcome": "Rejected",
                         "reason": "x" * 200_000, "message": "m" * 200_000,
                         "time": "2030-01-01T00:00:00Z"}]
    parsed = SlotStatus.model_validate(wire)
    assert len(parsed.commands[0].reason or "") == bounds.REASON_BYTES
    assert len(parsed.commands[0].message) == bounds.RECORD_MESSAGE_CHARS


HUGE = "x" * 200_000
GARBAGE = {
    "reassign": {"reason": HUGE, "worker_class": HUGE, "run": HUGE, "tenant": HUGE},
    "hold": {"reason": text(200_000)},
    "give-up": {"reason": HUGE},
    "resolve-effect": {"key": HUGE, "outcome": HUGE, "reason": HUGE, "result": HUGE},
    "claim": {},
    "release": {},
}


def apply(world: World, step: object) -> World:
    """The slot after ``step`` as the API server would store it (status round-tripped)."""
    slot = world.slot
    if isinstance(step, WriteStatus):
        stored = SlotStatus.model_validate(json.loads(json.dumps(step.status.wire())))
        slot = slot.model_copy(update={"status": stored})
    elif isinstance(step, RemoveCommand):
        kept = {k: v for k, v in slot.metadata.annotations.items() if k not in step.keys}
        slot = slot.model_copy(update={"metadata": slot.metadata.model_copy(
            update={"annotations": kept})})
    else:
        raise AssertionError(f"unexpected step {step!r}")
    return World(**{**world.__dict__, "slot": slot})


@pytest.mark.parametrize("variant", ["oversize-id", "huge-values", "huge-actor"])
def test_a_stream_of_worst_case_commands_keeps_the_slot_under_its_bound(variant: str) -> None:
    status = f.retry_wait(owner="alice", retry_at=f.T0 + f.seconds(600))
    world = f.world(status, attempt=f.objects(1, pod=f.pod(1, "Failed"),
                                              lease=f.lease(1, outcome="Failed")))
    recorded = 0
    for n in range(COMMANDS_KEPT + 10):
        kind = list(GARBAGE)[n % len(GARBAGE)]
        request_id = f"{HUGE}{n}" if variant == "oversize-id" else f"req-{n}"
        actor = HUGE if variant == "huge-actor" else "alice"
        annotations = f.command(kind, request_id, actor=actor, **GARBAGE[kind])
        world = World(**{**world.__dict__, "slot": world.slot.model_copy(update={
            "metadata": world.slot.metadata.model_copy(update={"annotations": annotations})})})
        for _ in range(4):
            step = steps.next_step(world)
            if not isinstance(step, (WriteStatus, RemoveCommand)):
                break
            world = apply(world, step)
            if isinstance(step, RemoveCommand):
                break
        assert not any(k in world.slot.metadata.annotations for k in annotations), kind
        recorded += 1
        assert size(world.slot.status) <= bounds.SLOT_STATUS_BYTES
    ledger = world.slot.status.commands
    assert len(ledger) == min(recorded, COMMANDS_KEPT)
    for entry in ledger:
        assert len((entry.reason or "").encode()) <= bounds.REASON_BYTES
        assert len(entry.actor or "") <= bounds.ACTOR_CHARS
        assert len(entry.message) <= bounds.RECORD_MESSAGE_CHARS
        if entry.kind in (CommandKind.REASSIGN, CommandKind.HOLD, CommandKind.GIVE_UP,
                          CommandKind.RESOLVE_EFFECT):
            assert entry.outcome == "Rejected"  # every one of them carries garbage
    for condition in world.slot.status.conditions:
        assert len(condition.message) <= bounds.MESSAGE_CHARS


def test_a_garbage_command_never_delays_the_end_of_an_active_attempt() -> None:
    annotations = f.command("reassign", HUGE, actor=HUGE, **GARBAGE["reassign"])
    world = f.world(f.active(1), annotations=annotations, now=f.T0 + f.seconds(30),
                    attempt=f.objects(1, pod=f.pod(1, "Failed", exit_code=2), lease=f.lease(1)))
    step = expect(steps.next_step(world), WriteStatus)
    assert step.point == "attempt-ended"
    assert step.status.attempts[-1].outcome is Outcome.FAILED
    # The next look decides (rejects) the command: nothing is left pending for good.
    after = apply(world, step)
    after = World(**{**after.__dict__, "attempt": f.objects(
        1, pod=f.pod(1, "Failed"), lease=f.lease(1, outcome="Failed"))})
    decided = expect(steps.next_step(after), WriteStatus)
    assert decided.status.commands[-1].predicate is Predicate.MALFORMED


def test_a_command_that_cannot_be_decided_is_rejected_not_raised(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(**_: object) -> guards.Decision:
        raise ValueError("an impossible transition")
    monkeypatch.setattr(guards, "decide", broken)
    world = f.world(f.ready(), annotations=f.command("hold", reason="look"))
    step = expect(steps.next_step(world), WriteStatus)
    entry = step.status.commands[-1]
    assert (entry.predicate, entry.outcome) == (Predicate.MALFORMED, "Rejected")
    assert "could not be decided (an impossible transition)" in entry.message


@pytest.mark.parametrize("kind", ["reassign", "claim"])
def test_the_attempt_number_cap_rejects_more_attempts(kind: str) -> None:
    status = f.retry_wait(owner="alice").model_copy(update={
        "attempt_count": bounds.MAX_ATTEMPT_NUMBER,
        "prior_worker": f.worker(bounds.MAX_ATTEMPT_NUMBER),
        "conditions": conditions.set_condition([], type_="Reopened", status="True",
                                               reason="Reassigned", message="", now=f.T0)})
    fields = {"reason": "again", "worker_class": "cpu", "run": f.RUN} if kind == "reassign" else {}
    prior = f.objects(bounds.MAX_ATTEMPT_NUMBER, pod=None, lease=None)
    world = f.world(status, annotations=f.command(kind, **fields), attempt=prior,
                    run=f.agent_run(claim_policy="Manual"))
    step = expect(steps.next_step(world), WriteStatus)
    assert step.status.commands[-1].predicate is Predicate.ATTEMPT_LIMIT


@pytest.mark.parametrize(("field", "value", "predicate"), [
    ("worker_class", "GPU!", Predicate.MALFORMED),
    ("run", "x" * (bounds.RUN_CHARS + 1), Predicate.MALFORMED),
    ("tenant", "a b", Predicate.MALFORMED),
    ("reason", "é" * 513, Predicate.BLANK_REASON),  # 1026 bytes
])
def test_a_value_out_of_its_bound_is_malformed_when_parsed(field: str, value: str,
                                                           predicate: Predicate) -> None:
    fields = {"reason": "ok", "worker_class": "cpu", "run": f.RUN, field: value}
    pending = parsing.pending(f.command("reassign", **fields))
    assert pending is not None and pending.malformed is not None
    assert pending.predicate is predicate
    assert value not in pending.malformed  # the message names the bound, not the value


# --- arithmetic at the bounds -------------------------------------------------------------

INT64_NS_LIMIT = datetime(2262, 4, 11, tzinfo=UTC)  # int64 nanoseconds since the epoch
NOWS = st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1),
                    timezones=st.just(UTC))


def within(moment: datetime) -> bool:
    return moment < INT64_NS_LIMIT and int(moment.timestamp()) < 2**63


@settings(max_examples=200, deadline=None, derandomize=True)
@given(now=NOWS, seconds=st.sampled_from([1, bounds.MAX_DEADLINE_SECONDS]))
def test_the_runs_deadline_stays_in_range(now: datetime, seconds: int) -> None:
    world = f.world(f.ready(), run=f.agent_run(deadline=seconds, start_time=now), now=now)
    limit = inputs.deadline(world)
    assert limit is not None and within(limit)
    steps.next_step(world)  # never raises


@settings(max_examples=200, deadline=None, derandomize=True)
@given(now=NOWS, consumed=st.integers(min_value=0, max_value=bounds.MAX_ATTEMPT_NUMBER),
       initial=st.sampled_from([0, 86400]), factor=st.sampled_from([1.0, 10.0]),
       cap=st.sampled_from([0, 86400]), max_attempts=st.sampled_from([1, 1000]))
def test_the_retry_time_stays_in_range(now: datetime, consumed: int, initial: int,
                                       factor: float, cap: int, max_attempts: int) -> None:
    policy = retries.Effective(max_attempts=max_attempts, backoff=Backoff(
        initial_seconds=initial, factor=factor, max_seconds=cap))
    at = retries.retry_at(policy=policy, consumed=consumed, now=now)
    assert at is None or (within(at) and at - now <= timedelta(seconds=86400))


@settings(max_examples=100, deadline=None, derandomize=True)
@given(now=NOWS, lease=st.sampled_from([5, 3600]), start=st.sampled_from([5, 86400]))
def test_lease_expiry_and_the_start_deadline_stay_in_range(now: datetime, lease: int,
                                                           start: int) -> None:
    spec = LaunchSpecSpec.model_validate({**f.CPU_SPEC.spec.wire(),
                                          "lease": {"durationSeconds": lease},
                                          "startDeadlineSeconds": start})
    view = observations.lease_view(f.lease(1, renew_time="x", duration=2**31 - 1))
    for observation in (None, f.observed(now)):
        observations.lease_status(observation=observation, lease=view, now=now,
                                  claimed_at=now, start_deadline_seconds=start,
                                  lease_duration_seconds=spec.lease.duration_seconds)
    assert within(now + timedelta(seconds=max(lease, start)))


def test_a_slot_round_trips_with_its_bounds() -> None:
    slot = Slot.model_validate({**f.slot().model_dump(mode="json", by_alias=True),
                                "status": worst_case_status().wire()})
    assert size(slot.status) == size(worst_case_status())
