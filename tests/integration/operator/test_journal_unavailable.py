"""A worker's journal store not answering, shown on its slot, over the real API server.

The operator pins a journal on the run (``--journal-*``; it never calls the store for
this); attempt 1's worker, with a token bound to its Pod, reports the store's error on its
own Lease the way the SDK does (``agentrun.worker._journal.ErrorReport``). Covers: the
slot's condition JournalUnavailable turns True naming the pinned store and the error, with
a Warning Event; the report cleared, it turns False (StoreAnswering), the operator killed
right after that write (crash point ``journal-answers``) and restarted repeats nothing
(an Event goes after its write: the cut write's is lost, never doubled); a journal that
lost committed work (the SDK's report of ``JournalDamaged``) is ``JournalLost`` True,
kept as written across a crash right after that write (``journal-lost``); with the Lease
policy in force the error is admitted and shown across a crash right after that write
(``journal-unavailable``), and one over its bound is refused by admission (the message
names the bound) and changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrun import rest
from agentrun.api import bounds, names
from agentrun.worker import _journal as journal
from agentrun.worker import _records as records
from tests.support.actors.operators import OperatorProcess
from tests.support.cluster import store
from tests.support.cluster.clusters import Cluster
from tests.support.plays.convergence import crashed
from tests.support.plays.scenarios import Scenario, condition_of, holds_throughout

from .test_effect_unresolved import pod_api, publish

RUN = "study"
CONDITION = names.JOURNAL_UNAVAILABLE_CONDITION
ERROR = "storing agentrun/ns/uid/s/1/sha256/ab: connection refused"


@pytest.fixture
def journaled(scenario: Scenario, installed: None,
              tmp_path: Path) -> Iterator[OperatorProcess]:
    """The operator pinning the cluster's store on each run, not started."""
    process = OperatorProcess(
        cluster=scenario.cluster, namespace=scenario.namespace, log=tmp_path / "operator.log",
        args=["--journal-endpoint", store.STORE_ENDPOINT, "--journal-bucket", store.BUCKET])
    yield process
    process.stop()
    print(f"--- operator log (tail) ---\n{process.tail(40)}")


def active_slot(scenario: Scenario, process: OperatorProcess, *,
                crash_at: str | None = None) -> tuple[str, journal.ErrorReport]:
    publish(scenario)
    process.start(crash_at=crash_at)
    scenario.run(RUN, max_attempts=2)
    slot = scenario.slot_name_eventually(RUN, "research")
    scenario.wait_state(slot, "Active")
    lease = f"{slot}-1"
    return slot, journal.ErrorReport(lease=records.LeaseRecords(
        api=pod_api(scenario, lease), namespace=scenario.namespace, lease=lease, attempt=1))


def test_the_store_error_is_shown_and_cleared_across_a_crash(
        scenario: Scenario, cluster: Cluster, journaled: OperatorProcess) -> None:
    slot, report = active_slot(scenario, journaled, crash_at="journal-answers")
    report(ERROR)
    lease = scenario.lease(f"{slot}-1")
    assert lease is not None
    assert lease["metadata"]["annotations"][names.JOURNAL_ERROR_ANNOTATION] == ERROR
    shown = scenario.wait_condition(slot, CONDITION, "True")
    assert shown["reason"] == names.JOURNAL_STORE_FAILING
    assert store.STORE_ENDPOINT in shown["message"] and ERROR in shown["message"]
    assert scenario.wait_event(CONDITION, ERROR)
    report(None)
    crashed(journaled)
    cleared = scenario.wait_condition(slot, CONDITION, "False")
    assert cleared["reason"] == names.JOURNAL_STORE_ANSWERS
    journaled.start()
    holds_throughout(lambda: len(scenario.events(CONDITION)) == 1, seconds=3,
                     message="shown once, not again after the restart")
    # An Event goes after its write: the one of the write the crash cut is lost, never
    # repeated (the condition is the record).
    assert len(scenario.events(names.JOURNAL_STORE_ANSWERS)) <= 1
    assert scenario.slot(slot)["status"]["state"] == "Active"


def test_a_lost_journal_is_shown_once_across_a_crash(
        scenario: Scenario, journaled: OperatorProcess) -> None:
    slot, report = active_slot(scenario, journaled, crash_at="journal-lost")
    loss = "attempt 1's journal, commit 2 of 3: S3 404 NoSuchKey"
    journal.ErrorReport(lease=report.lease, annotation=journal.LOST)(loss)
    crashed(journaled)
    shown = scenario.wait_condition(slot, names.JOURNAL_LOST_CONDITION, "True")
    assert shown["reason"] == names.JOURNAL_WORK_MISSING and loss in shown["message"]
    journaled.start()
    holds_throughout(lambda: not scenario.events(names.JOURNAL_LOST_CONDITION) and condition_of(
        scenario.slot(slot)["status"], names.JOURNAL_LOST_CONDITION) == shown,
        seconds=3, message="the write the crash cut is not repeated after the restart")


@pytest.mark.serial
def test_admission_bounds_the_store_error(scenario: Scenario, journaled: OperatorProcess,
                                          validating: None) -> None:
    slot, report = active_slot(scenario, journaled, crash_at="journal-unavailable")
    report(ERROR)  # within its bound: admitted
    crashed(journaled)
    scenario.wait_condition(slot, CONDITION, "True", timeout=60)
    journaled.start()
    api = report.lease.api
    too_long = "x" * (bounds.JOURNAL_ERROR_BYTES + 1)
    refused = pytest.raises(Exception, match=f"at most {bounds.JOURNAL_ERROR_BYTES} bytes")
    with refused:
        api.request("PATCH", report.lease.path, body={"metadata": {"annotations": {
            names.JOURNAL_ERROR_ANNOTATION: too_long}}}, content_type=rest.MERGE_PATCH)
    lease = scenario.lease(f"{slot}-1")
    assert lease is not None
    assert lease["metadata"]["annotations"][names.JOURNAL_ERROR_ANNOTATION] == ERROR
