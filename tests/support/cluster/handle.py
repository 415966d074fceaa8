"""A running local cluster described in a file, for test processes that did not start it.

Why: ``make test`` runs the suite in parts against one control plane and node started
once by the session driver (:mod:`tests.support.cluster.session`): the independent tests
in concurrent pytest workers, then the serial ones alone. Each of those processes
*attaches* to the cluster through this file (``AGENTRUN_TEST_CLUSTER``) and sees the
same :class:`~tests.support.cluster.localcluster.LocalCluster` and
:class:`~tests.support.cluster.localnode.LocalNode` its starter holds, their programs as
:class:`Attached` processes. An attached process never stops the cluster: its starter
does.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.cluster import nodehost
from tests.support.cluster.localcluster import LocalCluster
from tests.support.cluster.localnode import LocalNode

ENV = "AGENTRUN_TEST_CLUSTER"


@dataclass
class Attached:
    """A program another process started, by pid: what tests read of a ``Popen``."""

    pid: int
    args: list[str]

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def poll(self) -> int | None:
        """None while it runs (as ``Popen.poll``); -1 once gone (its status is not ours)."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return -1
        return -1 if stat[stat.rindex(")") + 2] in "ZX" else None

    def send_signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def wait(self, timeout: float | None = None) -> int:
        """Refused: what waits for a program is what stops it (``LocalCluster.stop``), and
        an attached process never stops the cluster: its starter does."""
        raise RuntimeError(f"pid {self.pid} belongs to the process that started the "
                           "cluster; an attached process never stops it")


def write(path: Path, *, cluster: LocalCluster, node: LocalNode | None,
          no_kubelet_reason: str = "") -> None:
    """Describe the running ``cluster`` (and ``node``) in ``path`` for :func:`attach`."""
    def programs(processes: list[Any]) -> list[dict[str, Any]]:
        return [{"pid": p.pid, "args": [str(a) for a in p.args]} for p in processes]

    body: dict[str, Any] = {
        "owner": os.getpid(), "no_kubelet_reason": no_kubelet_reason,
        "cluster": {"workdir": str(cluster.workdir), "binary": str(cluster.binary),
                    "port": cluster.port, "tokens": cluster.tokens,
                    "node_ip": cluster.node_ip, "node_subnet": cluster.node_subnet,
                    "processes": programs(cluster.processes)},
        "node": None if node is None else {
            "subnet": str(node.network.subnet), "containerd": str(node.containerd),
            "processes": programs(node.processes)},
    }
    path.write_text(json.dumps(body, indent=1))


@dataclass(frozen=True)
class Handle:
    """What :func:`attach` read: the cluster, its node, and the pid of their starter."""

    cluster: LocalCluster
    node: LocalNode | None
    owner: int
    no_kubelet_reason: str


def attach(path: Path) -> Handle:
    body = json.loads(path.read_text())
    found = body["cluster"]
    cluster = LocalCluster(
        workdir=Path(found["workdir"]), binary=Path(found["binary"]), port=found["port"],
        tokens=found["tokens"], node_ip=found["node_ip"], node_subnet=found["node_subnet"],
        processes=[Attached(**p) for p in found["processes"]])  # type: ignore[misc]
    node = None
    if body["node"] is not None:
        found = body["node"]
        node = LocalNode(cluster=cluster,
                         network=nodehost.Network(subnet=ipaddress.IPv4Network(found["subnet"])),
                         containerd=Path(found["containerd"]),
                         processes=[Attached(**p) for p in found["processes"]])  # type: ignore[misc]
    return Handle(cluster=cluster, node=node, owner=body["owner"],
                  no_kubelet_reason=body["no_kubelet_reason"])
