"""A slot's life as a hypothesis state machine: the core's invariants under any interleaving.

The world (pods, leases, the clock) is simulated; the operator's in-memory lease
observations can be lost at any step (a restart). Invariants checked after every step:
at most one live attempt; attempt numbers strictly increase and none is lost; identity
never changes; reassignment never creates an attempt; a claim creates exactly one; every
request id appears once in the ledger.

``controller/test_slots_stateful.py`` drives the same decisions end to end through the real
applier over an in-memory API server, with conflicts and crashes between writes.
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agentrun.api.slots import COMMANDS_KEPT, CommandKind, SlotState, SlotStatus
from agentrun.core.attempts import ending, observations
from agentrun.core.attempts.observations import (
    LeaseObservation,
    LeaseStatus,
    LeaseView,
    PodPhase,
    PodView,
)
from agentrun.core.commands import guards
from agentrun.core.machine import retries, transitions
from tests.unit.core import corefakes as f

POLICY = retries.effective(node=None, run=None)
SPECS = [f.launch_spec("gpu-spec", classes=["gpu"], runs=[f.RUN]),
         f.launch_spec("cpu-spec", classes=["cpu"])]
LEASE_SECONDS = 30
START_DEADLINE = 60
LIVE_PHASES = {PodPhase.PENDING, PodPhase.RUNNING, PodPhase.UNKNOWN, PodPhase.TERMINATING}
REQUEST_IDS = st.sampled_from([f"req-{i}" for i in range(6)]) | st.uuids().map(str)
ACTORS = st.sampled_from(["alice", "bob"])
STATS = {"examples": 0, "steps": 0, "claims": 0, "claim_failures": 0, "ended": 0,
         "fenced": 0, "reassigned": 0, "rejected": 0, "duplicates": 0, "gave_up": 0}


class Lease:
    def __init__(self) -> None:
        self.renew_time: str | None = None
        self.tombstoned = False

    def view(self) -> LeaseView:
        return LeaseView(exists=True, holder=None if self.tombstoned else "pod",
                         renew_time=self.renew_time, duration_seconds=LEASE_SECONDS,
                         tombstoned=self.tombstoned)


class SlotLife(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        STATS["examples"] += 1
        self.slot = f.slot()
        self.identity = (self.slot.metadata.name, self.slot.spec)
        self.now = f.T0
        self.status = transitions.deps_met(SlotStatus(), worker_class="cpu",
                                           launch_spec=f.PINNED, now=self.now)
        self.pods: dict[int, PodPhase] = {}
        self.leases: dict[int, Lease] = {}
        self.memory: dict[int, LeaseObservation] = {}
        self.consumed: list[int] = []
        self.issued: list[str] = []
        self.renewals = itertools.count()
        self.last_accepted_reassigner: str | None = None

    # --- helpers -------------------------------------------------------------------------

    def number(self, worker: str | None) -> int | None:
        return int(worker.removeprefix(f"{f.SLOT}-")) if worker else None

    def lease_status(self, n: int) -> tuple[LeaseStatus, bool]:
        lease = self.leases.get(n)
        view = lease.view() if lease else observations.MISSING_LEASE
        obs = observations.observe(previous=self.memory.get(n), lease=view, now=self.now)
        if obs is not None:
            self.memory[n] = obs
        record = next((a for a in self.status.attempts if a.number == n), None)
        claimed = record.started_at if record else f.T0
        status = observations.lease_status(observation=obs, lease=view, now=self.now,
                                           claimed_at=claimed,
                                           start_deadline_seconds=START_DEADLINE,
                                           lease_duration_seconds=view.duration_seconds or 30)
        return status, obs is not None

    def command(self, kind: CommandKind, request_id: str, actor: str,
                **kw: object) -> guards.Decision:
        n = self.number(self.status.prior_worker)
        prior = None
        if n is not None:
            lease, _ = self.lease_status(n)
            prior = guards.Prior(pod=self.pods.get(n, PodPhase.GONE), lease=lease)
        before = self.status
        cmd = guards.Command(kind=kind, request_id=request_id, actor=actor, **kw)  # type: ignore[arg-type]
        decision = guards.decide(command=cmd, slot=self.slot.model_copy(update={"status": before}),
                                 tenant=f.TENANT, prior=prior, launch_specs=SPECS, now=self.now)
        if not decision.accepted:
            STATS["duplicates" if decision.duplicate else "rejected"] += 1
        if decision.duplicate:
            assert request_id in self.issued and decision.status == before
        else:
            assert request_id not in [c.request_id for c in before.commands]
            self.issued.append(request_id)
        # No command ever creates an attempt.
        assert decision.status.attempt_count == before.attempt_count
        assert [a.number for a in decision.status.attempts] == [a.number for a in before.attempts]
        self.status = decision.status
        # An accepted give-up makes the live attempt the prior one; it is fenced next.
        live = before.active_worker or before.pending_worker
        if decision.accepted and kind is CommandKind.GIVE_UP and live is not None:
            fenced = self.number(live)
            assert fenced is not None
            if self.pods.get(fenced) in (PodPhase.PENDING, PodPhase.RUNNING):
                self.pods[fenced] = PodPhase.TERMINATING
            if fenced in self.leases:
                self.leases[fenced].tombstoned = True
        return decision

    # --- rules ---------------------------------------------------------------------------

    def claimable(self) -> bool:
        return transitions.is_claimable(self.status, now=self.now, claim_policy="Automatic")

    def worker_alive(self) -> bool:
        n = self.number(self.status.active_worker)
        return n is not None and self.pods[n] in (PodPhase.PENDING, PodPhase.RUNNING)

    @precondition(claimable)
    @rule(fails=st.sampled_from([False, False, True]))
    def claim(self, fails: bool) -> None:
        before = self.status.attempt_count
        owner = self.status.next_owner_actor
        started = transitions.start_claim(self.status, slot=f.SLOT, now=self.now)
        n = started.attempt_count
        assert n == before + 1 and n not in self.consumed
        self.consumed.append(n)
        STATS["claims"] += 1
        if fails:
            STATS["claim_failures"] += 1
            self.status = transitions.fail_claim(started, message="403", policy=POLICY,
                                                 now=self.now)
            return
        self.pods[n] = PodPhase.PENDING
        self.leases[n] = Lease()
        self.status = transitions.finish_claim(started, now=self.now)
        assert self.status.attempts[-1].number == n
        assert self.status.attempts[-1].owner_actor == owner

    @precondition(worker_alive)
    @rule()
    def worker_starts_and_renews(self) -> None:
        n = self.number(self.status.active_worker)
        assert n is not None
        self.pods[n] = PodPhase.RUNNING
        if not self.leases[n].tombstoned:
            # The worker's clock is far off; only the change matters.
            self.leases[n].renew_time = f"2001-01-01T00:00:{next(self.renewals)}Z"

    @precondition(worker_alive)
    @rule(success=st.sampled_from([False, False, True]), releases=st.booleans())
    def worker_exits(self, success: bool, releases: bool) -> None:
        n = self.number(self.status.active_worker)
        assert n is not None
        self.pods[n] = PodPhase.SUCCEEDED if success else PodPhase.FAILED
        if releases:
            self.leases[n].tombstoned = True

    @precondition(worker_alive)
    @rule(gone=st.booleans())
    def node_lost(self, gone: bool) -> None:
        n = self.number(self.status.active_worker)
        if n is not None and self.pods[n] in LIVE_PHASES:
            self.pods[n] = PodPhase.GONE if gone else PodPhase.UNKNOWN

    @rule()
    def pod_collected(self) -> None:
        for n, phase in self.pods.items():
            if phase in (PodPhase.UNKNOWN, PodPhase.TERMINATING):
                self.pods[n] = PodPhase.GONE

    @rule(seconds=st.sampled_from([1, 10, 31, 61, 400]))
    def time_passes(self, seconds: int) -> None:
        """Time passes, and the operator reacts (requeued reconciliations)."""
        self.now += f.seconds(seconds)
        self.reconcile()

    @rule()
    def operator_restarts(self) -> None:
        self.memory.clear()

    @rule()
    def reconcile(self) -> None:
        n = self.number(self.status.active_worker)
        if n is None:
            return
        lease, renewed = self.lease_status(n)
        verdict = ending.judge(pod=PodView(phase=self.pods[n]), lease=lease, renewed=renewed)
        if verdict.delete_pod:
            STATS["fenced"] += 1
            self.pods[n] = PodPhase.TERMINATING
        if verdict.ended:
            assert verdict.outcome is not None
            STATS["ended"] += 1
            self.status = transitions.end_attempt(
                self.status, outcome=verdict.outcome, message=verdict.message,
                exit_code=verdict.exit_code, policy=POLICY, now=self.now)
            self.leases[n].tombstoned = True

    @rule(request_id=REQUEST_IDS, actor=ACTORS, override=st.booleans(),
          worker_class=st.sampled_from(["gpu", "gpu", "cpu", "tpu"]),
          run=st.sampled_from([f.RUN, f.RUN, "other"]),
          reason=st.sampled_from(["retry it", "retry it", ""]))
    def reassign(self, request_id: str, actor: str, override: bool, worker_class: str,
                 run: str, reason: str) -> None:
        decision = self.command(CommandKind.REASSIGN, request_id, actor, override=override,
                                worker_class=worker_class, run=run, reason=reason)
        if decision.accepted:
            assert self.status.state is SlotState.RETRY_WAIT
            assert transitions.is_reopened(self.status)
            self.last_accepted_reassigner = actor
            STATS["reassigned"] += 1

    @rule(request_id=REQUEST_IDS, actor=ACTORS, holds=st.booleans())
    def hold_or_release(self, request_id: str, actor: str, holds: bool) -> None:
        before = self.status.state
        if holds:
            self.command(CommandKind.HOLD, request_id, actor, reason="look")
        else:
            self.command(CommandKind.RELEASE, request_id, actor)
        assert self.status.state is before

    @rule(request_id=REQUEST_IDS, actor=ACTORS, override=st.booleans(),
          now=st.sampled_from([False] * 7 + [True]))
    def give_up(self, request_id: str, actor: str, override: bool, now: bool) -> None:
        if not now:  # rarely: a give-up ends the slot's story
            return
        decision = self.command(CommandKind.GIVE_UP, request_id, actor, reason="enough",
                                override=override)
        if decision.accepted:
            STATS["gave_up"] += 1
            assert self.status.state is SlotState.FAILED

    # --- invariants ----------------------------------------------------------------------

    @invariant()
    def at_most_one_live_attempt(self) -> None:
        STATS["steps"] += 1
        live = [n for n in self.pods
                if self.pods[n] in LIVE_PHASES or not self.leases[n].tombstoned]
        assert len(live) <= 1, live
        workers = [w for w in (self.status.pending_worker, self.status.active_worker) if w]
        assert len(workers) <= 1
        assert (self.status.state is SlotState.ACTIVE) == (self.status.active_worker is not None)

    @invariant()
    def attempt_numbers_increase_and_none_is_lost(self) -> None:
        assert self.consumed == list(range(1, self.status.attempt_count + 1))
        numbers = [a.number for a in self.status.attempts]
        assert numbers == sorted(set(numbers))
        assert numbers == self.consumed[-len(numbers):] if numbers else not self.consumed

    @invariant()
    def identity_never_changes(self) -> None:
        assert (self.slot.metadata.name, self.slot.spec) == self.identity
        for worker in (self.status.prior_worker, self.status.active_worker):
            n = self.number(worker)
            assert worker is None or (n is not None and n <= self.status.attempt_count)

    @invariant()
    def every_request_once_in_the_ledger(self) -> None:
        ids = [c.request_id for c in self.status.commands]
        assert len(ids) == len(set(ids))
        assert ids == self.issued[-COMMANDS_KEPT:]


SlotLife.TestCase.settings = settings(
    max_examples=400, stateful_step_count=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestSlotLife = SlotLife.TestCase


def teardown_module() -> None:
    print(f"\nslot life: {STATS}")
