"""The example LangGraph agent killed at seeded supersteps, over real attempt Leases and a
real store, its side effect owned by the owner's kit on a real HTTP server.

No operator and no node: each attempt is a worker process holding its attempt's pod-bound
token (tests/support/actors/tokenworker.py), the admin plays the operator (tombstones the
killed attempt's Lease, makes the next), and the kill is a real SIGKILL of that process.
The example (``agentrun.examples.langgraph_agent``): a ``StateGraph`` of plan, a 110-round
tool loop and write, 220+ supersteps, its state past 1 MiB, its stand-in model's words and
tool arguments drawn anew in every attempt; ``write`` publishes through the ledger to an
ASGI app behind ``agentrun.owner.EffectMiddleware`` (uvicorn on 127.0.0.1).

Shown: ten kills at seeded supersteps, then one while the owner applies the publish
(intent committed, outcome not); every successor resumes at the superstep after the last
committed one; each kill repeats at most one superstep; every checkpoint committed before
a kill is in the final history with the same bytes; the owner applied the publish once,
although the successor's model wrote other words, and the report carries the owner's
first reply.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentrun.owner import EffectMiddleware, MemoryStore, Owner
from agentrun.worker import _journal as journal
from agentrun.worker.langgraph import JournalSaver
from tests.integration.operator import test_worker_records as worker_records
from tests.integration.operator.test_langgraph_saver import location
from tests.integration.operator.test_worker_records import RUN, SLOT, Attempt, worker_of
from tests.support.actors import tokenworker
from tests.support.actors.ownerapp import serving
from tests.support.s3fixtures import endpoint

pytestmark = pytest.mark.serial
attempts = worker_records.attempts
__all__ = ["attempts", "endpoint", "location"]  # fixtures this module takes from others
ROUNDS, KILLS, SEED = 110, 10, 26
CONFIG = {"configurable": {"thread_id": "main"}}
AGENT = tokenworker.PRELUDE + """
from agentrun.examples.langgraph_agent import run
with worker:
    run(worker=worker, publish_url=given["url"], rounds=given["rounds"])
"""


class Publisher:
    """The owner's app: publishes (counted); the first call first has the worker killed."""

    def __init__(self, kill: Callable[[], None]) -> None:
        self.kill, self.calls = kill, []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = (await receive()).get("body", b"")
        if not self.calls:
            await asyncio.to_thread(self.kill)  # the worker dies while its owner applies
        self.calls.append(json.loads(body))
        data = json.dumps({"published": len(self.calls), "title": self.calls[-1]["title"]})
        await send({"type": "http.response.start", "status": 201,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": data.encode()})


def kill_points() -> list[int]:
    """Ten seeded supersteps of the loop, at least four apart."""
    draw = random.Random(SEED)
    while True:
        found = sorted(draw.sample(range(3, 2 * ROUNDS), KILLS))
        if all(b - a >= 4 for a, b in itertools.pairwise(found)):
            return found


def committed(saver: JournalSaver) -> dict[str, tuple[int, str, int]]:
    """Every checkpoint of the thread: its id -> (step, sha256 and size of its values)."""
    found = {}
    for item in saver.list(CONFIG):
        _, data = saver.serde.dumps_typed(item.checkpoint["channel_values"])
        found[item.config["configurable"]["checkpoint_id"]] = (
            int(item.metadata["step"]), hashlib.sha256(data).hexdigest(), len(data))
    return found


def test_the_example_agent_killed_at_seeded_supersteps_resumes_and_publishes_once(
        attempts: Callable[[int], Attempt], location: journal.Location,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    child: list[subprocess.Popen[str]] = []

    def kill_child() -> None:
        child[-1].send_signal(signal.SIGKILL)
        child[-1].wait(timeout=60)

    app = Publisher(kill_child)
    targets, history, ran = kill_points(), {}, {}
    with serving(EffectMiddleware(app, owner=Owner(store=MemoryStore()))) as url:
        number, last, done = 0, -1, None
        while done is None:
            number += 1
            attempt = attempts(number)
            reader = worker_of(attempt, tmp_path)  # the successor's view, before it runs
            reader.journal = location
            snapshot = committed(JournalSaver(reader))
            assert all(history[c] == v for c, v in snapshot.items() if c in history)
            history.update(snapshot)
            last = max((step for step, _, _ in snapshot.values()), default=-1)
            host = attempt.leases.api_client.configuration
            given = tokenworker.given(
                host=host.host, ca=host.ssl_ca_cert, token=attempt.token,
                namespace=attempt.namespace, run=RUN, slot=SLOT, lease=attempt.name,
                endpoint=location.endpoint, bucket=location.bucket, prefix=location.prefix,
                delay=0.25, attempt=number, url=url.removesuffix("/effects"), rounds=ROUNDS)
            child.append(subprocess.Popen(
                [sys.executable, "-c", AGENT, given], stdout=subprocess.PIPE, text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"}))
            target = targets[number - 1] if number <= len(targets) else None
            steps = ran.setdefault(number, [])
            assert child[-1].stdout is not None
            for line in child[-1].stdout:
                event = json.loads(line) if line.startswith("{") else {}
                if event.get("event") == "node":
                    steps.append(event["step"])
                    if target is not None and event["step"] >= target:
                        kill_child()
                        target = None  # what it printed before it died is still read
                elif event.get("event") == "done":
                    done = event
            code = child[-1].wait(timeout=120)
            if done is None:
                assert code == -signal.SIGKILL, code
                attempt.tombstone()
            if steps:
                # resumed right after the last committed superstep (the first node of a
                # thread runs at step 1: steps -1 and 0 take the input)
                assert steps[0] == max(last + 1, 1), (number, steps[:3], last)

    assert number == KILLS + 2  # ten seeded kills, the one while publishing, the last run
    attempt.tombstone()  # ended; the journal as any later attempt would read it:
    reader = worker_of(attempts(number + 1), tmp_path)
    reader.journal = location
    final = committed(JournalSaver(reader))
    assert all(final[c] == v for c, v in history.items())  # committed bytes never changed
    repeated = {n: sorted(set(ran[n]) & set(s for k in range(n + 1, number + 1)
                                           for s in ran[k])) for n in ran}
    assert all(len(steps) <= 1 for steps in repeated.values()), repeated
    assert sum(len(s) for s in repeated.values()) >= KILLS  # each kill cost a superstep
    steps, _, size = max(final.values())
    assert steps >= 2 * ROUNDS + 2 and size > 1 << 20  # 220+ supersteps, state past 1 MiB
    with capsys.disabled():
        print(f"\nlanggraph kills: {KILLS} at supersteps {targets} and one while publishing; "
              f"{number} attempts; repeated {repeated}; {len(final)} checkpoints, "
              f"the last at step {steps} with {size} bytes of state")
    assert len(app.calls) == 1  # published once, though the successor's model said otherwise
    first_title = app.calls[0]["title"]
    assert f'"title": "{first_title}"' in done["report"]  # the owner's first reply, kept
    assert not done["report"].startswith(first_title)  # the successor wrote other words
