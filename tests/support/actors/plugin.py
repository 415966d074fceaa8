"""The ``kubectl agentrun`` plugin run as a person would: its own process, a user's context."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.cluster.clusters import Cluster
from tests.support.plays.scenarios import Scenario

PLUGIN = Path(sys.executable).parent / "kubectl-agentrun"


def plugin(cluster: Cluster, scenario: Scenario, *args: str,
           user: str = "alice") -> subprocess.CompletedProcess[str]:
    """``kubectl agentrun <args>`` as ``user`` (the local control plane's contexts)."""
    return subprocess.run(
        [str(PLUGIN), "--kubeconfig", str(cluster.kubeconfig), "--context", user,
         "-n", scenario.namespace, *args],
        capture_output=True, text=True, check=False, timeout=120)
