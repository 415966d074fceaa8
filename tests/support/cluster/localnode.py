"""A real node for the local control plane: containerd, kubelet, kube-proxy, kube-scheduler.

Why: an operator whose job is the life and death of worker pods must see pods that
really start, run, crash and exit. The kubelet, kube-proxy and kube-scheduler come from
the control plane's own multi-call binary (``tests/controlplane``); containerd v2 from
its Go module, built once into a cache keyed by version; runc and the CNI plugins from
Debian (``make nodedeps``). :mod:`nodehost` makes and undoes the host side.

- ``python -m tests.support.cluster.localnode up [--dir .cluster] [--no-node]``: the control
  plane and (unless ``--no-node``) the node, in the foreground until Ctrl-C (``make
  cluster``);
- ``python -m tests.support.cluster.localnode build``: build containerd if needed;
- ``python -m tests.support.cluster.localnode cleanup``: undo what a crashed node left;
- :func:`running`: the same from Python, for the pytest session fixture.

Images: nothing can be pulled here; :meth:`LocalNode.load_image` imports an OCI archive
(``tests/support/cluster/images.py``) and pods use ``imagePullPolicy: Never``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.support import gobuilds
from tests.support.cluster import nodehost, store
from tests.support.cluster.images import PROJECT_DEV_REF, pause_image, project_image
from tests.support.cluster.localcluster import NODE_NAME, USERS, LocalCluster, build
from tests.support.cluster.nodeconfig import (
    cni_conflist,
    containerd_toml,
    kubelet_config,
    proxy_config,
    registry_hosts,
)
from tests.support.cluster.processes import die_with_parent, end_processes, free_port

CONTAINERD_VERSION = "v2.4.2"
CONTAINERD_PROGRAMS = ("containerd", "containerd-shim-runc-v2", "ctr")
RUNC = Path("/usr/sbin/runc")
CNI_BIN = Path("/usr/lib/cni")
NEEDS = {RUNC: "runc", CNI_BIN / "bridge": "containernetworking-plugins",
         CNI_BIN / "host-local": "containernetworking-plugins",
         CNI_BIN / "loopback": "containernetworking-plugins",
         Path("/usr/sbin/iptables"): "iptables",
         # the clock-skew scenario's operator reads a faked wall clock
         # (tests/support/faults/clockskew.py)
         Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"): "libfaketime"}
SOCKET = nodehost.RUN_DIR / "containerd.sock"
KUBELET_PORT = 10250


def containerd_dir() -> Path:
    return gobuilds.cache_root() / "containerd" / CONTAINERD_VERSION


def build_containerd(*, log: bool = True) -> Path:
    """``go install`` containerd's three programs into the cache unless there; its folder."""
    def install(partial: Path) -> None:
        subprocess.run(
            ["go", "install", *(f"github.com/containerd/containerd/v2/cmd/{p}@"
                                f"{CONTAINERD_VERSION}" for p in CONTAINERD_PROGRAMS)],
            env={**os.environ, "GOBIN": str(partial), "CGO_ENABLED": "1"},
            cwd=partial, check=True,
        )

    return gobuilds.built(containerd_dir(), CONTAINERD_PROGRAMS, build=install,
                          note=f"localnode: building containerd {CONTAINERD_VERSION} "
                          "(~1.5 min on 2 cores)", log=log)


def check_host_packages() -> None:
    missing = sorted({pkg for path, pkg in NEEDS.items() if not path.exists()})
    if missing:
        raise nodehost.NodeUnavailable(f"the node needs Debian packages {', '.join(missing)}: run "
                           f"`make nodedeps` (or apt-get install -y {' '.join(missing)})")


@dataclass
class LocalNode:
    """The node's programs, run against ``cluster`` (started with the same network)."""

    cluster: LocalCluster
    network: nodehost.Network
    containerd: Path = field(default_factory=build_containerd)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def confdir(self) -> Path:
        return self.cluster.workdir / "node"

    def binaries(self) -> list[Path]:
        return [self.cluster.binary, *(self.containerd / p for p in CONTAINERD_PROGRAMS)]

    def start(self, *, timeout: float = 120.0, preload: Sequence[Path] = ()) -> None:
        """Start the node's programs; ``preload``: image archives imported before the kubelet
        starts, for pods created before the node is Ready (``imagePullPolicy: Never``
        fails a pod whose image is not there yet)."""
        self.confdir.mkdir(parents=True, exist_ok=True)
        pause = pause_image()
        self._write_configs(sandbox_image=pause.ref)
        self._spawn("containerd", [str(self.containerd / "containerd"),
                                   "--config", str(self.confdir / "containerd.toml")])
        deadline = time.monotonic() + timeout
        self._wait(lambda: self.ctr("version").returncode == 0, "containerd", deadline)
        for archive in (pause.path, *preload):
            self.load_image(archive)
        self.cluster_kubectl("create", "clusterrolebinding", "kube-apiserver-kubelet-client",
                             "--clusterrole=system:kubelet-api-admin",
                             "--user=kube-apiserver-kubelet-client")
        self._spawn("kube-scheduler", self._program(
            "kube-scheduler", f"--kubeconfig={self.cluster.workdir / 'scheduler.kubeconfig'}",
            "--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false", "--v=0"))
        self._spawn("kubelet", self._program(
            "kubelet", f"--config={self.confdir / 'kubelet.yaml'}",
            f"--kubeconfig={self.confdir / 'kubelet.kubeconfig'}",
            f"--root-dir={nodehost.STATE_DIR / 'kubelet'}",
            f"--cert-dir={nodehost.STATE_DIR / 'kubelet' / 'pki'}",
            f"--node-ip={self.network.node_ip}", f"--hostname-override={NODE_NAME}",
            "--v=0"))
        # kube-proxy waits for the Node the kubelet registers; it prepends its own
        # jumps to INPUT and FORWARD, so ours go first again once it has synced.
        self._spawn("kube-proxy", self._program("kube-proxy",
                                                f"--config={self.confdir / 'proxy.yaml'}"))
        self._wait(self._kube_proxy_synced, "kube-proxy's first sync", deadline)
        nodehost.ensure_jumps_first()
        self._wait(self.ready, f"node {NODE_NAME} Ready and untainted", deadline)

    def stop(self) -> None:
        """End the node's programs (kubelet first, so it starts nothing new)."""
        end_processes(self.processes, in_turn=True)

    def ready(self) -> bool:
        """The Node says Ready, carries no taint, and the `kubernetes` Service has an endpoint."""
        node = self.cluster_kubectl("get", "node", NODE_NAME, "-o", "json")
        if node.returncode != 0:
            return False
        body = json.loads(node.stdout)
        conditions = {c["type"]: c["status"] for c in body["status"].get("conditions", [])}
        slices = self.cluster_kubectl("get", "endpointslices", "-n", "default", "-l",
                                      "kubernetes.io/service-name=kubernetes", "-o", "json")
        endpoints = [a for item in json.loads(slices.stdout or '{"items": []}')["items"]
                     for e in item.get("endpoints") or [] for a in e["addresses"]]
        return (conditions.get("Ready") == "True" and not body["spec"].get("taints")
                and self.network.node_ip in endpoints)

    def load_image(self, path: Path) -> None:
        """Import an image archive into the node's containerd, for pods to run.

        One import at a time on the machine (an exclusive ``flock``): the test processes
        attached to one node (:mod:`tests.support.cluster.handle`) import the same image,
        and containerd refuses a second ingest of content another one holds locked.
        """
        with open(self.confdir / "import.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            result = self.ctr("images", "import", "--local", str(path))
        if result.returncode != 0:
            raise RuntimeError(f"ctr images import {path} failed: {result.stderr.strip()}")

    def load_project_image(self) -> str:
        """Build (or find) the project image, import it and tag it ``PROJECT_DEV_REF``.

        For ``make cluster``: the examples name that stable ref, so they run whatever the
        checkout was when the node started (restart it to pick up a change).
        """
        archive = project_image()
        self.load_image(archive.path)
        tagged = self.ctr("images", "tag", "--force", archive.ref, PROJECT_DEV_REF)
        if tagged.returncode != 0:
            raise RuntimeError(f"ctr images tag {archive.ref} failed: {tagged.stderr.strip()}")
        ref: str = archive.ref
        return ref

    def ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.containerd / "ctr"), "--address", str(SOCKET),
                               "-n", "k8s.io", *args],
                              capture_output=True, text=True, check=False, timeout=120)

    def cluster_kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.cluster.kubectl(*args)

    def _kube_proxy_synced(self) -> bool:
        listed = subprocess.run(["iptables", "-w", "5", "-t", "nat", "-S", "KUBE-SERVICES"],
                                capture_output=True, text=True, check=False)
        return "default/kubernetes:https" in listed.stdout

    def _program(self, name: str, *args: str) -> list[str]:
        return [str(self.cluster.binary), name, *args]

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.cluster.workdir / f"{name}.log", "ab")  # noqa: SIM115 - the process's
        env = {**os.environ, "PATH": f"{self.containerd}:/usr/sbin:/usr/bin:/sbin:/bin"}
        self.processes.append(subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True, preexec_fn=die_with_parent))
        log.close()

    def _wait(self, check: Callable[[], bool], what: str, deadline: float) -> None:
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    args = [Path(str(a)).name for a in process.args[:2]]  # type: ignore[index]
                    program = args[1] if args[0] == self.cluster.binary.name else args[0]
                    raise RuntimeError(f"{program} exited with {process.returncode} waiting "
                                       f"for {what}; see {self.cluster.workdir}/{program}.log")
            if check():
                return
            time.sleep(0.25)  # poll interval of a wait-for-condition
        raise TimeoutError(f"{what}: not within the timeout; see {self.cluster.workdir}/*.log")

    def _write_configs(self, *, sandbox_image: str) -> None:
        state = nodehost.STATE_DIR
        cni_dir = state / "cni" / "net.d"
        cni_dir.mkdir(parents=True, exist_ok=True)
        (cni_dir / "10-agentrun.conflist").write_text(json.dumps(cni_conflist(self.network)))
        registry_dir = self.confdir / "registries"
        (registry_dir / "_default").mkdir(parents=True, exist_ok=True)
        (registry_dir / "_default" / "hosts.toml").write_text(registry_hosts())
        (self.confdir / "containerd.toml").write_text(containerd_toml(
            root=state / "containerd", state=nodehost.RUN_DIR / "containerd", socket=SOCKET,
            runc=RUNC, cni_bin=CNI_BIN, cni_conf=cni_dir, sandbox_image=sandbox_image,
            registry_dir=registry_dir))
        pki = self.cluster.pki
        (self.confdir / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_config(
            network=self.network, pki=pki, socket=SOCKET, root=state / "kubelet",
            port=KUBELET_PORT)))
        (self.confdir / "proxy.yaml").write_text(yaml.safe_dump(proxy_config(
            network=self.network, kubeconfig=self.cluster.workdir / "proxy.kubeconfig",
            healthz_port=free_port(), metrics_port=free_port())))
        kubeconfig = yaml.safe_load(self.cluster.kubeconfig.read_text())
        kubeconfig["users"] = [{"name": "node", "user": {
            "client-certificate": str(pki / "kubelet-client.crt"),
            "client-key": str(pki / "kubelet-client.key")}}]
        kubeconfig["contexts"] = [{"name": "node", "context": {"cluster": "local",
                                                              "user": "node"}}]
        kubeconfig["current-context"] = "node"
        (self.confdir / "kubelet.kubeconfig").write_text(yaml.safe_dump(kubeconfig))


@contextlib.contextmanager
def running(workdir: Path, *, node: bool = True,
            with_store: bool = False) -> Iterator[tuple[LocalCluster, LocalNode | None]]:
    """The control plane and (``node``) a node: the node's lock held, the host cleaned.

    ``with_store`` (with a node only): the object store too (:mod:`store`), answering and
    its bucket made before this yields. Off by default: benchmarks and fault scenarios
    measure the cluster without it.
    """
    if not node:
        alone = LocalCluster(workdir=workdir, binary=build())
        try:
            alone.start()
            yield alone, None
        finally:
            alone.stop()
        return
    check_host_packages()
    binary, containerd = build(), build_containerd()
    lock = nodehost.NodeLock()
    lock.acquire()
    binaries = [binary, *(containerd / p for p in CONTAINERD_PROGRAMS)]
    cluster: LocalCluster | None = None
    local_node: LocalNode | None = None
    try:
        for line in nodehost.cleanup(binaries=binaries):
            print(f"localnode: left over from an earlier run: {line}", file=sys.stderr)
        network = nodehost.Network.choose()
        nodehost.record_host_state()
        nodehost.setup_network(network)
        cluster = LocalCluster(workdir=workdir, binary=binary, node_ip=network.node_ip,
                               node_subnet=str(network.subnet))
        cluster.start()
        # The store's objects before the node: its pod starts as soon as the node is Ready.
        preload = [store.prepare(cluster).path] if with_store else []
        local_node = LocalNode(cluster=cluster, network=network, containerd=containerd)
        local_node.start(preload=preload)
        if with_store:
            seconds = store.wait_ready()
            # Not "ready at": the line `up` prints once all is ready says that (and
            # tests/integration/node/test_teardown.py waits for those words).
            print(f"localnode: object store answering, bucket {store.BUCKET} made, "
                  f"{seconds:.1f}s after the node ({store.STORE_ENDPOINT})",
                  file=sys.stderr, flush=True)
        yield cluster, local_node
    finally:
        if local_node is not None:
            local_node.stop()
        if cluster is not None:
            cluster.stop()  # before the bridge goes: it serves on the node IP
        try:
            nodehost.cleanup(binaries=binaries)
        finally:
            lock.release()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build containerd if needed and print its folder")
    sub.add_parser("cleanup", help="undo what a crashed node left on this machine")
    up = sub.add_parser("up", help="control plane and node in the foreground until Ctrl-C")
    up.add_argument("--dir", type=Path, default=Path(".cluster"))
    up.add_argument("--no-node", action="store_true", help="the control plane alone")
    args = parser.parse_args(argv)
    if args.command == "build":
        print(build_containerd())
        return 0
    if args.command == "cleanup":
        lock = nodehost.NodeLock()
        lock.acquire()
        for line in nodehost.cleanup(binaries=[build(), *(
                containerd_dir() / p for p in CONTAINERD_PROGRAMS)]):
            print(f"localnode: {line}")
        lock.release()
        return 0
    stopping = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    started = time.monotonic()
    workdir: Path = args.dir.resolve()
    with running(workdir, node=not args.no_node, with_store=True) as (cluster, node), \
            contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: stop, cleanly
        what = f"node {NODE_NAME} at {node.network.node_ip}" if node else "no node"
        image = node.load_project_image() if node else None
        print(f"localcluster: kubernetes {cluster.version()['gitVersion']} ready at "
              f"{cluster.server} ({what}) in {time.monotonic() - started:.1f}s", flush=True)
        print(f"  export KUBECONFIG={cluster.kubeconfig}   # contexts: {', '.join(USERS)}")
        print(f"  {workdir / 'bin' / 'kubectl'} get nodes,namespaces")
        if image:
            print(f"  worker image {PROJECT_DEV_REF} = {image} (the examples run it)")
        if node:
            print(f"  object store (S3, anonymous) {store.STORE_ENDPOINT}, bucket {store.BUCKET}"
                  " (pods and this host alike)")
        print("  Ctrl-C stops the control plane" + (" and the node." if node else "."),
              flush=True)
        processes = cluster.processes + (node.processes if node else [])
        while not stopping:
            for process in processes:
                if process.poll() is not None:
                    print(f"localcluster: {' '.join(map(str, process.args[:2]))} "  # type: ignore[index]
                          f"exited with {process.returncode}", file=sys.stderr)
                    return 1
            time.sleep(0.5)  # supervision loop, not synchronisation
    print("localcluster: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
