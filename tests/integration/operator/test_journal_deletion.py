"""A run's journal is deleted with the run, over the real API server and a real S3 store.

The operator pins a loopback SeaweedFS on the run (``--journal-*``); objects are written
under the run's prefix as its workers would. Covers: the finalizer ``agentrun.dev/journal``
goes on the run before its slot exists, and the operator killed right after that write
(crash point ``journal-owned``) goes on from there; the run deleted while the store is
stopped stays, its journal kept, with ``JournalDeleted`` False naming the store and the
way out (a Warning Event); the store started again at the same address, the operator
(killed right after removing the finalizer: ``journal-released``) deletes every object
under the run's prefix, and only there (another run's objects stay), then the run is gone.
"""

from __future__ import annotations

from collections.abc import Iterator
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


@pytest.fixture
def process(scenario: Scenario, installed: None, tmp_path: Path,
            at: list[int]) -> Iterator[OperatorProcess]:
    found = OperatorProcess(cluster=scenario.cluster, namespace=scenario.namespace,
                            log=tmp_path / "operator.log",
                            args=["--journal-endpoint", endpoint_at(at),
                                  "--journal-bucket", BUCKET])
    yield found
    found.stop()
    print(f"--- operator log (tail) ---\n{found.tail(40)}")


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

    def waiting() -> dict[str, str] | None:
        found = condition_of(scenario.agentrun(RUN).get("status", {}),
                             names.JOURNAL_DELETED_CONDITION)
        return found if found and found["status"] == "False" else None

    shown = wait_for(waiting, timeout=60, message="JournalDeleted False while the store is down")
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
