"""A real Kubernetes control plane on this machine, built from source and started here.

Why: everything agentrun claims is API-server behaviour (resourceVersion conflicts,
status subresources, CEL, RBAC, admission, garbage collection). The machines that
develop and test it have no container engine, so kind cannot run; a mock would test
only our own assumptions. This module builds ``tests/controlplane`` (kube-apiserver
with embedded etcd, kube-controller-manager and kubectl from ``k8s.io/kubernetes``)
once into a cache outside the clone, and runs it:

- ``python -m tests.support.cluster.localcluster build``: build only, print the binary's path;
- :class:`LocalCluster`: the control plane from Python; with ``node_ip`` set it serves
  that address too and is ready for the node of :mod:`localnode` (whose command line,
  ``localnode.py up``, is ``make cluster``).

Terms: *users* are the static-token identities of the cluster (``admin`` in
``system:masters``; ``alice`` and ``bob``, tenant users with no rights by default;
``operator``, with rights only from RBAC). Each gets a context of that name in the
kubeconfig; ``admin`` is current.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import secrets
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.support import gobuilds
from tests.support.cluster.processes import die_with_parent, end_processes, free_port

REPO = Path(__file__).resolve().parents[3]
SOURCE = REPO / "tests" / "controlplane"
BINARY_NAME = "agentrun-controlplane"
USERS: dict[str, list[str]] = {
    "admin": ["system:masters"],
    "alice": [],
    "bob": [],
    "operator": [],
}
CONTROLLERS = [
    "namespace-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "job-controller",
    "replicaset-controller",
    "deployment-controller",
    "clusterrole-aggregation-controller",
    "resourcequota-controller",
]
# What a node needs: the not-ready taint cleared, Service endpoints, evictions from a lost
# node, deleted nodes' pods collected, the podCIDR, claims bound (a pod runs only once its
# claim is Bound: the store's, cluster/store.py), disruption budgets' status (evictions).
NODE_CONTROLLERS = [
    "node-lifecycle-controller",
    "endpointslice-controller",
    "taint-eviction-controller",
    "pod-garbage-collector-controller",
    "node-ipam-controller",
    "persistentvolume-binder-controller",
    "disruption-controller",
]
NODE_NAME = "agentrun-node"
ADMISSION_PLUGINS = [
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "DefaultTolerationSeconds",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
    "NodeRestriction",
    "OwnerReferencesPermissionEnforcement",
    "PodSecurity",
    "Priority",
    "RuntimeClass",
]
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        # The operator's reads too (tests/integration/test_operator_role_used.py checks its
        # ClusterRole against what it used): one user's, at Metadata, keeps the log small.
        {"level": "Metadata", "users": ["operator"], "verbs": ["get", "list", "watch"]},
        {"level": "None", "verbs": ["get", "list", "watch"]},
        {"level": "Metadata"},
    ],
}


def kube_version() -> str:
    return (SOURCE / "KUBE_VERSION").read_text().strip()


def source_digest() -> str:
    """A key over everything that changes the binary: Go sources, go.mod/go.sum, version."""
    digest = hashlib.sha256()
    for path in sorted(SOURCE.iterdir()):
        if path.suffix == ".go" or path.name in {"go.mod", "go.sum", "KUBE_VERSION"}:
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def build(*, log: bool = True) -> Path:
    """Build the control-plane binary unless the cache has it; return its path."""
    version = kube_version()
    major, minor = version.lstrip("v").split(".")[:2]
    ldflags = " ".join([
        "-s -w",
        f"-X k8s.io/component-base/version.gitVersion={version}",
        f"-X k8s.io/component-base/version.gitMajor={major}",
        f"-X k8s.io/component-base/version.gitMinor={minor}",
        "-X k8s.io/component-base/version.gitTreeState=clean",
        f"-X k8s.io/client-go/pkg/version.gitVersion={version}",
    ])

    def go_build(partial: Path) -> None:
        started = time.monotonic()
        subprocess.run(["go", "build", "-o", str(partial / BINARY_NAME), "-ldflags", ldflags,
                        "."], cwd=SOURCE, check=True)
        if log:
            print(f"localcluster: built in {time.monotonic() - started:.0f}s",
                  file=sys.stderr, flush=True)

    target = gobuilds.built(
        gobuilds.cache_root() / "controlplane" / f"{version}-{source_digest()}", [BINARY_NAME],
        build=go_build, note=f"localcluster: building kubernetes {version} (~6-10 min on 2 "
        "cores)", log=log)
    return target / BINARY_NAME


@dataclass
class LocalCluster:
    """One running control plane: its folder, processes, and the users' tokens.

    ``workdir`` holds the PKI, token file, audit log (``audit.log``), component logs and
    ``kubeconfig``; etcd's data lives in a temporary folder removed at :meth:`stop`.
    """

    workdir: Path
    binary: Path = field(default_factory=build)
    port: int = field(default_factory=free_port)
    tokens: dict[str, str] = field(default_factory=dict)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    etcd_dir: Path | None = None
    node_ip: str | None = None  # set: serve (only) there, for a node's pods and kubelet
    node_subnet: str | None = None
    # The controller-manager's client rate limit (--kube-api-qps; burst 1.5 times it);
    # None: its default (20, burst 30). Benchmarks set it to compare unthrottled.
    controller_manager_qps: float | None = None

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    @property
    def server(self) -> str:
        return f"https://{self.node_ip or '127.0.0.1'}:{self.port}"

    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    def start(self, *, timeout: float = 180.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        pki = self.pki
        node = ["--node-name", NODE_NAME, "--ip", self.node_ip] if self.node_ip else []
        subprocess.run([str(self.binary), "pki", "--dir", str(pki), *node], check=True)
        self._write_tokens()
        (self.workdir / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        # In the workdir, not /tmp: a control plane SIGKILLed (the teardown test's) leaves
        # its data where its workdir's owner removes it, not 120 MB in /tmp per run.
        self.etcd_dir = Path(tempfile.mkdtemp(prefix="etcd-", dir=self.workdir))
        self._spawn("kube-apiserver", self._apiserver_args(pki))
        self._wait_ready(timeout=timeout)
        self._write_kubeconfigs(pki)
        self._spawn("kube-controller-manager", self._controller_manager_args(pki))
        bin_dir = self.workdir / "bin"
        bin_dir.mkdir(exist_ok=True)
        kubectl = bin_dir / "kubectl"
        kubectl.unlink(missing_ok=True)
        kubectl.symlink_to(self.binary)

    def stop(self) -> None:
        end_processes(self.processes, in_turn=False)
        if self.etcd_dir is not None:
            shutil.rmtree(self.etcd_dir, ignore_errors=True)
            self.etcd_dir = None

    def kubectl(self, *args: str, context: str = "admin",
                input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run the cluster's own kubectl (the same version as the server)."""
        return subprocess.run(
            [str(self.workdir / "bin" / "kubectl"), "--kubeconfig", str(self.kubeconfig),
             "--context", context, *args],
            input=input, capture_output=True, text=True, check=False,
        )

    def _write_tokens(self) -> None:
        lines = []
        components: list[tuple[str, list[str]]] = [
            ("system:kube-controller-manager", []), ("system:kube-scheduler", []),
            ("system:kube-proxy", [])]
        for index, (user, groups) in enumerate([*USERS.items(), *components]):
            token = secrets.token_hex(24)
            self.tokens[user] = token
            lines.append(f'{token},{user},uid-{index},"{",".join(groups)}"')
        (self.workdir / "tokens.csv").write_text("\n".join(lines) + "\n")
        (self.workdir / "tokens.csv").chmod(0o600)

    def _apiserver_args(self, pki: Path) -> list[str]:
        assert self.etcd_dir is not None
        address = self.node_ip or "127.0.0.1"
        node = [
            # The `kubernetes` Service's endpoint is this address, kept by a lease.
            "--endpoint-reconciler-type=lease",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            f"--kubelet-certificate-authority={pki / 'ca.crt'}",
        ] if self.node_ip else ["--endpoint-reconciler-type=none"]
        return [
            f"--etcd-dir={self.etcd_dir}",
            f"--etcd-client-url=http://127.0.0.1:{free_port()}",
            f"--etcd-peer-url=http://127.0.0.1:{free_port()}",
            f"--bind-address={address}",
            f"--advertise-address={address}",
            f"--secure-port={self.port}",
            f"--cert-dir={pki}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            # The aggregation layer as kubeadm sets it up (the operator's history API); the
            # API server dials Service endpoints itself: no kube-proxy on its host.
            f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            "--enable-aggregator-routing=true",
            f"--token-auth-file={self.workdir / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC",
            f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--api-audiences=https://kubernetes.default.svc.cluster.local",
            f"--audit-policy-file={self.workdir / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--allow-privileged=true",
            "--profiling=false",
            *node,
            "--v=0",
        ]

    def _controller_manager_args(self, pki: Path) -> list[str]:
        controllers = CONTROLLERS + (NODE_CONTROLLERS if self.node_ip else [])
        # One node, one /24: the node's podCIDR is the whole cluster CIDR, the subnet
        # the CNI configuration hands out (localnode.py).
        node = [
            "--allocate-node-cidrs=true",
            f"--cluster-cidr={self.node_subnet}",
            "--node-cidr-mask-size=24",
            "--service-cluster-ip-range=10.96.0.0/16",
        ] if self.node_ip else []
        return [
            f"--kubeconfig={self.workdir / 'controller-manager.kubeconfig'}",
            "--leader-elect=false",
            "--secure-port=0",
            "--use-service-account-credentials=true",
            f"--controllers={','.join(controllers)}",
            *node,
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            "--concurrent-gc-syncs=5",
            *([f"--kube-api-qps={self.controller_manager_qps:g}",
               f"--kube-api-burst={int(self.controller_manager_qps * 1.5)}"]
              if self.controller_manager_qps is not None else []),
            "--v=0",
        ]

    def _spawn(self, program: str, args: list[str]) -> None:
        log = open(self.workdir / f"{program}.log", "ab")  # noqa: SIM115 - lives with the process
        process = subprocess.Popen(
            [str(self.binary), program, *args],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=die_with_parent,
        )
        log.close()
        self.processes.append(process)

    def _ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.workdir / "pki" / "ca.crt"))

    def _wait_ready(self, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        request = urllib.request.Request(
            f"{self.server}/readyz", headers={"Authorization": f"Bearer {self.tokens['admin']}"}
        )
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            apiserver = self.processes[0]
            if apiserver.poll() is not None:
                log = self.workdir / "kube-apiserver.log"
                tail = log.read_text(errors="replace").splitlines()[-15:] if log.exists() else []
                raise RuntimeError(f"kube-apiserver exited with {apiserver.returncode}; {log} "
                                   "(gone with the session) ended:\n" + "\n".join(tail))
            try:
                with urllib.request.urlopen(request, context=self._ssl_context(), timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
                last_error = str(error)
            time.sleep(0.25)  # poll interval of a wait-for-condition
        raise TimeoutError(f"kube-apiserver not ready within {timeout}s: {last_error}")

    def _write_kubeconfigs(self, pki: Path) -> None:
        ca_data = base64.b64encode((pki / "ca.crt").read_bytes()).decode()
        cluster = {"name": "local", "cluster": {"server": self.server,
                                                 "certificate-authority-data": ca_data}}

        def config(users: list[str], current: str) -> str:
            return yaml.safe_dump({
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": u, "user": {"token": self.tokens[u]}} for u in users],
                "contexts": [{"name": u, "context": {"cluster": "local", "user": u}}
                             for u in users],
                "current-context": current,
            })

        self.kubeconfig.write_text(config(list(USERS), "admin"))
        self.kubeconfig.chmod(0o600)
        for component in ("controller-manager", "scheduler", "proxy"):
            user = f"system:kube-{component}"
            path = self.workdir / f"{component}.kubeconfig"
            path.write_text(config([user], user))
            path.chmod(0o600)

    def version(self) -> dict[str, str]:
        with urllib.request.urlopen(f"{self.server}/version", context=self._ssl_context()) as r:
            result: dict[str, str] = json.load(r)
            return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build the control plane if needed and print its path")
    parser.parse_args(argv)
    print(build())
    return 0


if __name__ == "__main__":
    sys.exit(main())
