"""Helm for the chart's tests and the demo: built from its Go module, cached, locked.

Why: nothing can be downloaded at run time but Go modules, so Helm comes from
``helm.sh/helm/v4`` through the Go module proxy, built once into
``~/.cache/agentrun/helm/<key>/helm`` where *key* is a digest of the module, its version,
the Go toolchain's version and the link flags (a new Go or Helm gives a new binary; the
old one stays until the cache is cleared). A file lock makes a second builder wait and then find the
binary (the model is ``localnode.build_containerd``).

- ``python -m tests.support.cluster.helm build``: build if needed, print the binary's path
  (``make helm``);
- :func:`install_args`: the ``helm upgrade --install`` arguments of the chart for an image
  loaded into the node (``pullPolicy: Never``) serving the given namespaces;
- :class:`Release`: the chart installed for the span of a ``with`` block, its operator pod
  Ready inside it, uninstalled (and what it took over restored) at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import kubernetes

from agentrun import workload
from agentrun.api import names
from tests.support import gobuilds
from tests.support.cluster import store
from tests.support.waiting import wait_for

HELM_MODULE = "helm.sh/helm/v4"
HELM_VERSION = "v4.3.1"
# The release's own version string (go install leaves the source's "v4.3").
LDFLAGS = f"-s -w -X {HELM_MODULE}/internal/version.version={HELM_VERSION}"
REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "agentrun-operator"
RELEASE = "agentrun-operator"
NAMESPACE = "agentrun-system"
SELECTOR = "app.kubernetes.io/name=agentrun-operator"
TIMEOUT = "120s"  # helm's --wait: the pod's image is local, so it is Ready in seconds
# Every value an operator of a cluster sets on a chart's pods, as the local node can honour
# them: its kubelet labels it kubernetes.io/os=linux; the pull secret need not exist (the
# image is loaded, never pulled: the kubelet only warns); the NetworkPolicy is accepted
# but not enforced (the node's bridge network has no policy engine).
EVERY_VALUE: dict[str, object] = {
    "imagePullSecrets": [{"name": "agentrun-regcred"}],
    "extraArgs": ["--qps", "30", "--burst", "60"],
    "extraEnv": [{"name": "AGENTRUN_EXAMPLE", "value": "set by the chart"}],
    "podAnnotations": {"example.com/owner": "platform"},
    "podLabels": {"example.com/team": "platform"},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "example.com/dedicated", "operator": "Equal", "value": "agents",
                     "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}},
    "priorityClassName": "system-cluster-critical",
    "networkPolicy": {"enabled": True, "metricsFrom": [{"namespaceSelector": {
        "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]},
}


def helm_dir() -> Path:
    """The cache folder of this module, version and toolchain."""
    key = hashlib.sha256(f"{HELM_MODULE}@{HELM_VERSION} {gobuilds.go_version()} "
                         f"{LDFLAGS}".encode())
    return gobuilds.cache_root() / "helm" / key.hexdigest()[:16]


def helm_binary(*, log: bool = True) -> Path:
    """The cached ``helm`` binary, built with ``go install`` (``gobuilds.built``)."""
    def install(partial: Path) -> None:
        subprocess.run(
            ["go", "install", "-trimpath", f"-ldflags={LDFLAGS}",
             f"{HELM_MODULE}/cmd/helm@{HELM_VERSION}"],
            env={**os.environ, "GOBIN": str(partial), "CGO_ENABLED": "0"},
            cwd=partial, check=True,
        )

    return gobuilds.built(helm_dir(), ["helm"], build=install,
                          note=f"helm: building {HELM_MODULE} {HELM_VERSION}", log=log) / "helm"


def install_args(*, image: str, namespaces: list[str],
                 extra: dict[str, object] | None = None,
                 release_namespace: str = NAMESPACE) -> list[str]:
    """``helm upgrade --install`` of the chart (without the binary and kubeconfig).

    ``image`` is ``repository:tag`` (a registry port before the last ``/`` is not a tag),
    loaded into the node, so ``pullPolicy: Never``; ``namespaces`` the watched ones;
    ``extra`` more values (e.g. ``{"logLevel": "debug"}``; a string by ``--set``, anything
    else by ``--set-json``, which replaces a list or map whole). No bundled
    store: the local cluster runs its own (tests/support/cluster/store.py), whose objects
    a release's would collide with; the release's runs pin that one as their journal, by
    its fixed ClusterIP (the local cluster has no DNS to resolve the Service's name).
    ``release_namespace``: where the release goes (any but a tenant's, ``default`` or the
    control plane's).
    """
    repository, _, tag = image.rpartition(":")
    if not repository or "/" in tag:
        raise ValueError(f"image {image!r} must be repository:tag")
    sets: dict[str, object] = {
        "image.repository": repository, "image.tag": tag, "image.pullPolicy": "Never",
        "store.enabled": "false", "journal.endpoint": store.STORE_ENDPOINT,
        "journal.bucket": store.BUCKET, **(extra or {})}

    def flag(key: str, value: object) -> tuple[str, str]:
        if not isinstance(value, str):
            return "--set-json", f"{key}={json.dumps(value)}"
        return ("--set-string" if key in {"image.repository", "image.tag"} else "--set",
                f"{key}={value}")

    return ["upgrade", "--install", RELEASE, str(CHART), "--namespace", release_namespace,
            "--create-namespace", "--wait", "--timeout", TIMEOUT,
            *(arg for key, value in sets.items() for arg in flag(key, value)),
            "--set-json", f"watchNamespaces={json.dumps(namespaces)}"]


class Release:
    """The chart installed on the cluster of ``kubeconfig`` (its current context), as a
    context manager: ``__enter__`` installs and waits for the operator pods Ready;
    ``__exit__`` uninstalls if still installed, waits until no operator pod is left, then
    calls ``restore`` (for a cluster where objects the chart took over, with
    ``take_ownership``, existed before the install and must exist after it)."""

    def __init__(self, kubeconfig: Path, *, image: str, namespaces: list[str],
                 take_ownership: bool = False, values: dict[str, object] | None = None,
                 restore: Callable[[], None] | None = None,
                 namespace: str = NAMESPACE) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace  # the release's (and its operator's)
        self.image = image
        self.namespaces = namespaces
        self.take_ownership = take_ownership
        self.restore = restore
        self.installed = False
        self.values: dict[str, object] = dict(values or {})
        self.core = kubernetes.client.CoreV1Api(
            kubernetes.config.new_client_from_config(config_file=str(kubeconfig)))

    def helm(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run helm against this cluster; the result (the caller checks its return code)."""
        return subprocess.run([str(helm_binary()), "--kubeconfig", str(self.kubeconfig), *args],
                              capture_output=True, text=True, check=False, timeout=timeout)

    def __enter__(self) -> Release:
        try:
            self._install(ownership=self.take_ownership)
        except BaseException as error:  # a half-made install is undone, and restored
            self.__exit__(type(error), error, error.__traceback__)
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        try:
            if self.installed:
                self.uninstall()
            else:
                self.wait_gone()
        finally:
            if self.restore is not None:
                self.restore()

    def _install(self, *, ownership: bool) -> None:
        args = install_args(image=self.image, namespaces=self.namespaces, extra=self.values,
                            release_namespace=self.namespace)
        # Taking over the session's kubectl install: Helm's server-side apply must also win
        # the fields kubectl's apply owns where the release sets other values (another
        # release namespace: the bindings' subjects, the stamp binding's paramRef).
        taking = ["--take-ownership", "--force-conflicts"] if ownership else []
        result = self.helm(*args, *taking)
        self.installed = True  # even a failed install may have left a release to remove
        assert result.returncode == 0, (
            f"helm {' '.join(args)} failed:\n{result.stdout}{result.stderr}\n{self.events()}")
        self.wait_ready()

    def upgrade(self, extra: dict[str, object]) -> None:
        """``helm upgrade`` with more values; returns once the rolling update ended: the
        old pods gone, as many new ones as :attr:`replicas` Ready."""
        self.values = {**self.values, **extra}
        self._install(ownership=False)

    def uninstall(self) -> None:
        """``helm uninstall`` and wait until no operator pod is left."""
        result = self.helm("uninstall", RELEASE, "--namespace", self.namespace, "--wait",
                           "--timeout", TIMEOUT)
        assert result.returncode == 0 or "not found" in result.stderr, (
            f"helm uninstall failed:\n{result.stdout}{result.stderr}")
        self.installed = False
        self.wait_gone()

    def pods(self) -> list[dict[str, Any]]:
        """The operator's pods (the Deployment's), as plain dicts."""
        found: list[dict[str, Any]] = self.core.api_client.sanitize_for_serialization(
            self.core.list_namespaced_pod(self.namespace, label_selector=SELECTOR).items)
        return found

    @property
    def replicas(self) -> int:
        """The operator pods the release runs (its ``replicas`` value)."""
        return int(str(self.values.get("replicas", workload.REPLICAS)))

    def wait_ready(self, *, timeout: float = 120) -> list[dict[str, Any]]:
        """The operator pods, once as many as :attr:`replicas` are Ready and no other (an
        old one) is left; by name."""
        def ready() -> list[dict[str, Any]] | None:
            pods = self.pods()
            if len(pods) != self.replicas or any(
                    p["metadata"].get("deletionTimestamp") or not any(
                        c["type"] == "Ready" and c["status"] == "True"
                        for c in p["status"].get("conditions") or []) for p in pods):
                return None
            return sorted(pods, key=lambda p: str(p["metadata"]["name"]))
        pods: list[dict[str, Any]] = wait_for(
            ready, timeout=timeout, message=f"the chart's {self.replicas} operator pods Ready; "
                                            f"{self.events()}")
        return pods

    def leader(self) -> str:
        """The pod holding the leader Lease ('' when none does)."""
        coordination = kubernetes.client.CoordinationV1Api(self.core.api_client)
        try:
            lease = coordination.read_namespaced_lease(names.LEADER_LEASE, self.namespace)
        except kubernetes.client.ApiException as error:
            if error.status == 404:
                return ""
            raise
        return str(lease.spec.holder_identity or "")

    def wait_gone(self, *, timeout: float = 90) -> None:
        wait_for(lambda: self.pods() == [], timeout=timeout,
                 message="the chart's operator pod gone")

    def logs(self, *, tail: int = 80) -> str:
        """The operator container's last log lines (for a failing test's message)."""
        lines = []
        for pod in self.pods():
            try:
                lines.append(self.core.read_namespaced_pod_log(
                    pod["metadata"]["name"], self.namespace, tail_lines=tail))
            except kubernetes.client.ApiException as error:
                lines.append(f"(no log of {pod['metadata']['name']}: {error.reason})")
        return "\n".join(lines)

    def events(self) -> list[str]:
        return [f"{e.involved_object.name}: {e.reason}: {e.message}" for e in
                self.core.list_namespaced_event(self.namespace).items][-6:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["build"])
    parser.parse_args(argv)
    print(helm_binary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
