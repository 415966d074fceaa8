"""The ``kubectl agentrun`` plugin run as a person would: its own process, a user's context."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import yaml

from tests.support.cluster.clusters import Cluster
from tests.support.plays.scenarios import Scenario

PLUGIN = Path(sys.executable).parent / "kubectl-agentrun"
COMPLETER = Path(sys.executable).parent / "kubectl_complete-agentrun"


def _argv(cluster: Cluster, scenario: Scenario, args: tuple[str, ...], user: str) -> list[str]:
    return [str(PLUGIN), "--kubeconfig", str(cluster.kubeconfig), "--context", user,
            "-n", scenario.namespace, *args]


def plugin(cluster: Cluster, scenario: Scenario, *args: str,
           user: str = "alice") -> subprocess.CompletedProcess[str]:
    """``kubectl agentrun <args>`` as ``user`` (the local control plane's contexts)."""
    return subprocess.run(_argv(cluster, scenario, args, user),
                          capture_output=True, text=True, check=False, timeout=120)


def started(cluster: Cluster, scenario: Scenario, *args: str,
            user: str = "alice") -> subprocess.Popen[str]:
    """``kubectl agentrun <args>`` left running (``-w``), its output piped line by line."""
    return subprocess.Popen(_argv(cluster, scenario, args, user), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


class Lines:
    """A running process's stdout, line by line as it comes (a reader thread)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        self.seen: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        stdout = process.stdout

        def read() -> None:
            for line in stdout:
                self._lines.put(line.rstrip("\n"))
            self._lines.put(None)  # the end
        threading.Thread(target=read, daemon=True).start()

    def wait_for(self, wanted: Callable[[str], bool], *, what: str,
                 timeout: float = 60.0) -> str:
        """The first line from now on that is ``wanted``; fails after ``timeout`` seconds
        or at the end of the output, with the last lines seen."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                raise AssertionError(f"the output ended before {what}: {self.seen[-20:]}")
            self.seen.append(line)
            if wanted(line):
                return line
        raise AssertionError(f"no {what} within {timeout:g}s: {self.seen[-20:]}")


STRACE = Path("/usr/bin/strace")  # make uideps installs it
# A connect() as strace writes it, its result on this line or a later one (threads).
CONNECT = re.compile(r'connect\(\d+, \{sa_family=(AF_\w+), (.*?)\}')
PEER = re.compile(r'sin6?_port=htons\((\d+)\).*?(?:inet_addr\(|inet_pton\(AF_INET6?, )"([^"]+)"')


class UI:
    """``kubectl agentrun ui`` as ``user``, on a free port: its URL once it says it.

    ``connects``: run it under strace, recording each ``connect()`` of its threads in that
    file (:meth:`peers` reads them): every connection it opened, not a sample."""

    def __init__(self, cluster: Cluster, scenario: Scenario, *args: str,
                 user: str = "alice", connects: Path | None = None) -> None:
        traced = [str(STRACE), "-f", "-q", "-e", "trace=connect", "-e", "signal=none",
                  "-o", str(connects)] if connects else []
        self.connects = connects
        self.process = subprocess.Popen(
            [*traced, str(PLUGIN), "--kubeconfig", str(cluster.kubeconfig), "--context", user,
             "ui", "--port", "0", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.lines = Lines(self.process)
        self.stderr: list[str] = []  # read as it comes: a full pipe never blocks the UI
        assert self.process.stderr is not None
        self._reader = threading.Thread(target=self.stderr.extend,
                                        args=(self.process.stderr,), daemon=True)
        self._reader.start()
        said = self.lines.wait_for(lambda line: " at http://127.0.0.1:" in line,
                                   what="the UI's URL", timeout=60)
        self.url = said.split(" at ", 1)[1].strip()
        self.origin = self.url.split("/?", 1)[0]

    def peers(self) -> set[str]:
        """Every address the UI's process connected to (``family host:port``; a socket of
        another family by its whole address), from strace's record of a UI that ended
        (exit 0, said by strace: the record is whole)."""
        assert self.connects is not None and self.process.returncode == 0
        text = self.connects.read_text()
        assert "+++ exited with 0 +++" in text, text[-2000:]
        found = set()
        for family, address in CONNECT.findall(text):
            peer = PEER.search(address)
            found.add(f"{family} {peer[2]}:{peer[1]}" if peer else f"{family} {address}")
        return found

    def stop(self) -> str:
        """Ctrl-C, as a person ends it (the UI itself, not strace); its stderr."""
        # Under strace, the UI is strace's child (strace itself holds fatal signals).
        targets = _children(self.process.pid) if self.connects else [self.process.pid]
        for pid in targets if self.process.poll() is None else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            for pid in targets:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=10)  # to the end of its stderr
        return "".join(self.stderr)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from each one's ``/proc/<pid>/stat``)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            # pid (comm) state ppid ...: the name may hold spaces and parentheses
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def api_server(cluster: Cluster, *, user: str) -> set[str]:
    """The addresses of the API server ``user``'s context names in the kubeconfig, as
    :meth:`UI.peers` writes them (``AF_INET 10.0.0.1:6443``): its host resolved."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    [context] = [c["context"] for c in config["contexts"] if c["name"] == user]
    [server] = [c["cluster"]["server"] for c in config["clusters"]
                if c["name"] == context["cluster"]]
    url = urllib.parse.urlsplit(server)
    port = url.port or 443
    return {f"{family.name} {address[0]}:{port}" for family, *_, address in
            socket.getaddrinfo(url.hostname, port, proto=socket.IPPROTO_TCP)}
