"""The shared reconcile loop: conflicts are retried, errors and endless loops give up."""

from __future__ import annotations

import logging
from collections.abc import Callable

from agentrun.controller import reconcilers
from agentrun.kube import writes

LOGGER = logging.getLogger("test")


def steps_of(*outcomes: bool | Exception) -> tuple[Callable[[], bool], list[int]]:
    calls: list[int] = []

    def step() -> bool:
        outcome = outcomes[len(calls)]
        calls.append(1)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return step, calls


def test_a_conflict_means_another_step() -> None:
    step, calls = steps_of(writes.Conflict("409"), False, True)
    assert reconcilers.settle(step, what="x", logger=LOGGER, max_steps=5)
    assert len(calls) == 3


def test_an_error_ends_the_loop_unsettled() -> None:
    step, calls = steps_of(False, ValueError("500"), True)
    assert not reconcilers.settle(step, what="x", logger=LOGGER, max_steps=5)
    assert len(calls) == 2


def test_a_loop_that_never_settles_ends_at_its_bound() -> None:
    step, calls = steps_of(*([False] * 4))
    assert not reconcilers.settle(step, what="x", logger=LOGGER, max_steps=4)
    assert len(calls) == 4
