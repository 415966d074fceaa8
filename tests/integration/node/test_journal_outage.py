"""The cluster's own store stopped for 60 s under a running worker, on the real node.

Attempt 1 commits ten steps (payloads by reference), then the test stops the bundled
store (its Deployment scaled to 0, the pod gone, nothing answering at its address) and
lets the worker go on. Covers: the worker's next commit retries and reports; the slot
shows ``JournalUnavailable`` True naming the store and the error; for the 60 s the store
is down the head on the Lease does not move and the worker reports no step committed (none
reported committed that was not); the store started again, the commit lands, the condition
turns False by itself, the attempt finishes the other ten steps and the slot Succeeds on
attempt 1 (the outage cost no attempt); every step's result reads back intact from the
store through the final head (sha256 as the worker made it).

Serial: it stops the store every test of the session shares.
"""

from __future__ import annotations

import hashlib
import time

import pytest

from agentrun import bundledstore, manifests
from agentrun.api import names
from agentrun.worker import _journal as journal
from agentrun.worker import _records as records
from tests.integration.node import stale
from tests.integration.node.test_journal import head_of, installed, journaled, objects
from tests.support.actors.operators import OperatorProcess
from tests.support.actors.workers import printed, wait_printed
from tests.support.cluster import store
from tests.support.plays.scenarios import Scenario, holds_throughout
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.kubelet, pytest.mark.serial]
owner = stale.owner
__all__ = ["installed", "journaled", "owner"]  # fixtures this module takes from others
OUTAGE_SECONDS = 60
CONDITION = names.JOURNAL_UNAVAILABLE_CONDITION

SCRIPT = """
import hashlib
from agentrun.worker import _records as records
def payload(i):
    return {"step": i, "text": ("o%03d-" % i) * 600}
with Worker.from_env() as worker:
    digests = {}
    def run(i):
        value = worker.step("o%03d" % i, do=lambda: payload(i), durable=True)
        digests[i] = hashlib.sha256(records.canonical(value)).hexdigest()
    for i in range(10):
        run(i)
    say(first=10)
    wait_released(worker, "stopped")
    for i in range(10, 20):
        run(i)
        say(committed=i, at=time.time())
    say(done=worker.steps.done, repeated=worker.steps.repeated, digests=digests)
"""


def expected_digest(i: int) -> str:
    return hashlib.sha256(records.canonical({"step": i, "text": f"o{i:03d}-" * 600})).hexdigest()


def scale_store(scenario: Scenario, replicas: int) -> None:
    scaled = scenario.cluster.kubectl(
        "-n", manifests.OPERATOR_NAMESPACE, "scale", "deployment", bundledstore.STORE,
        f"--replicas={replicas}")
    assert scaled.returncode == 0, scaled.stderr


def store_pods(scenario: Scenario) -> list[str]:
    listed = scenario.cluster.kubectl(
        "-n", manifests.OPERATOR_NAMESPACE, "get", "pods", "-o", "name", "-l",
        f"app.kubernetes.io/name={bundledstore.STORE}")
    assert listed.returncode == 0, listed.stderr
    return listed.stdout.split()


def test_a_store_stopped_for_a_minute_costs_a_wait_and_no_commit(
        scenario: Scenario, journaled: OperatorProcess, worker_image: str,
        owner: stale.TimedOwner) -> None:
    slot = stale.sdk_run(scenario, image=worker_image, script=SCRIPT, owner=owner,
                         max_attempts=2)
    pod = f"{slot}-1"
    wait_printed(scenario, pod, "first", timeout=180)
    assert head_of(scenario, pod).seq == 10
    scale_store(scenario, 0)
    try:
        stopped = time.monotonic()
        wait_for(lambda: not store_pods(scenario) and not store.answers(
            store.host_endpoint(), timeout=2), timeout=90, message="the store stopped")
        stale.release(owner, "stopped")
        shown = scenario.wait_condition(slot, CONDITION, "True", timeout=90)
        assert shown["reason"] == names.JOURNAL_STORE_FAILING
        assert store.STORE_ENDPOINT in shown["message"], shown
        shown_after = time.monotonic() - stopped
        assert shown_after < OUTAGE_SECONDS / 2, shown_after  # the hold below is a real one
        lease = scenario.lease(pod)
        assert lease is not None
        error = lease["metadata"]["annotations"][names.JOURNAL_ERROR_ANNOTATION]
        assert error.startswith("storing ") and error in shown["message"], error
        holds_throughout(
            lambda: head_of(scenario, pod).seq == 10 and not any(
                "committed" in p for p in printed(scenario, pod)),
            seconds=max(0.0, OUTAGE_SECONDS - (time.monotonic() - stopped)),
            message="no commit while the store is down", interval=1.0)
    finally:
        scale_store(scenario, 1)
    back = store.wait_ready()
    cleared = scenario.wait_condition(slot, CONDITION, "False", timeout=90)
    assert cleared["reason"] == names.JOURNAL_STORE_ANSWERS
    done = wait_printed(scenario, pod, "done", timeout=180)
    keys = [f"o{i:03d}" for i in range(20)]
    assert done["done"] == [] and done["repeated"] == []
    assert done["digests"] == {str(i): expected_digest(i) for i in range(20)}
    finished = scenario.wait_state(slot, "Succeeded", timeout=90)["status"]
    assert [a["outcome"] for a in finished["attempts"]] == ["Succeeded"]
    head = head_of(scenario, pod)
    assert head.seq == 20
    pinned = scenario.agentrun("study")["status"]["pinned"]["journal"]
    slot_journal = journal.Journal(objects=objects(), prefix=pinned["prefix"], slot=slot)
    found, problems = slot_journal.chain(attempt=1, head=head)
    assert problems == [] and sorted(found) == keys
    payloads = slot_journal.payloads(attempt=1)
    assert {k: hashlib.sha256(records.canonical(records.payload(found[k], store=payloads)))
            .hexdigest() for k in keys} == {f"o{i:03d}": expected_digest(i) for i in range(20)}
    print(f"store down {OUTAGE_SECONDS}+ s: condition shown {shown_after:.1f} s after the stop "
          f"({error!r}); store answered {back:.1f} s after its restart; head 10 throughout, "
          f"then 20; one attempt")
