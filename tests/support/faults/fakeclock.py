"""A process's wall clock faked and stepped from a file, its monotonic clock left alone.

What the clock-skew fault (``tests/support/faults/clockskew.py``) runs its operator and its
workers under. Terms: the *timestamp file* holds an offset such as ``+600s``; the process
reads it on every clock call (``FAKETIME_NO_CACHE=1``), so rewriting it *steps* the clock
(:func:`step`). Made of two preloads:

- Debian's libfaketime 0.9.10 (``libfaketime``: on the host from ``make nodedeps``, in the
  pods from the test base image), which fakes ``CLOCK_REALTIME`` and, with
  ``FAKETIME_DONT_FAKE_MONOTONIC=1``, leaves ``CLOCK_MONOTONIC`` alone;
- ``sleepfix.c``, loaded first, because that libfaketime makes Python 3.11's
  ``time.sleep`` (an absolute ``clock_nanosleep`` on the monotonic clock) fail with EINVAL
  (the operator's client throttle and a worker's loop sleep that way); it is compiled
  here with gcc (:func:`sleepfix_library`), cached by a digest of its source and the
  compiler, and copied into the test base image at :data:`IMAGE_SLEEPFIX`.

libfaketime follows the file only if it exists when the process starts (measured: one
written later is never read), so the file is written first.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.cluster import imagestore

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")  # host and image
SLEEPFIX_SOURCE = Path(__file__).with_name("sleepfix.c")
IMAGE_SLEEPFIX = Path("/usr/local/lib/agentrun-sleepfix.so")  # in the test base image


def sleepfix_library() -> Path:
    """The compiled ``sleepfix.c`` for this machine (glibc of bookworm, as the base's)."""
    source = SLEEPFIX_SOURCE.read_bytes()
    cflags = ["-O2", "-Wall", "-Werror", "-shared", "-fPIC"]
    key = imagestore.key([("sleepfix.c", source), ("cflags", " ".join(cflags).encode()),
                          ("gcc", imagestore.tool_version("gcc", "--version"))])
    path = imagestore.cache_root() / f"sleepfix-{key}.so"
    if path.exists():
        return path
    with imagestore.locked("sleepfix"):
        if not path.exists():
            started = time.monotonic()
            partial = path.with_name(path.name + ".partial")
            imagestore.run(["gcc", *cflags, "-o", str(partial), str(SLEEPFIX_SOURCE)])
            partial.rename(path)
            imagestore.log(f"compiled {path.name} in {time.monotonic() - started:.1f}s")
    return path


def faked_env(timestamp_file: Path, *, sleepfix: Path) -> dict[str, str]:
    """The environment that has a process's wall clock read from ``timestamp_file`` on
    every call, its monotonic clock untouched; ``sleepfix`` is the shim's path where the
    process runs (:func:`sleepfix_library` on the host, :data:`IMAGE_SLEEPFIX` in a pod)."""
    return {"LD_PRELOAD": f"{sleepfix} {LIBFAKETIME}",
            "FAKETIME_TIMESTAMP_FILE": str(timestamp_file),
            "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def step(timestamp_file: Path, offset: str) -> None:
    """Step the faked clock: a new file, renamed over the old (never read half-written)."""
    fresh = timestamp_file.with_suffix(".new")
    fresh.write_text(offset + "\n")
    fresh.replace(timestamp_file)
