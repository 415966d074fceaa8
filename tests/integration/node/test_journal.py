"""The journal on the real node, in the cluster's own object store (the bundled SeaweedFS).

The operator runs with the store pinned on each run it launches (``--journal-*``); worker
pods commit steps through the SDK into the store, and the head on their Lease.

- kill points: attempt 1 is SIGKILLed from the node after a step's node object is stored
  and before its head advance; attempt 2 after a head advance, before the step returns;
  attempt 3 finishes. Each successor skips exactly what was committed (the unreachable
  object of attempt 1 is repeated), every result is read back intact (sha256 of the
  payload as the worker made it), nothing is on the Lease but the head, and the store's
  own listing shows the object no head reaches;
- a stale attempt (its pod present, its token valid) after its successor was claimed:
  its head advance is refused by admission (message shown), its late object is stored but
  unreachable, and the successor's fresh prefix holds none of it; a head moved backwards
  by its own holder is refused too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrun import objectstore as s3
from agentrun.api import names
from agentrun.core.policies.leasepolicy import ATTEMPT_LEASES
from agentrun.worker import _journal as journal
from agentrun.worker import _journalcommits as journalcommits
from agentrun.worker import _records as records
from tests.integration.node import stale
from tests.integration.operator import conftest as operator_fixtures
from tests.support.actors.operators import OperatorProcess
from tests.support.actors.workers import (
    container_pid,
    kill_on_node,
    token_client,
    wait_pod_phase,
    wait_printed,
)
from tests.support.cluster import store
from tests.support.cluster.localnode import LocalNode
from tests.support.plays.scenarios import Scenario

pytestmark = pytest.mark.kubelet
validating = operator_fixtures.validating  # the shipped policies (cluster-wide: serial)
owner = stale.owner
TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
STEPS = 20
# Sizes by step: inline (100 B), by reference (5 KiB, 300 KiB) and one of 3 MiB.
SIZES = {i: [100, 5 * 1024, 300 * 1024][i % 3] for i in range(STEPS)} | {7: 3 * 1024 * 1024}

# Every attempt makes step i's payload from i alone, so its digest is known in advance.
# Attempt 1 stops (blocks, for the test to kill it) inside step 10's commit after the node
# object is stored; attempt 2 inside step 15's commit after the head advanced.
KILLED = f"""
import hashlib, threading
from agentrun.worker import _journal as journal
from agentrun.worker import _journalcommits as journalcommits
from agentrun.worker import _records as records
STEPS = {STEPS}
SIZES = {SIZES!r}
def payload(i):
    return {{"step": i, "text": ("s%03d-" % i) * (SIZES[i] // 5)}}
def block(point):
    say(kill_point=point)
    threading.Event().wait()
advance = journalcommits.JournalRecords._advance
def patched(self, new, usage, **counted):
    attempt = self.lease.attempt
    if attempt == 1 and new.seq == 11:
        block("after the node object, before the head")
    advance(self, new, usage, **counted)
    if attempt == 2 and new.seq == 6:
        block("after the head, before the step returns")
journalcommits.JournalRecords._advance = patched
with Worker.from_env(commit_delay=0) as worker:  # a node per step: kill points by seq
    results = {{}}
    for i in range(STEPS):
        value = worker.step("s%03d" % i, do=lambda i=i: payload(i))
        results[i] = hashlib.sha256(records.canonical(value)).hexdigest()
    say(done=worker.steps.done, repeated=worker.steps.repeated, digests=results)
"""


STALE_PREFIX = f"""
from agentrun.worker import _journal as journal
from agentrun.worker import _journalcommits as journalcommits
TOKEN_FILE = {TOKEN_FILE!r}
"""


def expected_digest(i: int) -> str:
    text = (f"s{i:03d}-") * (SIZES[i] // 5)
    return hashlib.sha256(records.canonical({"step": i, "text": text})).hexdigest()


@pytest.fixture
def journaled(scenario: Scenario, installed: None, tmp_path: Path) -> Iterator[OperatorProcess]:
    """The operator, pinning the cluster's bundled store on each run it launches."""
    process = OperatorProcess(
        cluster=scenario.cluster, namespace=scenario.namespace, log=tmp_path / "operator.log",
        args=["--journal-endpoint", store.STORE_ENDPOINT, "--journal-bucket", store.BUCKET])
    yield process.start()
    process.stop()
    print(f"--- operator log (tail) ---\n{process.tail(40)}")


installed = operator_fixtures.installed


def objects() -> s3.ObjectStore:
    return s3.ObjectStore(endpoint=store.host_endpoint(), bucket=store.BUCKET,
                          credentials=s3.credentials_from(None))


def head_of(scenario: Scenario, lease: str) -> journal.Head:
    found = scenario.lease(lease)
    assert found is not None, lease
    annotations = found["metadata"].get("annotations") or {}
    assert not [k for k in annotations if k.startswith(records.PREFIX)], annotations
    return journal.Head.parse(annotations[names.JOURNAL_HEAD_ANNOTATION])


def kill(scenario: Scenario, node: LocalNode, pod: str) -> str:
    point = wait_printed(scenario, pod, "kill_point", timeout=120)["kill_point"]
    found = scenario.pod(pod)
    assert found is not None
    kill_on_node(container_pid(node, found), pod_uid=found["metadata"]["uid"])
    wait_pod_phase(scenario, pod, {"Failed"})
    return str(point)


def test_killed_attempts_resume_from_what_their_heads_reach(
        scenario: Scenario, journaled: OperatorProcess, worker_image: str, node: LocalNode,
        owner: stale.TimedOwner) -> None:
    slot = stale.sdk_run(scenario, image=worker_image, script=KILLED, owner=owner,
                         max_attempts=3)
    pinned = scenario.agentrun("study")["status"]["pinned"]["journal"]
    uid = scenario.agentrun("study")["metadata"]["uid"]
    assert pinned["endpoint"] == store.STORE_ENDPOINT and pinned["bucket"] == store.BUCKET
    assert pinned["prefix"] == f"agentrun/{scenario.namespace}/{uid}"
    first, second, third = (f"{slot}-{n}" for n in (1, 2, 3))
    assert kill(scenario, node, first) == "after the node object, before the head"
    assert kill(scenario, node, second) == "after the head, before the step returns"
    done = wait_printed(scenario, third, "done", timeout=180)
    keys = [f"s{i:03d}" for i in range(STEPS)]
    assert done["done"] == keys[:16] and done["repeated"] == []
    assert done["digests"] == {str(i): expected_digest(i) for i in range(STEPS)}
    assert scenario.wait_state(slot, "Succeeded", timeout=60)["status"]["attempts"][-1][
        "outcome"] == "Succeeded"

    heads = {n: head_of(scenario, f"{slot}-{n}").seq for n in (1, 2, 3)}
    assert heads == {1: 10, 2: 6, 3: 4}
    base = f"{pinned['prefix']}/{slot}"
    listing = objects().list(base + "/")
    nodes_of_1 = [k for k in listing if k.startswith(f"{base}/1/")]
    reachable, _ = journal.Journal(objects=objects(), prefix=pinned["prefix"],
                                   slot=slot).chain(attempt=1, head=head_of(scenario, first))
    assert sorted(reachable) == keys[:10]
    print(f"store: {len(listing)} objects under {base}; attempt 1 stored "
          f"{len(nodes_of_1)} (its head reaches 10 commits); heads {heads}; "
          f"attempt 3 skipped {len(done['done'])}")


@pytest.mark.serial
def test_a_stale_attempts_late_commit_is_refused_and_unreachable(
        scenario: Scenario, validating: None, journaled: OperatorProcess, worker_image: str,
        owner: stale.TimedOwner) -> None:
    script = STALE_PREFIX + """
with Worker.from_env() as worker:
    c = worker.context
    worker.step("gather", do=lambda: {"notes": "x" * 4000, "by": c.attempt})
    if c.attempt == 1:
        say(token=open(TOKEN_FILE).read())
        sys.exit(3)
    worker.step("decide", do=lambda: "by attempt 2", durable=True)
    worker.step("write", do=lambda: "by attempt 2", durable=True)  # two head advances
    ledger = worker.steps.ledger
    back = journal.Head(seq=1, digest=ledger.head.digest)
    try:
        ledger._advance(back, ledger.usage)
        say(backwards="accepted")
    except Exception as error:
        say(backwards=str(error))
    wait_released(worker, "checked")
    fresh = prefix.prefix(attempt=c.attempt, journal=ledger.journal, leases=prefix.list_leases(
        api=worker.api, namespace=c.namespace, slot=c.slot, run=c.run))
    say(prefix=sorted(fresh.committed), problems=list(fresh.problems))
"""
    slot = stale.sdk_run(scenario, image=worker_image, owner=owner, max_attempts=2,
                         script=script)
    first, second = f"{slot}-1", f"{slot}-2"
    token = wait_printed(scenario, first, "token")["token"]
    backwards = wait_printed(scenario, second, "backwards", timeout=120)["backwards"]
    assert ATTEMPT_LEASES in backwards and "only moves forward" in backwards, backwards

    pinned = scenario.agentrun("study")["status"]["pinned"]["journal"]
    stale_journal = journal.Journal(objects=objects(), prefix=pinned["prefix"], slot=slot)
    before = head_of(scenario, first)
    late = journalcommits.JournalRecords(
        journal=stale_journal, head=before, lease=records.LeaseRecords(
            api=token_client(scenario, token), namespace=scenario.namespace, lease=first,
            attempt=1))
    with pytest.raises(records.RecordRefused) as refused:
        late.commit(records.make(key="late", kind=records.Kind.STEP_RESULT, attempt=1,
                                 payload="written after the successor was claimed"))
    assert ATTEMPT_LEASES in str(refused.value) and "tombstoned" in str(refused.value)
    assert head_of(scenario, first) == before
    stored = objects().list(f"{pinned['prefix']}/{slot}/1/")
    assert len(stored) == before.seq + 2  # its nodes, one payload, and the late node

    stale.release(owner, "checked")
    fresh = wait_printed(scenario, second, "prefix")
    assert fresh == {"prefix": ["decide", "gather", "write"], "problems": []}, fresh
    print(f"refused: {refused.value}; backwards: {backwards}; store under attempt 1: "
          f"{len(stored)} objects, its head at {before.seq}")
