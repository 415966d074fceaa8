"""A run's journal is deleted with the run, over the real API server and a real S3 store.

The operator pins a loopback SeaweedFS on the run (``--journal-*``); objects are written
under the run's prefix as its workers would. Covers: the finalizer ``agentrun.dev/journal``
goes on the run before its slot exists, and the operator killed right after that write
(crash point ``journal-owned``) goes on from there; the run deleted while the store is
stopped stays, its journal kept, with ``JournalDeleted`` False naming the store and the
way out (a Warning Event); the store started again at the same address, the operator
(killed right after removing the finalizer: ``journal-released``) deletes every object
under the run's prefix, and only there (another run's objects stay), then the run is gone.

Retention (``--journal-retention-seconds 3``, pinned on the run): a running run's journal
is kept; once the run has Succeeded, its journal is deleted no sooner than 3 s after (the
conditions' times), only its own objects, ``JournalDeleted`` True (``RetentionExpired``,
a Normal Event), the finalizer taken off, and the run and its slots stay.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from agentrun import objectstore
from agentrun.api import names
from tests.support.actors.operators import OperatorProcess
from tests.support.plays.convergence import crashed
from tests.support.plays.scenarios import Scenario, condition_of
from tests.support.s3server import PORT_COUNT, endpoint_at, free_ports, running_s3
from tests.support.waiting import wait_for

from .test_effect_unresolved import publish

RUN = "study"
BUCKET = "journals"


@pytest.fixture
def at() -> list[int]:
    return free_ports(PORT_COUNT)


def journaled(scenario: Scenario, tmp_path: Path, at: list[int],
              *args: str) -> Iterator[OperatorProcess]:
    """The operator (not started) with the journal at the loopback store of ``at``."""
    found = OperatorProcess(cluster=scenario.cluster, namespace=scenario.namespace,
                            log=tmp_path / "operator.log",
                            args=["--journal-endpoint", endpoint_at(at),
                                  "--journal-bucket", BUCKET, *args])
    yield found
    found.stop()
    print(f"--- operator log (tail) ---\n{found.tail(40)}")


@pytest.fixture
def process(scenario: Scenario, installed: None, tmp_path: Path,
            at: list[int]) -> Iterator[OperatorProcess]:
    yield from journaled(scenario, tmp_path, at)


def journal_deleted(scenario: Scenario, status: str, *, message: str) -> dict[str, str]:
    """The run's ``JournalDeleted`` condition, once it has ``status``."""
    def shown() -> dict[str, str] | None:
        found = condition_of(scenario.agentrun(RUN).get("status", {}),
                             names.JOURNAL_DELETED_CONDITION)
        return found if found and found["status"] == status else None

    found: dict[str, str] = wait_for(shown, timeout=60, message=message)
    return found


def store(endpoint: str) -> objectstore.ObjectStore:
    return objectstore.ObjectStore(endpoint=endpoint, bucket=BUCKET, credentials=lambda: None)


def test_a_runs_journal_goes_with_it_and_waits_for_a_silent_store(
        scenario: Scenario, process: OperatorProcess, at: list[int], tmp_path: Path) -> None:
    data = tmp_path / "s3"
    with running_s3(data, at=at) as endpoint:
        assert endpoint == endpoint_at(at)
        objects = store(endpoint)
        objects.ensure_bucket()
        publish(scenario)
        process.start(crash_at="journal-owned")
        scenario.run(RUN, claim_policy="Manual")
        crashed(process)
        run = scenario.agentrun(RUN)
        assert run["metadata"]["finalizers"] == [names.JOURNAL_FINALIZER]
        assert not scenario.custom.list_namespaced_custom_object(
            names.GROUP, names.VERSION, scenario.namespace, "slots")["items"]
        process.start()
        slot = scenario.slot_name_eventually(RUN, "research")
        scenario.wait_state(slot, "Ready")
        prefix = scenario.agentrun(RUN)["status"]["pinned"]["journal"]["prefix"]
        mine = [f"{prefix}/{slot}/1/sha256/{n:064x}" for n in range(3)]
        other = f"agentrun/{scenario.namespace}/another-run/{slot}/1/sha256/{0:064x}"
        for key in [*mine, other]:
            objects.put(key, b"committed")
    deleted = scenario.cluster.kubectl("delete", "agentrun", RUN, "-n", scenario.namespace,
                                       "--wait=false")
    assert deleted.returncode == 0, deleted.stderr

    shown = journal_deleted(scenario, "False", message="JournalDeleted False while the store "
                                                       "is down")
    assert shown["reason"] == names.JOURNAL_STORE_FAILING
    assert endpoint in shown["message"] and f"remove {names.JOURNAL_FINALIZER}" in shown["message"]
    assert scenario.wait_event(names.JOURNAL_DELETED_CONDITION, "cannot be deleted yet")
    process.stop()
    process.start(crash_at="journal-released")
    with running_s3(data, at=at):
        crashed(process)
        wait_for(lambda: not scenario.custom.list_namespaced_custom_object(
            names.GROUP, names.VERSION, scenario.namespace, "agentruns")["items"],
            timeout=60, message="the run gone once its journal is")
        assert objects.list(f"{prefix}/") == []
        assert objects.list("agentrun/") == [other]  # another run's journal stays
    process.start()


RETENTION = 3


@pytest.fixture
def retaining(scenario: Scenario, installed: None, tmp_path: Path,
              at: list[int]) -> Iterator[OperatorProcess]:
    yield from journaled(scenario, tmp_path, at, "--journal-retention-seconds", str(RETENTION))


def test_a_finished_runs_journal_goes_after_its_retention_and_the_run_stays(
        scenario: Scenario, retaining: OperatorProcess, at: list[int], tmp_path: Path) -> None:
    with running_s3(tmp_path / "s3", at=at) as endpoint:
        objects = store(endpoint)
        objects.ensure_bucket()
        publish(scenario)
        retaining.start()
        scenario.run(RUN)
        research = scenario.slot_name_eventually(RUN, "research")  # laid out once pinned
        pinned = scenario.agentrun(RUN)["status"]["pinned"]["journal"]
        assert pinned["retentionSeconds"] == RETENTION
        scenario.wait_state(research, "Active")
        mine = [f"{pinned['prefix']}/{research}/1/sha256/{n:064x}" for n in range(3)]
        other = f"agentrun/{scenario.namespace}/another-run/{research}/1/sha256/{0:064x}"
        for key in [*mine, other]:
            objects.put(key, b"committed")
        assert sorted(objects.list(f"{pinned['prefix']}/")) == sorted(mine)  # a live run: kept
        scenario.finish(f"{research}-1", "Succeeded")
        scenario.release(f"{research}-1")
        shown = journal_deleted(scenario, "True", message="JournalDeleted True after retention")
        assert shown["reason"] == names.JOURNAL_RETENTION_EXPIRED
        assert f"{RETENTION} s after the run finished" in shown["message"]
        run = scenario.agentrun(RUN)
        verdict = condition_of(run["status"], "Succeeded")
        assert verdict is not None and verdict["status"] == "True"
        kept_for = (datetime.fromisoformat(shown["lastTransitionTime"])
                    - datetime.fromisoformat(verdict["lastTransitionTime"])).total_seconds()
        assert kept_for >= RETENTION, kept_for  # not a moment before its retention
        assert objects.list(f"{pinned['prefix']}/") == []
        assert objects.list("agentrun/") == [other]  # another run's journal stays
        wait_for(lambda: names.JOURNAL_FINALIZER not in (
            scenario.agentrun(RUN)["metadata"].get("finalizers") or []), timeout=30,
            message="the finalizer off: nothing left to delete with the run")
        assert scenario.slot(research)["status"]["state"] == "Succeeded"  # the run stays whole
        assert scenario.wait_event(names.JOURNAL_DELETED_CONDITION, "its retention")
    print(f"journal deleted {kept_for:.1f} s after the run finished (retention {RETENTION} s)")
