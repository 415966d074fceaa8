"""The control-loop benchmark's closing table: the project's goals against the figures.

Pure: rows in, a markdown table out ("goal | figure | reference | ratio | met"), one block
per size, so that ``bench/loop/__main__.py`` stays a runner and the goals are read in one place.
The goals: (a) at equal QPS the operator's pods/s within 10% of QPS / its writes
per pod; (b) at both tools' documented defaults its time to all pods no more than the Job
controller's; (c) unthrottled, pods/s at least 0.5x the Job controller's with API-server
CPU-seconds per pod at most 3x its.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class Measured(Protocol):
    units: int
    qps: str
    seconds: float
    mode: str

    @property
    def who(self) -> str: ...

    @property
    def per_pod(self) -> float: ...

    @property
    def pods_per_second(self) -> float: ...

    @property
    def apiserver_cpu_per_pod(self) -> float: ...


def _pick(rows: list[Measured], *, units: int, mode: str, job: bool) -> Measured | None:
    return next((r for r in rows if r.units == units and r.mode == mode
                 and r.who.startswith("Indexed") == job), None)


def _line(goal: str, figure: str, reference: str, ratio: float, met: bool) -> str:
    return f"| {goal} | {figure} | {reference} | {ratio:.2f} | {'yes' if met else 'no'} |"


def goal_lines(rows: list[Measured], *, units: int) -> Iterable[str]:
    """The goals of one size that its rows can answer (a missing row: that goal left out)."""
    equal = _pick(rows, units=units, mode="equal", job=False)
    if equal is not None and equal.per_pod:
        qps = float(equal.qps.split("/")[0])
        expected = qps / equal.per_pod
        ratio = equal.pods_per_second / expected
        yield _line(f"(a) {units:,} units, equal QPS {qps:g}: pods/s within 10% of QPS / "
                    "writes per pod", f"{equal.pods_per_second:.1f} pods/s",
                    f"{qps:g} / {equal.per_pod:.2f} = {expected:.1f}", ratio, ratio >= 0.9)
    job, ours = (_pick(rows, units=units, mode="defaults", job=j) for j in (True, False))
    if job is not None and ours is not None and job.seconds:
        ratio = ours.seconds / job.seconds
        yield _line(f"(b) {units:,} units, documented defaults (operator {ours.qps}, Job "
                    f"{job.qps}): time to all pods <= the Job's", f"{ours.seconds:.1f} s",
                    f"{job.seconds:.1f} s", ratio, ratio <= 1.0)
    job, ours = (_pick(rows, units=units, mode="unthrottled", job=j) for j in (True, False))
    if job is not None and ours is not None and job.pods_per_second:
        ratio = ours.pods_per_second / job.pods_per_second
        yield _line(f"(c) {units:,} units, unthrottled: pods/s >= 0.5x the Job's",
                    f"{ours.pods_per_second:.1f} pods/s", f"{job.pods_per_second:.1f} pods/s",
                    ratio, ratio >= 0.5)
        if job.apiserver_cpu_per_pod:
            ratio = ours.apiserver_cpu_per_pod / job.apiserver_cpu_per_pod
            yield _line(f"(c) {units:,} units, unthrottled: API-server CPU-s per pod <= 3x "
                        "the Job's", f"{ours.apiserver_cpu_per_pod * 1000:.1f} ms",
                        f"{job.apiserver_cpu_per_pod * 1000:.1f} ms", ratio, ratio <= 3.0)


def goal_table(rows: list[Measured]) -> str:
    lines = ["| goal | figure | reference | ratio | met |", "| --- | ---: | ---: | ---: | --- |"]
    for units in sorted({r.units for r in rows}):
        lines += goal_lines(rows, units=units)
    return "\n".join(lines)
