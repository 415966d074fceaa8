"""Stopping the node leaves nothing behind: after the session, and after a SIGKILL.

This module runs last (``STOPS_THE_SESSION_CLUSTER``): it stops the session's own
control plane and node, checks the machine, then drives ``make cluster``'s launcher
(``localnode.py up``) twice: once SIGKILLed with a pod running, once to see that its
next start cleans up what the kill left, and stopped the ordinary way.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cluster import nodehost
from tests.support.cluster.clusters import Cluster
from tests.support.cluster.images import pause_image
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kubelet
STOPS_THE_SESSION_CLUSTER = True
REPO = Path(__file__).resolve().parents[3]
LAUNCHER = "tests.support.cluster.localnode"  # run by name from the repository root
START_TIMEOUT = 180.0


class Launcher:
    """``localnode.py up`` in a session of its own, its output read line by line."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.process = subprocess.Popen(
            [sys.executable, "-m", LAUNCHER, "up", "--dir", str(workdir)], cwd=REPO,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        self.output: list[str] = []

    def wait_ready(self) -> None:
        assert self.process.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(self.process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if selector.select(timeout=1.0):
                line = self.process.stdout.readline()
                if not line:
                    break
                self.output.append(line)
                if " ready at " in line:
                    return
        self.process.kill()
        pytest.fail("localnode.py up not ready:\n" + "".join(self.output), pytrace=False)

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.workdir / "bin" / "kubectl"), "--kubeconfig",
             str(self.workdir / "kubeconfig"), *args],
            input=input, capture_output=True, text=True, check=False, timeout=60)

    def rest_of_output(self) -> str:
        assert self.process.stdout is not None
        return "".join(self.output) + self.process.stdout.read()


def test_nothing_is_left_after_stop_and_after_sigkill(cluster: Cluster,
                                                      tmp_path: Path) -> None:
    assert cluster.shutdown is not None and cluster.node is not None
    binaries = cluster.node.binaries()
    ours = [p.pid for p in cluster.local.processes] if cluster.local else []
    originals = json.loads(nodehost.HOST_STATE.read_text())["sysctls"]
    cluster.shutdown()
    assert nodehost.leftovers(binaries=binaries) == []
    assert {name: nodehost.read_sysctl(name) for name in originals} == originals
    assert [pid for pid in ours if Path(f"/proc/{pid}").exists()] == []

    first = Launcher(tmp_path / "first")
    first.wait_ready()
    pause = pause_image()  # in the node already: every pod's sandbox
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "survivor",
                                                          "namespace": "default"},
           "spec": {"restartPolicy": "Never", "containers": [
               {"name": "main", "image": pause.ref, "imagePullPolicy": "Never"}]}}
    created = first.kubectl("create", "-f", "-", input=json.dumps(pod))
    assert created.returncode == 0, created.stderr
    wait_for(lambda: first.kubectl("get", "pod", "survivor", "-o",
                                   "jsonpath={.status.phase}").stdout == "Running",
             timeout=60, message="pod survivor Running")
    shims = [pid for pid in nodehost.node_pids(binaries=binaries)
             if "containerd-shim" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")]
    assert shims, "a running pod has a containerd shim"

    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait(timeout=10)
    # Its children die with it (PR_SET_PDEATHSIG); shims re-parented to init stay.
    wait_for(lambda: all(
        "containerd-shim" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
        for pid in nodehost.node_pids(binaries=binaries)),
        timeout=20, message="kubelet, kube-proxy and containerd gone with the launcher")
    assert nodehost.leftovers(binaries=binaries) != [], "a SIGKILL leaves the shim behind"

    second = Launcher(tmp_path / "second")
    second.wait_ready()
    assert any("left over from an earlier run" in line for line in second.output)
    os.killpg(second.process.pid, signal.SIGTERM)
    assert second.process.wait(timeout=60) == 0, second.rest_of_output()
    assert nodehost.leftovers(binaries=binaries) == []
