"""The cluster a test session runs against, however it was obtained (see tests/conftest.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import kubernetes

from tests.support.cluster.localcluster import LocalCluster
from tests.support.cluster.localnode import LocalNode


def docker_and_kind_available() -> bool:
    if not (shutil.which("docker") and shutil.which("kind")):
        return False
    return subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0


@dataclass
class Cluster:
    """A cluster the tests may use, however it was obtained.

    ``node`` is set when the local control plane runs with the node of
    ``tests/support/cluster/localnode.py`` (the default). ``users`` maps a user name to a
    kubeconfig context of its own (local control plane),
    or is empty, in which case :meth:`client` impersonates the user from the admin
    context. ``audit_log`` is set only where this suite started the API server.
    """

    kubeconfig: Path
    kind: str  # "existing", "kind" or "local"
    has_kubelet: bool
    local: LocalCluster | None = None
    node: LocalNode | None = None  # the local node, when this session started one
    no_kubelet_reason: str = ""  # why has_kubelet is False, for the failing test to say
    # Stops what this session started, early: only the suite's last test calls it.
    shutdown: Callable[[], None] | None = None
    # The process that started the local cluster (and holds the node's lock): this one,
    # or make test's driver when attached (tests/support/cluster/handle.py).
    owner: int = field(default_factory=os.getpid)
    # Set when make test's driver already applied the CRDs and the test install, before
    # its concurrent workers started: a worker then does not install again.
    prepared: bool = False

    @property
    def audit_log(self) -> Path | None:
        return self.local.audit_log if self.local else None

    def client(self, user: str = "admin") -> kubernetes.client.ApiClient:
        configuration = kubernetes.client.Configuration()
        if self.local is not None:
            kubernetes.config.load_kube_config(
                config_file=str(self.kubeconfig), context=user,
                client_configuration=configuration)
            return kubernetes.client.ApiClient(configuration)
        kubernetes.config.load_kube_config(
            config_file=str(self.kubeconfig), client_configuration=configuration)
        api = kubernetes.client.ApiClient(configuration)
        if user != "admin":
            api.set_default_header("Impersonate-User", user)
            api.set_default_header("Impersonate-Group", "system:authenticated")
        return api

    def kubectl(self, *args: str, user: str = "admin",
                input: str | None = None) -> subprocess.CompletedProcess[str]:
        """The cluster's kubectl: the locally built one, else the one on PATH."""
        binary = (str(self.local.workdir / "bin" / "kubectl") if self.local
                  else shutil.which("kubectl") or "kubectl")
        identity = (["--context", user] if self.local
                    else ([] if user == "admin" else ["--as", user]))
        return subprocess.run(
            [binary, "--kubeconfig", str(self.kubeconfig), *identity, *args],
            input=input, capture_output=True, text=True, check=False, timeout=120,
        )
