"""bench/loop/goals.py: the control loop's goals judged from rows, each goal able to fail."""

from __future__ import annotations

import os
from dataclasses import dataclass

from bench.loop.goals import goal_table


@dataclass
class FakeRow:
    units: int
    who: str
    qps: str
    seconds: float
    mode: str
    per_pod: float
    apiserver_cpu_per_pod: float

    @property
    def pods_per_second(self) -> float:
        return self.units / self.seconds


def rows(*, ours_default_s: float, ours_unthrottled_s: float, ours_cpu: float) -> list[FakeRow]:
    job, ours = "Indexed Job (Job controller)", "agentrun operator"
    return [FakeRow(1000, job, "20/30", 50.0, "defaults", 1.0, 0.002),
            FakeRow(1000, ours, "20/30", 240.0, "equal", 4.4, 0.004),
            FakeRow(1000, ours, "100/150", ours_default_s, "defaults", 4.4, 0.004),
            FakeRow(1000, job, "none", 4.0, "unthrottled", 1.0, 0.002),
            FakeRow(1000, ours, "none", ours_unthrottled_s, "unthrottled", 4.4, ours_cpu)]


def mets(table: str) -> list[str]:
    return [line.rsplit("|", 2)[1].strip() for line in table.splitlines()[2:]]


def test_every_goal_met() -> None:
    table = goal_table(rows(ours_default_s=45.0, ours_unthrottled_s=7.0, ours_cpu=0.005))
    assert mets(table) == ["yes", "yes", "yes", "yes"]
    assert "(a) 1,000 units, equal QPS 20" in table and "20 / 4.40 = 4.5" in table


def test_every_goal_missed() -> None:
    table = goal_table(rows(ours_default_s=55.0, ours_unthrottled_s=15.0, ours_cpu=0.007))
    assert mets(table)[1:] == ["no", "no", "no"]
    assert "| 55.0 s | 50.0 s | 1.10 | no |" in table


def test_a_size_without_its_rows_has_no_goal_lines() -> None:
    assert goal_table([]).splitlines()[2:] == []


def test_cpu_seconds_of_this_process_grow() -> None:
    from bench.loop.support import cpu_seconds  # imports the test support's kubernetes machinery

    before = cpu_seconds(os.getpid())
    sum(i * i for i in range(3_000_000))
    assert cpu_seconds(os.getpid()) > before
