"""The operator as a subprocess: started, killed (SIGKILL) and restarted by tests.

A subprocess rather than Kopf's in-process runner, because the crash tests need a real
SIGKILL between two writes (``AGENTRUN_CRASH_AT``), and the operator must act with its
own identity (the local cluster's ``operator`` user, rights only from RBAC).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.support.cluster.clusters import Cluster
from tests.support.plays import canaries
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[3]
# The package's two portions (the operator's and the worker SDK's distributions), for the
# operator processes the tests start from the sources.
SOURCES = os.pathsep.join(str(REPO / part) for part in ("operator", "sdk"))
MANIFESTS = REPO / "manifests"
CRDS = REPO / "crds"
# What the suite installs once (``installed``): the RBAC, the local `operator` user's
# binding and the actor-stamping policy. The validating policies are installed only by
# the tests of admission itself: every other test shows what the operator decides alone.
TEST_INSTALL = ("rbac", "local", "admission/stamp-actors.yaml")


class OperatorProcess:
    def __init__(self, *, cluster: Cluster, namespace: str, log: Path,
                 args: Sequence[str] = (), env: dict[str, str] | None = None) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.log = log
        self.args = list(args)  # more flags of `agentrun-operator run` (--qps, --workers)
        self.env = dict(env or {})  # more environment (LD_PRELOAD of libfaketime: a skewed clock)
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, *, crash_at: str | None = None) -> OperatorProcess:
        env = {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig),
               "PYTHONPATH": SOURCES, **self.env}
        env.pop("AGENTRUN_CRASH_AT", None)
        if crash_at:
            env["AGENTRUN_CRASH_AT"] = crash_at
        # No /metrics unless a test asks (its own --metrics-port comes later and wins):
        # operators of tests running at once would otherwise all bind the default port.
        args = [sys.executable, "-m", "agentrun.cli", "run", "--namespace", self.namespace,
                "--metrics-port", "0", *self.args]
        if self.cluster.local is not None:
            args += ["--context", "operator"]
        self.starts += 1
        with open(self.log, "ab") as log:
            log.write(f"--- start {self.starts} crash_at={crash_at}\n".encode())
            self.process = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        return self

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_crashed(self, *, timeout: float = 60) -> int:
        """Wait for the process to die at its crash point; its exit status (-9: SIGKILL)."""
        wait_for(lambda: not self.alive, timeout=timeout,
                 message=f"the operator to crash; log: {self.tail()}")
        assert self.process is not None
        return self.process.returncode

    def stop(self) -> None:
        if self.alive:
            assert self.process is not None
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def tail(self, lines: int = 30) -> str:
        if not self.log.exists():
            return "(no log)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def stamping_in_force(cluster: Cluster, *, timeout: float = 60) -> None:
    """``agentrun-operator stamping`` as the operator: mint the epoch when due, wait until
    actor stamping is in force (what a running operator's keeper does on its own)."""
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig),
           "PYTHONPATH": SOURCES}
    args = [sys.executable, "-m", "agentrun.cli", "stamping", "--timeout", str(timeout)]
    if cluster.local is not None:
        args += ["--context", "operator"]
    result = subprocess.run(args, env=env, capture_output=True, text=True, check=False,
                            timeout=timeout + 30)
    assert result.returncode == 0, result.stderr


def install_crds(kubectl: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    """Apply ``crds/`` as the kustomization it is (``-f crds/`` would send its
    kustomization.yaml as an object) and wait until each CRD is Established, named by its
    file (``kubectl wait`` has no ``-k``). ``kubectl``: a cluster's, as admin."""
    applied = kubectl("apply", "--server-side", "-k", str(CRDS))
    assert applied.returncode == 0, applied.stderr
    files = sorted(CRDS.glob("agentrun.dev_*.yaml"))
    established = kubectl("wait", "--for=condition=Established", "--timeout=60s",
                          *(arg for path in files for arg in ("-f", str(path))))
    assert established.returncode == 0, established.stderr


def install_for_tests(cluster: Cluster) -> None:
    """Apply :data:`TEST_INSTALL` and return once it is in force: the epoch minted, a
    server dry-run Slot comes back stamped with its actor, and the mutating canary (applied
    after the shipped policies, removed first) mutates. Run once per session, and again by
    a test that removed those objects (the chart's uninstall)."""
    canaries.remove(cluster, canaries.MUTATING, what="the mutating canary")
    for path in TEST_INSTALL:
        result = cluster.kubectl("apply", "--server-side", "-f", str(MANIFESTS / path))
        assert result.returncode == 0, result.stderr
    stamping_in_force(cluster)
    probe = json.dumps({
        "apiVersion": "agentrun.dev/v1alpha1", "kind": "Slot",
        "metadata": {"name": "probe-00000000", "namespace": "default",
                     "annotations": {"agentrun.dev/claim-id": "probe"}},
        "spec": {"run": "probe", "node": "probe", "workerClass": "cpu"}})

    def stamping() -> bool:
        result = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                 input=probe)
        annotations = json.loads(result.stdout or "{}").get("metadata", {}).get(
            "annotations", {}) if result.returncode == 0 else {}
        return (annotations.get("agentrun.dev/claim-actor") == "admin"
                and bool(annotations.get("agentrun.dev/claim-epoch")))

    wait_for(stamping, timeout=30, message="the actor-stamping policy in effect")
    canaries.apply(cluster, canaries.MUTATING, what="the mutating policies")
