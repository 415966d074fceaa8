"""The operator's metrics: what each applied write counts for, the flags, and the endpoint.

Pure tallies (``core.slots.tallies``) and the registry they feed (``controller.metrics``); the
one socket is the endpoint's, on 127.0.0.1 and a port the OS picks.
"""

from __future__ import annotations

import platform
import threading
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest

from agentrun import cli
from agentrun.api.modelusage import ModelUsage
from agentrun.api.slots import (
    AttemptRecord,
    CommandKind,
    CommandRecord,
    EffectEntry,
    Outcome,
    Predicate,
    QuestionEntry,
    QuestionState,
    SlotState,
    SlotStatus,
)
from agentrun.controller import metrics
from agentrun.core.base import census
from agentrun.core.slots import tallies

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def seconds(n: float) -> timedelta:
    return timedelta(seconds=n)


def attempt(number: int, *, started: datetime, ended: datetime | None = None,
            outcome: Outcome | None = None) -> AttemptRecord:
    return AttemptRecord(number=number, pod=f"s-{number}", lease=f"s-{number}",
                         worker_class="cpu", launch_spec="cpu@1", started_at=started,
                         ended_at=ended, outcome=outcome)


def command(request_id: str, *, kind: CommandKind, at: datetime,
            predicate: Predicate | None = None) -> CommandRecord:
    return CommandRecord(request_id=request_id, kind=kind, time=at,
                         outcome="Rejected" if predicate else "Accepted", predicate=predicate)


def tally(old: SlotStatus, new: SlotStatus, *, created: datetime | None = T0,
          has_dependencies: bool = False) -> tallies.Tally:
    return tallies.of_slot_write(old=old, new=new, created=created,
                                 has_dependencies=has_dependencies)


def sample(meters: metrics.Metrics, name: str, **labels: str) -> float:
    return meters.registry.get_sample_value(name, labels) or 0.0


ACTIVE = SlotStatus(state=SlotState.ACTIVE, attempt_count=1, active_worker="s-1",
                    attempts=[attempt(1, started=T0 + seconds(10))])


def ended(outcome: Outcome, after: float = 90) -> SlotStatus:
    return SlotStatus(state=SlotState.RETRY_WAIT, attempt_count=1, prior_worker="s-1",
                      attempts=[attempt(1, started=T0 + seconds(10),
                                        ended=T0 + seconds(10 + after), outcome=outcome)])


def test_an_attempt_that_ends_counts_its_state_outcome_and_duration() -> None:
    found = tally(ACTIVE, ended(Outcome.FAILED))
    assert found.transitions == [("Slot", "RetryWait"), ("Attempt", "Failed")]
    assert found.attempt_durations == [("Failed", 90.0)]
    assert (found.lease_expiries, found.claim_latencies, found.commands) == (0, [], [])


@pytest.mark.parametrize(("outcome", "expiries"), [
    (Outcome.LOST, 1), (Outcome.START_TIMEOUT, 1), (Outcome.FAILED, 0),
    (Outcome.SUCCEEDED, 0), (Outcome.GAVE_UP, 0)])
def test_only_an_attempt_ended_by_its_lease_is_a_lease_expiry(outcome: Outcome,
                                                              expiries: int) -> None:
    assert tally(ACTIVE, ended(outcome)).lease_expiries == expiries


def test_a_write_read_back_counts_nothing() -> None:
    """What a retried reconcile sees: the status it wrote is the one it reads."""
    for status in (ACTIVE, ended(Outcome.LOST)):
        assert tally(status, status) == tallies.Tally()


def test_new_ledger_entries_count_by_kind_outcome_and_predicate() -> None:
    old_entry = command("r1", kind=CommandKind.CLAIM, at=T0)
    old = ended(Outcome.FAILED).model_copy(update={"commands": [old_entry]})
    new = old.model_copy(update={"commands": [
        old_entry,
        command("r2", kind=CommandKind.REASSIGN, at=T0 + seconds(200),
                predicate=Predicate.BLANK_REASON),
        command("r3", kind=CommandKind.REASSIGN, at=T0 + seconds(201))]})
    assert tally(old, new).commands == [("Reassign", "Rejected", "BlankReason"),
                                       ("Reassign", "Accepted", "")]


def test_claim_latency_of_a_first_attempt_runs_from_the_slots_creation() -> None:
    ready = SlotStatus(state=SlotState.READY)
    assert tally(ready, ACTIVE).claim_latencies == [10.0]
    assert tally(ready, ACTIVE, has_dependencies=True).claim_latencies == []
    assert tally(ready, ACTIVE, created=None).claim_latencies == []


def test_claim_latency_runs_from_the_claim_command_that_opened_the_slot() -> None:
    ready = SlotStatus(state=SlotState.READY)
    claimed = ACTIVE.model_copy(update={"commands": [
        command("c", kind=CommandKind.CLAIM, at=T0 + seconds(7)),
        command("x", kind=CommandKind.CLAIM, at=T0 + seconds(8),
                predicate=Predicate.NOT_CLAIMABLE)]})
    assert tally(ready, claimed).claim_latencies == [3.0]


def test_claim_latency_of_a_retry_runs_from_the_latest_opening_moment() -> None:
    waiting = ended(Outcome.LOST).model_copy(update={"retry_at": T0 + seconds(130)})
    second = attempt(2, started=T0 + seconds(135))
    retried = waiting.model_copy(update={
        "state": SlotState.ACTIVE, "active_worker": "s-2", "attempt_count": 2,
        "retry_at": None, "attempts": [*waiting.attempts, second]})
    assert tally(waiting, retried).claim_latencies == [5.0]
    reassigned = retried.model_copy(update={"commands": [
        command("r", kind=CommandKind.REASSIGN, at=T0 + seconds(133))]})
    assert tally(waiting, reassigned).claim_latencies == [2.0]
    # Clocks of two writers may disagree: never a negative latency.
    late = waiting.model_copy(update={"retry_at": T0 + seconds(500)})
    assert tally(late, retried).claim_latencies == [0.0]


def test_a_new_unresolved_effect_counts_once() -> None:
    entry = EffectEntry(key="publish", attempt=1, observed_at=T0)
    new = ACTIVE.model_copy(update={"effects": [entry]})
    assert tally(ACTIVE, new).effects_unresolved == 1
    assert tally(new, new).effects_unresolved == 0


def test_a_new_question_counts_once() -> None:
    entry = QuestionEntry(key="plan", attempt=1, digest="0" * 64, asked_at=T0)
    new = ACTIVE.model_copy(update={"questions": [entry]})
    assert tally(ACTIVE, new).questions_asked == 1
    assert tally(new, new).questions_asked == 0
    answered = new.model_copy(update={"questions": [entry.model_copy(update={
        "state": QuestionState.ANSWERED, "value": "true"})]})
    assert tally(new, answered).questions_asked == 0
    # An effect's approval request is counted apart from the questions.
    approval = QuestionEntry(key="publish", attempt=1, digest="0" * 64, asked_at=T0,
                             approvers=2)
    both = new.model_copy(update={"questions": [entry, approval]})
    assert (tally(new, both).questions_asked, tally(new, both).approvals_requested) == (0, 1)


def test_model_usage_counts_what_the_slots_sum_grew_by() -> None:
    first = ModelUsage(input_tokens=100, output_tokens=10, cost_micros=1_500_000)
    grown = ModelUsage(input_tokens=150, output_tokens=11, cost_micros=2_000_000)
    with_first = ACTIVE.model_copy(update={"usage": first})
    with_grown = ACTIVE.model_copy(update={"usage": grown})
    assert tally(ACTIVE, with_first).usage == first
    assert tally(with_first, with_grown).usage == ModelUsage(
        input_tokens=50, output_tokens=1, cost_micros=500_000)
    assert tally(with_grown, with_grown).usage is None  # read back: nothing new
    assert tally(with_grown, with_first).usage is None  # a stale read never subtracts
    euros = ACTIVE.model_copy(update={"usage": grown.model_copy(update={"currency": "EUR"})})
    assert tally(with_first, euros).usage is None
    meters = metrics.Metrics()
    meters.count(tally(ACTIVE, with_first))
    meters.count(tally(with_first, with_grown))
    assert sample(meters, "agentrun_model_tokens_total", direction="input") == 150
    assert sample(meters, "agentrun_model_tokens_total", direction="output") == 11
    assert sample(meters, "agentrun_model_cost_total", currency="USD") == 2.0


def test_the_registry_moves_by_the_tally() -> None:
    meters = metrics.Metrics()
    meters.count(tally(ACTIVE, ended(Outcome.LOST, after=30)))
    meters.count(tally(ACTIVE, ended(Outcome.LOST, after=30)))
    meters.run_event("AllSlotsSucceeded")
    meters.reconcile_error("Slot")
    assert sample(meters, "agentrun_transitions_total", kind="Slot", outcome="RetryWait") == 2
    assert sample(meters, "agentrun_transitions_total", kind="Attempt", outcome="Lost") == 2
    assert sample(meters, "agentrun_transitions_total", kind="Run",
                  outcome="AllSlotsSucceeded") == 1
    assert sample(meters, "agentrun_lease_expiries_total") == 2
    assert sample(meters, "agentrun_reconcile_errors_total", kind="Slot") == 1
    assert sample(meters, "agentrun_attempt_duration_seconds_count", outcome="Lost") == 2
    assert sample(meters, "agentrun_attempt_duration_seconds_sum", outcome="Lost") == 60
    assert sample(meters, "agentrun_claim_latency_seconds_count") == 0


def test_registries_are_separate_and_depth_is_read_at_scrape() -> None:
    one, two = metrics.Metrics(), metrics.Metrics()
    one.reconcile_error("AgentRun")
    assert two.registry.get_sample_value("agentrun_reconcile_errors_total",
                                         {"kind": "AgentRun"}) == 0  # shown before any error
    queued = [1, 2, 3]
    one.watch_depth(lambda: len(queued))
    assert sample(one, "agentrun_queue_depth") == 3
    queued.pop()
    assert sample(one, "agentrun_queue_depth") == 2


def test_the_census_is_taken_at_each_scrape_and_only_the_leader_counts() -> None:
    meters = metrics.Metrics()
    assert sample(meters, "agentrun_slots", state="Active") == 0  # nothing wired: zeros
    slots = [{"status": {"state": "Active"}},
             {"status": {"state": "RetryWait", "conditions": [
                 {"type": "BudgetExceeded", "status": "True"}]}}]
    leading = [True]
    meters.watch_census(lambda: census.count(slots=slots, runs=[{"status": {}}],
                                             now=datetime.now(UTC))
                        if leading[0] else None)
    assert sample(meters, "agentrun_slots", state="Active") == 1
    assert sample(meters, "agentrun_waiting_for_person", what="budget") == 1
    assert sample(meters, "agentrun_runs", state="Pending") == 1
    slots.append({"status": {"state": "Active"}})
    assert sample(meters, "agentrun_slots", state="Active") == 2  # read now, never stale
    leading[0] = False  # a standby: zeros, so a sum over replicas counts once
    assert sample(meters, "agentrun_slots", state="Active") == 0


def test_requests_reconciles_the_queue_and_blind_time() -> None:
    meters = metrics.Metrics()
    meters.api_request("GET", 200, 0.004)
    meters.api_request("PATCH", 409, 0.02)
    meters.api_request("GET", None, 20.0)
    assert sample(meters, "agentrun_api_requests_total", method="GET", code="200") == 1
    assert sample(meters, "agentrun_api_requests_total", method="GET", code="none") == 1
    assert sample(meters, "agentrun_api_request_duration_seconds_count", method="GET") == 2
    meters.reconciled("Slot", 0.03)
    meters.queued("Slot", 0.5)
    meters.retried("AgentRun")
    assert sample(meters, "agentrun_reconcile_duration_seconds_count", kind="Slot") == 1
    assert sample(meters, "agentrun_queue_wait_seconds_sum") == 0.5
    assert sample(meters, "agentrun_queue_retries_total", kind="AgentRun") == 1
    meters.watch_blind(lambda: 12.5)
    assert sample(meters, "agentrun_blind_seconds") == 12.5


def test_no_label_names_an_object() -> None:
    allowed = {"kind", "outcome", "predicate", "le", "direction", "currency", "method", "code",
               "state", "what"}
    for family in metrics.Metrics().registry.collect():
        assert family.name.startswith(("agentrun_", "process_"))
        for found in family.samples:
            extra = {"version", "python"} if family.name == "agentrun_build_info" else set()
            assert set(found.labels) <= allowed | extra, (family.name, found.labels)


def test_the_leader_gauge_build_info_and_the_process() -> None:
    meters = metrics.Metrics()
    assert sample(meters, "agentrun_leader") == 1  # alone, it leads
    leading = threading.Event()
    meters.watch_leading(leading.is_set)
    assert sample(meters, "agentrun_leader") == 0  # a standby
    leading.set()
    assert sample(meters, "agentrun_leader") == 1
    assert sample(meters, "agentrun_build_info", version=metrics.VERSION,
                  python=platform.python_version()) == 1
    assert metrics.VERSION != ""
    assert (sample(meters, "process_resident_memory_bytes") or 0) > 0


def test_the_endpoint_serves_the_registry_and_stops() -> None:
    meters = metrics.Metrics()
    meters.reconcile_error("LaunchSpec")
    server = meters.serve(address="127.0.0.1", port=0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics",
                                    timeout=10) as answer:
            text = answer.read().decode()
    finally:
        server.close()
    assert 'agentrun_reconcile_errors_total{kind="LaunchSpec"} 1.0' in text
    assert "python_gc" not in text  # not the global registry
    assert not server.thread.is_alive()


def test_metrics_flags_defaults_and_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    args = cli.parse(["run"])
    assert (args.metrics_port, args.metrics_address) == (8080, "127.0.0.1")
    assert cli.parse(["run", "--metrics-port", "0", "--metrics-address", "::"]).metrics_address \
        == "::"
    for flag, value, says in [
            ("--metrics-port", "65536", "--metrics-port must be between 0 and 65535"),
            ("--metrics-port", "-1", "between 0 and 65535"),
            ("--metrics-address", "localhost", "--metrics-address must be an IP address"),
            ("--metrics-address", "1" * 500, "must be an IP address")]:
        with pytest.raises(SystemExit) as exited:
            cli.parse(["run", flag, value])
        assert exited.value.code == 2
        assert says in capsys.readouterr().err


def test_a_port_in_use_stops_the_operator_with_the_reason(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "configure_logging", lambda **_: None)  # the session's logging
    server = metrics.Metrics().serve(address="127.0.0.1", port=0)
    try:
        code = cli.main(["run", "--metrics-port", str(server.port)])
    finally:
        server.close()
    assert code == 1
    assert f"cannot serve metrics on 127.0.0.1:{server.port}" in capsys.readouterr().err


def test_the_probes_say_alive_always_and_ready_only_while_serving() -> None:
    meters = metrics.Metrics()
    server = meters.serve(address="127.0.0.1", port=0)

    def status(path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}",
                                        timeout=10) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as error:
            return int(error.code)
    try:
        before = (status("/healthz"), status("/readyz"))
        meters.ready.set()
        serving = (status("/healthz"), status("/readyz"))
        meters.ready.clear()
        stopping = status("/readyz")
    finally:
        server.close()
    assert before == (200, 503)
    assert serving == (200, 200)
    assert stopping == 503


def test_readyz_says_why_it_is_not_ready() -> None:
    meters = metrics.Metrics()
    server = meters.serve(address="127.0.0.1", port=0)

    def answer() -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/readyz",
                                        timeout=10) as found:
                return int(found.status), found.read().decode().strip()
        except urllib.error.HTTPError as error:
            return int(error.code), error.read().decode().strip()
    try:
        priming = answer()
        meters.unready("stamping is not in force: the Secret is missing")
        stamping = answer()
        meters.ready.set()
        serving = answer()
    finally:
        server.close()
    assert priming == (503, "not serving: the stores are not primed yet")
    assert stamping == (503, "not serving: stamping is not in force: the Secret is missing")
    assert serving == (200, "serving")


def test_every_slot_state_and_attempt_outcome_is_shown_at_zero_from_the_start() -> None:
    """So that an alert's increase() counts the first one (a series that appears with its
    first value has no increase yet)."""
    read = metrics.Metrics().registry.get_sample_value
    for state in SlotState:
        assert read("agentrun_transitions_total", {"kind": "Slot", "outcome": state}) == 0.0
    for outcome in Outcome:
        assert read("agentrun_transitions_total", {"kind": "Attempt", "outcome": outcome}) == 0.0
    assert read("agentrun_transitions_total", {"kind": "Attempt", "outcome": "Nope"}) is None
