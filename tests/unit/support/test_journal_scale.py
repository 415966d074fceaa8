"""The ``journal-scale`` scenario's inputs (tests/support/faults/scaleworker.py): what its
checker relies on, without a cluster: the sizes keep their stated bounds and the pod makes
the very same ones itself, a payload and the artifact are known in advance, and the kill
plan can be played (a window before the artifact, a part of it, a window after it)."""

from __future__ import annotations

import hashlib

import pytest

from agentrun.api import records as api_records
from tests.support.faults import scaleworker as worker


def test_the_sizes_keep_the_stated_distribution() -> None:
    sizes = worker.sizes()
    assert sizes == worker.sizes()  # seeded: the same every play
    assert len(sizes) == worker.STEPS and sum(sizes) <= worker.TOTAL_BOUND
    assert sum(sizes) + worker.ARTIFACT_BYTES < 4 * worker.GIB
    assert min(sizes) >= 100 and max(sizes) == 10 * worker.MIB
    assert sizes[worker.ARTIFACT_AT - 1] == 10 * worker.MIB  # the RSS baseline
    assert sum(s > worker.MIB for s in sizes) == 21
    assert f"{sum(sizes) / worker.MIB:.0f} MiB" in worker.bands(sizes)


def test_the_pod_makes_the_same_sizes_from_its_script() -> None:
    text = worker.script(kills=worker.plan(seed=1))
    made: dict[str, object] = {}
    exec(text[:text.index("\nimport hashlib, json")], made)  # the constants and functions
    assert made["SIZES"] == worker.sizes()
    assert made["sizes_digest"](made["SIZES"]) == worker.sizes_digest(worker.sizes())  # type: ignore[operator]


@pytest.mark.parametrize("size", [100, 1025, 64 * 1024, 10 * 1024 * 1024])
def test_a_payload_is_its_size_and_known_in_advance(size: int) -> None:
    data = api_records.canonical(worker.payload(12345, size))
    assert len(data) == size
    assert hashlib.sha256(data).hexdigest() == worker.expected_digest(12345, size)
    assert worker.expected_digest(12346, size) != worker.expected_digest(12345, size)


def test_the_artifact_blocks_differ_and_fill_it() -> None:
    assert len(worker.artifact_block(0)) == worker.BLOCK_BYTES
    assert worker.artifact_block(0) != worker.artifact_block(1)
    assert worker.ARTIFACT_BYTES % worker.BLOCK_BYTES == 0


@pytest.mark.parametrize("seed", [*range(20), 31, 2**31 - 2])
def test_a_plan_is_a_window_a_part_and_a_window(seed: int) -> None:
    plan = worker.plan(seed=seed)
    assert [(k.attempt, k.phase) for k in plan] == [
        (1, worker.IN_WINDOW), (2, worker.MID_UPLOAD), (3, worker.IN_WINDOW)]
    before, part, after = plan
    # the flusher held from a step that exists (the window may reach below MARGIN)
    assert 0 < before.at - before.window < before.at < worker.ARTIFACT_AT - worker.MARGIN
    assert 2 <= part.at < worker.ARTIFACT_PARTS  # a part not the first, not past the last
    assert worker.ARTIFACT_AT < after.at - after.window < after.at < worker.STEPS
    for window in (before.window, after.window):
        assert worker.WINDOWS[0] <= window <= worker.WINDOWS[1]
    assert plan == worker.plan(seed=seed)


def test_the_pod_script_compiles_with_the_plan_in_it() -> None:
    plan = worker.plan(seed=3)
    text = worker.script(kills=plan)
    compile(text, "<pod>", "exec")
    assert f"KILLS = {dict((k.attempt, (k.phase, k.at, k.window)) for k in plan)!r}" in text
    assert len(text.encode()) < 128 * 1024  # one argument of the pod's command (MAX_ARG_STRLEN)
