"""A real S3 store on loopback for tests: SeaweedFS's ``weed server`` (from the venv).

Every port is free at start (each picked by binding port 0) and named on the command line,
gRPC ones too (SeaweedFS's default of port+10000 could be another test's) and its Iceberg
and Lance listeners switched off (their defaults, 8181 and 9101, are fixed: two servers
under pytest-xdist would collide). Each bucket is a collection that grows seven volumes at
its first write, hence a small volume size and a generous count. Readiness is a condition
(``GET /`` on the S3 port answers, then a probe object can be written: the gateway answers
before the volume server has joined the master), never a sleep. The server is stopped and
reaped on exit.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from tests.support.waiting import wait_for

WEED = str(Path(sys.executable).with_name("weed"))
ACCESS_KEY, SECRET_KEY = "agentrun-test", "agentrun-test-secret"
_PORTS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
          "filer.port.grpc", "s3.port", "s3.port.grpc")


PORT_COUNT = len(_PORTS)


def endpoint_at(at: list[int]) -> str:
    """The S3 endpoint :func:`running_s3` serves when given the ports ``at``."""
    return f"http://127.0.0.1:{dict(zip(_PORTS, at, strict=True))['s3.port']}"


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free now (all held open together, so none repeats)."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def _answers(url: str) -> bool:
    """True once anything answers HTTP at ``url`` (an error status is an answer)."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True


@contextmanager
def running_s3(tmpdir: str | os.PathLike[str], *, auth: bool = False,
               timeout: float = 60, at: list[int] | None = None) -> Iterator[str]:
    """A SeaweedFS S3 endpoint (``http://127.0.0.1:<port>``) for the block's length, its
    data under ``tmpdir``. ``auth``: only :data:`ACCESS_KEY`/:data:`SECRET_KEY` may use it
    (SigV4 checked); otherwise anonymous requests are allowed. ``at``: its
    :func:`free_ports` (as many as it listens on, :data:`PORT_COUNT`), to start it again at
    the same address over the same data: a store stopped and restarted."""
    root = Path(tmpdir)
    (root / "data").mkdir(parents=True, exist_ok=True)
    ports = dict(zip(_PORTS, at or free_ports(len(_PORTS)), strict=True))
    command = [WEED, "server", f"-dir={root / 'data'}", "-s3", "-ip=127.0.0.1",
               "-ip.bind=127.0.0.1", "-master.telemetry=false", "-master.volumeSizeLimitMB=64",
               "-volume.max=200", "-s3.port.iceberg=0", "-s3.port.lance=0",
               *(f"-{flag}={port}" for flag, port in ports.items())]
    if auth:
        config = root / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "agentrun-test",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        command.append(f"-s3.config={config}")
    endpoint = f"http://127.0.0.1:{ports['s3.port']}"
    with open(root / "weed.log", "wb") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        def ready() -> bool:
            if server.poll() is not None:
                tail = (root / "weed.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"weed exited {server.returncode}: {tail}")
            return _answers(endpoint + "/") and _writable(endpoint, auth=auth)

        wait_for(ready, timeout=timeout, message=f"SeaweedFS S3 at {endpoint}", interval=0.2)
        yield endpoint
    finally:
        # Killed, not asked: its graceful stop (SIGTERM) can take over 15 s (the filer's
        # gRPC drain), and its data is thrown away. Its own session: only what it started.
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=15)


def _writable(endpoint: str, *, auth: bool) -> bool:
    """A probe object can be written and removed: the volume server has joined."""
    from agentrun.objectstore import Credentials, ObjectStore

    credentials = Credentials(ACCESS_KEY, SECRET_KEY) if auth else None
    store = ObjectStore(endpoint=endpoint, bucket="readiness", timeout=2,
                        credentials=lambda: credentials)
    store.ensure_bucket()
    key = f"probe-{uuid.uuid4().hex}"
    store.put(key, b"ready")
    store.delete(key)
    return True
