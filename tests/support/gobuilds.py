"""Programs built from Go modules once, into a cache outside the clone, under a lock.

Why: nothing can be downloaded at run time but modules, so the control plane, containerd,
Helm and the OpenTelemetry Collector are built here from their Go modules, once per key
(a digest of what changes the binary: sources, versions, the toolchain), into
``~/.cache/agentrun/<kind>/<key>/``; clean clones and CI reuse them. A file lock makes a
second builder wait and then find the programs; a build goes into a partial folder moved
in program by program, so a build killed midway leaves nothing that looks finished.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path


def cache_root() -> Path:
    """``~/.cache/agentrun`` (``$XDG_CACHE_HOME`` if set)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agentrun"


def go_version() -> str:
    """The toolchain's version (``go env GOVERSION``): part of a key."""
    return subprocess.run(["go", "env", "GOVERSION"], check=True, capture_output=True,
                          text=True).stdout.strip()


def built(target: Path, programs: Sequence[str], *, build: Callable[[Path], None],
          note: str, log: bool = True) -> Path:
    """``target`` once it holds every one of ``programs``; else ``build(partial)`` (which
    puts them into the folder ``partial``) under ``target``'s lock, and ``note`` said
    (what is built, how long it takes) on stderr."""
    if all((target / p).exists() for p in programs):
        return target
    target.mkdir(parents=True, exist_ok=True)
    with open(target / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if all((target / p).exists() for p in programs):
            return target
        partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=target))
        if log:
            print(f"{note} into {target} (first time only)", file=sys.stderr, flush=True)
        build(partial)
        for program in programs:
            (partial / program).rename(target / program)
        partial.rmdir()
    return target
