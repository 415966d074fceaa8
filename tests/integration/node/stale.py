"""What the stale-attempt tests on the node share: an SDK worker's prelude and the owner.

A worker here is ``python3 -c PRELUDE + script`` in the project's image (the SDK's keeper
the only renewer, as in ``test_worker_keeper_pod.py``). The prelude gives the script the
effect owner's client, in the owner's kit's protocol (``agentrun.owner.Effect``'s
headers; ``effectowner.CLIENT``): ``sender(worker)`` (the effect's ``call``: POST with the
idempotency key, the fencing token and the scope, the run's uid and the slot, that the
owner fences per), ``ask`` (the effect's ``reconcile``: a status query) and
``wait_released(worker, name)``, which waits, renewing, until the test says go
(:func:`release`: the owner applies the word ``name``'s key, ``effectowner.word_key``, in
the scope ``test``, so a status query of it answers "applied"). A worker says what it did
by printing one JSON object a line (``say``; read with ``workers.printed``).
:func:`sdk_run` makes the run and its LaunchSpec; the ``owner`` fixture serves the owner
on the node bridge's address (test modules take it with ``owner = stale.owner``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentrun.owner import Effect, Reply
from tests.support.actors.effectowner import CLIENT, EffectOwner, word_key
from tests.support.actors.workers import (
    OWNER_ENV,
    grant_worker_role,
    node_address,
    real_launch_spec,
)
from tests.support.plays.scenarios import Scenario

PRELUDE = CLIENT + """
import sys, time
from agentrun.worker import _effects as effects
from agentrun.worker import _keeper as keeper
from agentrun.worker import _prefix as prefix
from agentrun.worker._sdk import Worker
def say(**fields):
    print(json.dumps(fields), flush=True)
def sender(worker):
    scope = worker.context.run_uid + "/" + worker.context.slot
    def post(key, token):
        headers = {**Effect(key=key, token=token, scope=scope).headers(),
                   "Content-Type": "application/json"}
        request = urllib.request.Request(OWNER, data=b"null", method="POST", headers=headers)
        with urllib.request.urlopen(request, timeout=150) as answer:
            return json.load(answer)
    return post
def ask(key):
    found = status(key)
    say(reconciled=found["answer"], key=key, at=time.time())
    return effects.Reconciled(answer=effects.Answer(found["answer"]),
                              result=found.get("result"))
def wait_released(worker, name, timeout=120):
    deadline = time.monotonic() + timeout
    while not said(name):
        if time.monotonic() > deadline:
            raise SystemExit("the test never released " + name)
        worker.keeper.ensure_live()
        time.sleep(0.3)  # in the pod: the poll of a wait-for-condition (the release)
"""
RELEASE_FENCE = "test"


def release(owner: EffectOwner, name: str) -> None:
    """Let a worker waiting in ``wait_released(worker, name)`` go on."""
    status, _ = owner.effect(key=word_key(name), token=0, fence=RELEASE_FENCE, payload=None)
    assert status == 200, status


@dataclass(kw_only=True)
class TimedOwner(EffectOwner):
    """The test's effect owner, also noting each effect's arrival (this machine's clock,
    which the API server's audit log also uses): (time, key, token)."""

    arrivals: list[tuple[float, str, int]] = field(default_factory=list)

    def decide(self, effect: Effect, *, body: bytes) -> Reply:
        if effect.token is not None and effect.scope != RELEASE_FENCE:
            self.arrivals.append((time.time(), effect.key, effect.token))
        return super().decide(effect, body=body)

    def worker_posts(self) -> list[Any]:
        """The POSTs workers sent (the release words left out), in order."""
        return [r for r in self.posts() if r.fence != RELEASE_FENCE]


@pytest.fixture
def owner(scenario: Scenario) -> Iterator[TimedOwner]:
    """The effect owner on the node bridge's address; it applies at once unless a test
    gives it a ``hold``."""
    found = TimedOwner(host=node_address(scenario))
    found.start()
    yield found
    found.stop()


def sdk_run(scenario: Scenario, *, image: str, script: str, owner: TimedOwner,
            max_attempts: int) -> str:
    """A run of one node, Automatic, whose attempts run ``PRELUDE + script``: its slot."""
    grant_worker_role(scenario)
    scenario.configs()
    real_launch_spec(scenario, "sdk-workers", classes=["cpu"], image=image,
                     script=PRELUDE + script, renewer=False, env={OWNER_ENV: owner.url})
    scenario.run("study", max_attempts=max_attempts)
    return scenario.slot_name_eventually("study", "research")
