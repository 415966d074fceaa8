"""A heap breakdown of a process started with this folder on PYTHONPATH and
``AGENTRUN_HEAPDUMP=<file>`` (bench/scale ``--heap``): tracemalloc from the start, and
on SIGUSR2 the traced total, the largest allocation sites and the live objects by type
appended to that file. For diagnosis only: tracing slows the process and adds memory."""

from __future__ import annotations

import gc
import os
import signal
import sys
import tracemalloc
from collections import Counter
from types import FrameType

TARGET = os.environ.get("AGENTRUN_HEAPDUMP")
TOP = 25


def _dump(signum: int, frame: FrameType | None) -> None:
    del signum, frame
    snapshot = tracemalloc.take_snapshot()
    current, peak = tracemalloc.get_traced_memory()
    types = Counter(type(o).__name__ for o in gc.get_objects())
    lines = [f"=== traced {current / 2**20:.1f} MiB (peak {peak / 2**20:.1f} MiB)"]
    lines += [f"  {stat}" for stat in snapshot.statistics("lineno")[:TOP]]
    lines += ["  objects: " + ", ".join(f"{n} {k}" for k, n in types.most_common(TOP))]
    with open(str(TARGET), "a", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n=== end\n")


if TARGET:
    tracemalloc.start(1)
    signal.signal(signal.SIGUSR2, _dump)
    print(f"heapdump: tracing; SIGUSR2 appends to {TARGET}", file=sys.stderr)
