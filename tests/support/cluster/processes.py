"""Child processes of the local cluster and node: started to die with us, ended in order.

Why a module: the control plane (:mod:`localcluster`) and the node (:mod:`localnode`)
start and stop their programs the same way.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child before exec: SIGKILL it when its launcher dies, even by SIGKILL.

    Why: a killed ``make cluster`` or test session must not leave an API server or a
    kubelet behind; what re-parents itself (containerd shims) is cleaned at next start.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")


def end_processes(processes: list[subprocess.Popen[bytes]], *, in_turn: bool) -> None:
    """SIGTERM each process group (newest first), SIGKILL what is left after 20 s; clear.

    ``in_turn``: wait for each before signalling the next (a node's kubelet must stop
    before the runtime under it); else signal all, then wait.
    """
    def wait(process: subprocess.Popen[bytes]) -> None:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    for process in reversed(processes):
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        if in_turn:
            wait(process)
    if not in_turn:
        for process in reversed(processes):
            wait(process)
    processes.clear()


def free_port(*, host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now (the caller binds it soon after)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port
