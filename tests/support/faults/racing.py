"""The fault scenario "two operators racing": two operator processes of
the same install serve one namespace at once (peering off: nothing but the API server's
preconditions keeps them from acting twice).

One play (:func:`play`), shared by ``make faults`` (``bench/faults/racing.py``) and
``make test`` (``tests/integration/operator/test_fault_racing.py``); the caller starts the
operators. The workers are played by hand (no node: :class:`Following` renews the lease
of each Active slot's current attempt every second):

1. a run of ``slots`` nodes (``maxAttempts`` 2), every slot Active on attempt 1;
2. every second slot's pod fails (exit 3, the lease released): a retry, attempt 2 Active;
3. of those, every second one fails again: exhausted, then a reassignment command sends
   it to another worker class: attempt 3 Active;
4. every worker exits 0: every slot Succeeded within :data:`netplay.SETTLED_BOUND`.

Checked (``netplay.violations``): no double claim (the attempt records numbered 1..n, the
Leases exactly ``<slot>-1..n``, each tombstoned, no pod for an attempt the slot does not
record), one ledger entry per command, no command annotation left, no slot stuck.
"""

from __future__ import annotations

from tests.support.faults import netplay
from tests.support.faults.netplay import Play, Workers, status, timed
from tests.support.plays.scenarios import Scenario, request_id
from tests.support.waiting import wait_for, wait_for_default_service_account

RUN = "race"
PHASE_BOUND = 90.0  # seconds: every slot of a phase Active on its attempt (two operators)


class Following(Workers):
    """Tends the current attempt of every Active slot as its worker would: renews its
    lease (:meth:`tend`)."""

    def renew_all(self) -> None:
        try:
            slots = self.scenario.custom.list_namespaced_custom_object(
                "agentrun.dev", "v1alpha1", self.scenario.namespace, "slots")["items"]
        except Exception:  # a worker retries at its next period
            self.errors += 1
            return
        for slot in slots:
            worker = status(slot).get("activeWorker")
            if status(slot).get("state") == "Active" and worker:
                try:
                    self.tend(worker)
                except Exception:  # the attempt may have just ended: next period
                    self.errors += 1

    def tend(self, worker: str) -> None:
        self.scenario.renew(worker)


def on_attempt(scenario: Scenario, names: list[str], attempts: int) -> bool:
    return all(status(s := scenario.slot(n)).get("state") == "Active"
               and status(s).get("attemptCount") == attempts for n in names)


def fail(scenario: Scenario, worker: str) -> None:
    """The worker gives its lease up and its pod fails (exit 3)."""
    scenario.renew(worker)
    scenario.release(worker)
    scenario.finish(worker, "Failed", exit_code=3)


def play(scenario: Scenario, *, slots: int, lease_seconds: int) -> Play:
    """Play the scenario once in ``scenario``'s namespace (two operators serving it)."""
    result = Play()
    nodes: tuple[tuple[str, str, list[str]], ...] = tuple(
        (f"w{i:03d}", "cpu", []) for i in range(slots))
    scenario.configs(name=RUN, nodes=nodes)
    for name, worker_class in (("cpu-workers", "cpu"), ("gpu-workers", "gpu")):
        scenario.launch_spec(name, classes=[worker_class], lease_seconds=lease_seconds,
                             start_deadline_seconds=600)
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)
    expected: dict[str, int] = {}
    commands: dict[str, list[str]] = {}
    with Following(scenario):
        scenario.run(RUN, config=RUN, max_attempts=2)
        every = wait_for(lambda: (found := scenario.slot_names(RUN)) and len(found) == slots
                         and found, timeout=60, message=f"{slots} slots of run {RUN}")
        expected = {name: 1 for name in every}
        timed(result, "every slot Active on attempt 1",
              lambda: on_attempt(scenario, every, 1), timeout=PHASE_BOUND)
        retried = every[::2]
        for name in retried:
            fail(scenario, f"{name}-1")
            expected[name] = 2
        timed(result, "every failed slot Active on attempt 2",
              lambda: on_attempt(scenario, retried, 2), timeout=PHASE_BOUND)
        exhausted = retried[::2]
        for name in exhausted:
            fail(scenario, f"{name}-2")
        wait_for(lambda: all(any(c["type"] == "AwaitingReassignment" and c["status"] == "True"
                                 for c in status(scenario.slot(n)).get("conditions", []))
                             for n in exhausted), timeout=PHASE_BOUND,
                 message="the twice-failed slots awaiting reassignment")
        for name in exhausted:
            request = request_id()
            sent = scenario.annotate(name, user="admin", reassign_id=request,
                                     reassign_run=RUN, reassign_worker_class="gpu",
                                     reassign_reason="racing operators: another class")
            assert sent.returncode == 0, sent.stderr
            commands[name] = [request]
            expected[name] = 3
        timed(result, "every reassigned slot Active on attempt 3",
              lambda: on_attempt(scenario, exhausted, 3), timeout=PHASE_BOUND)
    netplay.settle(scenario, result, slots=list(expected))
    result.violations += netplay.violations(scenario, attempts=expected, commands=commands)
    return result
