"""The ``journal-matrix`` scenario's inputs (tests/support/faults/journalworker.py): what its
figures and its checker rely on, without a cluster: the sizes keep their stated bounds,
a payload is exactly its size and known in advance, and the kill plan can be played (one
attempt per point, at distinct steps in order, each named point once)."""

from __future__ import annotations

import hashlib

import pytest

from agentrun.api import bounds
from agentrun.api import records as api_records
from tests.support.faults import journalworker as worker


def test_the_sizes_keep_the_stated_distribution() -> None:
    sizes = worker.sizes()
    assert sizes == worker.sizes()  # seeded: the same every play
    assert len(sizes) == worker.STEPS and sum(sizes) <= worker.TOTAL_BOUND
    assert min(sizes) >= 100 and max(sizes) == 8 * worker.MIB
    assert sizes.count(8 * worker.MIB) >= worker.FULL
    assert sum(s < 64 * worker.KIB for s in sizes) == 1800
    assert sum(s > worker.MIB for s in sizes) == 20
    assert "1800" in worker.bands(sizes) and str(sum(sizes)) in worker.bands(sizes)


@pytest.mark.parametrize("size", [100, 1025, 64 * 1024, 8 * 1024 * 1024])
def test_a_payload_is_its_size_and_known_in_advance(size: int) -> None:
    data = api_records.canonical(worker.payload(7, size))
    assert len(data) == size
    assert hashlib.sha256(data).hexdigest() == worker.expected_digest(7, size)
    assert worker.expected_digest(8, size) != worker.expected_digest(7, size)


@pytest.mark.parametrize("seed", range(20))
def test_a_plan_is_one_attempt_per_point_in_step_order(seed: int) -> None:
    sizes = worker.sizes()
    plan = worker.plan(seed=seed, kills=5, found=sizes)
    assert [k.attempt for k in plan] == list(range(1, 9))
    steps = [k.step for k in plan]
    assert steps == sorted(set(steps))  # distinct, in order: each attempt gets further
    named = sorted(k.phase for k in plan if k.named)
    assert named == sorted([worker.AFTER_NODE, worker.AFTER_HEAD, worker.MID_UPLOAD])
    for kill in plan:
        assert kill.phase in worker.PHASES
        if kill.phase == worker.MID_UPLOAD:  # a PUT to cut: a payload not inline
            assert sizes[kill.step] > bounds.INLINE_PAYLOAD_BYTES
            assert not kill.named or sizes[kill.step] >= worker.MIB
    assert plan == worker.plan(seed=seed, kills=5, found=sizes)


def test_committed_counts_the_killed_step_only_after_its_head() -> None:
    assert worker.Kill(attempt=1, step=10, phase=worker.AFTER_HEAD, named=True).committed() == 11
    for phase in (worker.AFTER_NODE, worker.MID_UPLOAD, worker.IN_STEP):
        assert worker.Kill(attempt=1, step=10, phase=phase, named=False).committed() == 10


def test_the_pod_script_compiles_with_the_plan_in_it() -> None:
    sizes = worker.sizes()
    plan = worker.plan(seed=1, kills=2, found=sizes)
    text = worker.script(found=sizes, kills=plan)
    compile(text, "<pod>", "exec")
    assert f"KILLS = {dict((k.attempt, (k.step, k.phase)) for k in plan)!r}" in text
