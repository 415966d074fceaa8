"""Fault drivers: what ``make faults`` and the fault tests do to the control plane.

*Paused* API server: the process gets SIGSTOP, so it neither answers nor refuses:
connections stay open, requests hang, watch streams fall silent, and on SIGCONT everything
that waited is served at once. That is what a stalled VM or a long garbage-collection
pause looks like from outside, and different from a crash (connections refused). The
local control plane's ``processes[0]`` is kube-apiserver with its embedded etcd
(``localcluster.LocalCluster``), so the store pauses with it.

SIGCONT is sent in a ``finally``: a test that fails, or is interrupted, while the server
is stopped must not leave the session's API server stopped for every test after it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.cluster.localcluster import LocalCluster

Process = subprocess.Popen[bytes] | int


def pid_of(process: Process) -> int:
    return process if isinstance(process, int) else process.pid


def apiserver(cluster: LocalCluster) -> subprocess.Popen[bytes]:
    """The local control plane's kube-apiserver (with etcd inside), which must be running."""
    assert cluster.processes, "the local control plane is not running"
    process = cluster.processes[0]
    assert process.poll() is None, f"kube-apiserver has exited ({process.returncode})"
    return process


def state(process: Process) -> str:
    """The kernel's state letter for the process (``T``: stopped), from /proc."""
    text = Path(f"/proc/{pid_of(process)}/stat").read_text()
    return text[text.rindex(")") + 2]  # the name, in parentheses, may hold spaces


@dataclass
class Pause:
    """When a pause began and ended: monotonic seconds (``time.monotonic``) and wall
    time (``time.time``, the clock of the audit log), set as they happen."""

    stopped: float = 0.0
    stopped_wall: float = 0.0
    resumed: float = 0.0
    resumed_wall: float = 0.0

    @property
    def seconds(self) -> float:
        return self.resumed - self.stopped


@contextlib.contextmanager
def paused(process: Process) -> Iterator[Pause]:
    """Stop ``process`` (SIGSTOP) for the ``with`` block; SIGCONT however the block ends."""
    pid = pid_of(process)
    pause = Pause()
    os.kill(pid, signal.SIGSTOP)
    pause.stopped, pause.stopped_wall = time.monotonic(), time.time()
    try:
        deadline = time.monotonic() + 5
        while state(pid) != "T":  # the signal is delivered asynchronously
            if time.monotonic() > deadline:
                raise RuntimeError(f"process {pid} did not stop (state {state(pid)})")
            time.sleep(0.01)  # poll interval of the kernel's state
        yield pause
    finally:
        os.kill(pid, signal.SIGCONT)
        pause.resumed, pause.resumed_wall = time.monotonic(), time.time()


def hold_paused(process: Process, *, seconds: float) -> Pause:
    """Keep ``process`` stopped for ``seconds`` (the fault's length, not a wait for some
    condition: nothing can be observed through a stopped API server), then resume it."""
    with paused(process) as pause:
        threading.Event().wait(seconds)
    return pause
