"""``runtime.Operator.until_stamping``: a starting operator waits for its epoch (no cluster).

Covers: it returns once the epoch is in force, after as many passes as the keeper needs
(minting when due), with ``/readyz`` 503 saying why until then and 200 after; it does not
wait when no epoch can be minted by waiting (policy or binding missing or edited), and
stays unready; a failing check is retried, not fatal; ``stop`` leaves it unready.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Iterator
from typing import Any, cast

import pytest

from agentrun.controller import runtime
from agentrun.core.policies import stamping

IDENTITY = stamping.Identity(policy="p/1", binding="b/1")
NEEDED = stamping.Stamping(epoch=None, problem="the Secret does not exist",
                           identity=IDENTITY)
IN_FORCE = stamping.Stamping(epoch="e-1", problem=None, identity=IDENTITY)
EDITED = stamping.Stamping(epoch=None, problem="the policy is not as shipped")


class Keeper:
    """Answers each check with the next of ``answers`` (an exception is raised)."""

    def __init__(self, answers: list[stamping.Stamping | Exception]) -> None:
        self.answers: Iterator[stamping.Stamping | Exception] = iter(answers)
        self.checks = 0
        self.ready_seen: list[bool] = []
        self.meters: Any = None

    def check(self) -> stamping.Stamping:
        self.checks += 1
        self.ready_seen.append(self.meters.ready.is_set())
        answer = next(self.answers)
        if isinstance(answer, Exception):
            raise answer
        return answer


def operator(keeper: Keeper) -> runtime.Operator:
    made = runtime.Operator(
        client=cast(Any, None), stores=cast(Any, None), slots=cast(Any, None),
        runs=cast(Any, None), launch_specs=cast(Any, None), keeper=cast(Any, keeper),
        poster=cast(Any, None), logger=logging.getLogger("test"), workers=1, timeout=1.0,
        executor=concurrent.futures.ThreadPoolExecutor(max_workers=1))
    keeper.meters = made.meters
    return made


@pytest.fixture(autouse=True)
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "STAMPING_WAIT_SECONDS", 0.0)
    monkeypatch.setattr(runtime, "PRIME_BACKOFF", runtime.queues.Backoff(base=0.0, cap=0.0))


def test_it_waits_until_the_epoch_is_in_force_unready_until_then() -> None:
    keeper = Keeper([NEEDED, NEEDED, RuntimeError("a 500"), NEEDED, IN_FORCE])
    made = operator(keeper)
    made.meters.unready("the stamping epoch is not in force yet")
    asyncio.run(made.until_stamping())
    assert keeper.checks == 5
    assert keeper.ready_seen == [False] * 5  # never ready before the epoch
    assert made.meters.ready.is_set()


def test_it_does_not_wait_for_what_waiting_cannot_bring() -> None:
    keeper = Keeper([EDITED])
    made = operator(keeper)
    asyncio.run(made.until_stamping())
    assert keeper.checks == 1
    assert not made.meters.ready.is_set()
    assert "not as shipped" in made.meters.waiting_for


def test_stop_leaves_it_unready() -> None:
    keeper = Keeper([IN_FORCE])
    made = operator(keeper)

    async def life() -> None:
        await made.until_stamping()
        assert made.meters.ready.is_set()
        await made.stop()
    asyncio.run(life())
    assert not made.meters.ready.is_set() and made.meters.waiting_for == "stopping"
