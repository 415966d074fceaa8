"""Group commit over a real attempt Lease (pod-bound token, shipped policies) and a real store.

No operator and no node: the admin plays the operator (tests/integration/operator/
test_worker_records.py's ``Attempt``); the journal is a loopback SeaweedFS. Covers, for
the SDK's ``Worker`` with a journal: 2,000 steps in a loop cost at most 0.1 head advances
(API-server writes) per step, each step reachable from the head once flushed; an effect's
intent, and every step staged before it, is durable (reachable from the head on the real
Lease) before its call runs; a worker process sent SIGTERM with steps staged under a
10-second delay exits 143 and its staged steps are durable (the head reaches them), none
having been durable before the signal; so are a script's that started its worker and
ended without stopping it (flushed at the interpreter's exit).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentrun.api import journalnodes
from agentrun.objectstore import ObjectStore
from agentrun.worker import _journal as journal
from agentrun.worker import _records as records
from agentrun.worker._sdk import Worker
from tests.integration.operator import test_worker_records as worker_records
from tests.integration.operator.test_worker_records import RUN, SLOT, Attempt, worker_of
from tests.support.actors import tokenworker
from tests.support.s3fixtures import endpoint

pytestmark = pytest.mark.serial
attempts = worker_records.attempts
__all__ = ["attempts", "endpoint"]  # fixtures this module takes from others
STEPS = 2000



@pytest.fixture
def location(endpoint: str) -> journal.Location:
    bucket = f"gc-{uuid.uuid4().hex[:12]}"
    ObjectStore(endpoint=endpoint, bucket=bucket, credentials=lambda: None).ensure_bucket()
    return journal.Location(endpoint=endpoint, bucket=bucket, prefix="agentrun/ns/uid")


def reachable(attempt: Attempt, location: journal.Location) -> list[str]:
    """The record keys the head on the real Lease reaches, first commit first."""
    head = journal.Head.on_lease(attempt.lease())
    if head is None:
        return []
    found = journal.Journal(objects=location.objects(), prefix=location.prefix, slot=SLOT)
    keys: list[str] = []
    digest: str | None = head.digest
    for seq in range(head.seq, 0, -1):
        assert digest is not None
        data = found.get(f"{found.attempt_key(attempt.number)}/{digest}",
                         size=journalnodes.NODE_BYTES)
        digest, entries = journalnodes.read_node(data, attempt=attempt.number, seq=seq,
                                                 digest=records.digest(data))
        keys = [e.key for e in entries] + keys
    return keys


def journaled(attempt: Attempt, location: journal.Location, tmp_path: Path) -> Worker:
    worker = worker_of(attempt, tmp_path)
    worker.journal = location
    return worker


def test_a_loop_of_steps_costs_at_most_a_tenth_of_a_write_per_step(
        attempts: Callable[[int], Attempt], location: journal.Location, tmp_path: Path) -> None:
    attempt = attempts(1)
    worker = journaled(attempt, location, tmp_path)
    keys = [f"k{i:05d}" for i in range(STEPS)]
    for key in keys:
        worker.step(key, do=lambda key=key: {"step": key, "text": "x" * 150})  # ~200 B
    worker.flush()
    head = journal.Head.on_lease(attempt.lease())
    assert head is not None and head.seq <= STEPS // 10, head  # one write per head advance
    assert reachable(attempt, location) == keys
    worker.stop()


def test_an_effects_intent_and_what_was_staged_before_it_are_durable_before_its_call(
        attempts: Callable[[int], Attempt], location: journal.Location, tmp_path: Path) -> None:
    attempt = attempts(1)
    worker = journaled(attempt, location, tmp_path)
    worker.commit_delay = 10.0  # nothing flushes by itself while the test looks
    worker.step("a", do=lambda: 1)
    worker.step("b", do=lambda: 2)
    assert reachable(attempt, location) == []  # staged only
    seen: list[list[str]] = []

    def call(key: str, token: int) -> dict[str, Any]:
        seen.append(reachable(attempt, location))
        return {"sent": key}

    worker.effect("publish", key="publish", call=call)
    assert seen == [["a", "b", "publish.intent"]]
    assert reachable(attempt, location) == ["a", "b", "publish.intent", "publish.outcome"]
    worker.stop()


def given_to(attempt: Attempt, location: journal.Location) -> str:
    """What a worker process of ``attempt`` is given: its token, its journal, a 10 s delay."""
    host = attempt.leases.api_client.configuration
    return tokenworker.given(host=host.host, ca=host.ssl_ca_cert, token=attempt.token,
                             namespace=attempt.namespace, run=RUN, slot=SLOT,
                             lease=attempt.name, endpoint=location.endpoint,
                             bucket=location.bucket, prefix=location.prefix, delay=10.0)


SIGTERMED = tokenworker.PRELUDE + """
with worker:
    for i in range(50):
        worker.step("t%02d" % i, do=lambda i=i: i)
    print(json.dumps({"staged": len(worker.steps.ledger.staged)}), flush=True)
    threading.Event().wait()
"""


def test_sigterm_makes_the_staged_steps_durable_before_the_worker_exits(
        attempts: Callable[[int], Attempt], location: journal.Location) -> None:
    attempt = attempts(1)
    given = given_to(attempt, location)
    child = subprocess.Popen([sys.executable, "-c", SIGTERMED, given], stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # blocks until the child has staged its steps
        assert json.loads(line) == {"staged": 50}, line
        assert reachable(attempt, location) == []  # nothing durable before the signal
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        child.kill()
        child.wait()
    assert reachable(attempt, location) == [f"t{i:02d}" for i in range(50)]


FORGOTTEN = tokenworker.PRELUDE + """
worker.start()  # no with, no stop: the script just ends
for i in range(30):
    worker.step("f%02d" % i, do=lambda i=i: i)
print(json.dumps({"staged": len(worker.steps.ledger.staged)}), flush=True)
"""


def test_a_worker_never_stopped_makes_its_staged_steps_durable_as_its_script_ends(
        attempts: Callable[[int], Attempt], location: journal.Location) -> None:
    attempt = attempts(1)
    given = given_to(attempt, location)
    done = subprocess.run([sys.executable, "-c", FORGOTTEN, given], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"staged": 30}  # none durable when the script ended
    assert reachable(attempt, location) == [f"f{i:02d}" for i in range(30)]

