"""The host side of the local node: its network, its lock, and undoing what it changed.

Why a module of its own: a kubelet owns the machine it runs on (fixed paths, sysctls,
iptables chains, cgroups, mounts), so everything the node changes on the host is made,
listed and undone here, in one place, and a crashed run's left-overs are found by the
same code at the next start. :mod:`localnode` runs the programs.

Network shape (see docs/design/testing-and-tooling.md, "The real node"): a bridge
``agentrun0`` whose gateway address is the node IP, in a private /24 clear of the
machine's own addresses and of the Service range; pods get routes to that /24 and the
Service range only, no masquerade, and our own iptables chains drop anything between the
bridge and any other interface.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import ipaddress
import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

BRIDGE = "agentrun0"
SERVICE_RANGE = ipaddress.ip_network("10.96.0.0/16")
DEFAULT_SUBNET = "10.244.0.0/24"
LOCK_PATH = Path("/run/agentrun-node.lock")
STATE_DIR = Path("/var/lib/agentrun-node")  # kubelet and containerd roots, host-state record
RUN_DIR = Path("/run/agentrun-node")  # containerd state and sockets
HOST_STATE = STATE_DIR / "host-state.json"
CHAINS = {"INPUT": "AGENTRUN-NODE-INPUT", "FORWARD": "AGENTRUN-NODE-FORWARD"}
# Paths the kubelet, containerd and CNI use whatever their configuration says.
FIXED_PATHS = [Path(p) for p in ("/var/lib/kubelet", "/var/log/containers", "/var/log/pods",
                                 "/var/lib/cni", "/run/containerd", "/run/nri",
                                 "/usr/libexec/kubernetes", "/etc/cni")]
# Sysctls the kubelet and the CNI bridge plugin set; restored on stop.
SYSCTLS = ["vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops",
           "net/ipv4/ip_forward", "net/ipv4/conf/all/route_localnet"]
# Node programs, by the name they run as: the controlplane binary's first argument, or
# the containerd binaries' own names.
NODE_PROGRAMS = {"kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2"}


class NodeUnavailable(RuntimeError):
    """No node can start here; the message says why and what to do."""


class NodeBusy(NodeUnavailable):
    """Another local node holds the machine-wide lock."""


@dataclass(frozen=True)
class Network:
    """The node's addresses: a /24 for pods whose first address is the node (bridge) IP."""

    subnet: ipaddress.IPv4Network

    @classmethod
    def choose(cls) -> Network:
        """The subnet from ``AGENTRUN_NODE_SUBNET`` (default 10.244.0.0/24), checked clear."""
        text = os.environ.get("AGENTRUN_NODE_SUBNET", DEFAULT_SUBNET)[:32]
        try:
            subnet = ipaddress.ip_network(text)
        except ValueError as error:
            raise ValueError(f"AGENTRUN_NODE_SUBNET={text!r}: {error}") from None
        if not isinstance(subnet, ipaddress.IPv4Network) or subnet.prefixlen != 24 \
                or not subnet.is_private:
            raise ValueError(f"AGENTRUN_NODE_SUBNET={text!r}: need a private IPv4 /24")
        if subnet.overlaps(SERVICE_RANGE):
            raise ValueError(f"AGENTRUN_NODE_SUBNET={text}: overlaps the Service range "
                             f"{SERVICE_RANGE}")
        for used in machine_networks():
            if subnet.overlaps(used):
                raise ValueError(f"node subnet {subnet} overlaps {used}, already on this "
                                 "machine: set AGENTRUN_NODE_SUBNET to a free private /24")
        return cls(subnet=subnet)

    @property
    def node_ip(self) -> str:
        return str(self.subnet.network_address + 1)


def machine_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network on an interface or in a route, except our own bridge's."""
    found: list[ipaddress.IPv4Network] = []
    for entry in json.loads(_run(["ip", "-4", "-j", "addr"]).stdout or "[]"):
        if entry.get("ifname") == BRIDGE:
            continue
        for info in entry.get("addr_info", []):
            found.append(ipaddress.IPv4Network(f"{info['local']}/{info['prefixlen']}",
                                               strict=False))
    for route in json.loads(_run(["ip", "-4", "-j", "route", "show", "table", "all"]).stdout
                            or "[]"):
        dst = route.get("dst", "default")
        if route.get("dev") == BRIDGE or dst == "default" or route.get("type") in (
                "local", "broadcast"):
            continue
        found.append(ipaddress.IPv4Network(dst if "/" in dst else f"{dst}/32", strict=False))
    return found


class NodeLock:
    """One node per machine: an exclusive ``flock`` held for the node's whole life.

    The kernel drops it when its holder dies (also by SIGKILL), so a crashed run never
    blocks the next; that next start then cleans what the crash left.
    """

    def __init__(self, path: Path = LOCK_PATH) -> None:
        self.path = path
        self._file: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if error.errno in (errno.EAGAIN, errno.EACCES):
                raise NodeBusy(
                    f"another local node is running on this machine (pid {holder} holds "
                    f"{self.path}): stop it (Ctrl-C on its `make cluster`, or let its test "
                    "session end), or start without a node (make cluster NODE=0, "
                    "AGENTRUN_TEST_NO_KUBELET=1)") from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._file = fd

    def release(self) -> None:
        if self._file is not None:
            os.close(self._file)
            self._file = None


def record_host_state() -> None:
    """Note the sysctls and fixed paths as they are before the node's first change.

    Kept when already there: it is then a crashed run's record of the true originals.
    """
    if HOST_STATE.exists():
        return
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    state = {"sysctls": {name: read_sysctl(name) for name in SYSCTLS},
             "absent": [str(p) for p in FIXED_PATHS if not p.exists()]}
    HOST_STATE.write_text(json.dumps(state))


def setup_network(network: Network) -> None:
    """The bridge with the node IP, and our chains dropping bridge <-> elsewhere traffic."""
    if not Path(f"/sys/class/net/{BRIDGE}").exists():
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True)
    _run(["ip", "addr", "replace", f"{network.node_ip}/24", "dev", BRIDGE], check=True)
    _run(["ip", "link", "set", BRIDGE, "up"], check=True)
    # This host's own connections to a Service leave from the node IP, as the pods'
    # replies must come back to it: by the default route they would leave from the
    # outward address, kube-proxy would masquerade them to the node IP, and the reply,
    # un-masqueraded to that outward address on its way in over the bridge, would meet
    # the INPUT rule below (from the bridge, only to the node IP) and be dropped. The
    # route goes with the bridge.
    _run(["ip", "route", "replace", str(SERVICE_RANGE), "dev", BRIDGE, "src", network.node_ip],
         check=True)
    subnet = str(network.subnet)
    rules = {
        "FORWARD": [["-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP"],
                    ["-o", BRIDGE, "!", "-i", BRIDGE, "-j", "DROP"]],
        # From pods: only the node IP itself; to the node IP or pods: only from the
        # bridge or this machine (lo), never from an outward interface.
        "INPUT": [["-i", BRIDGE, "!", "-d", network.node_ip, "-j", "DROP"],
                  ["-i", "lo", "-j", "RETURN"],
                  ["-d", subnet, "!", "-i", BRIDGE, "-j", "DROP"]],
    }
    for hook, chain in CHAINS.items():
        if _iptables("-n", "-L", chain).returncode != 0:
            _iptables("-N", chain, check=True)
        _iptables("-F", chain, check=True)
        for rule in rules[hook]:
            _iptables("-A", chain, *rule, check=True)
    ensure_jumps_first()


def ensure_jumps_first() -> None:
    """Our chains first in INPUT and FORWARD (kube-proxy prepends its own jumps)."""
    for hook, chain in CHAINS.items():
        while _iptables("-D", hook, "-j", chain).returncode == 0:
            pass
        _iptables("-I", hook, "1", "-j", chain, check=True)


def jumps_first() -> bool:
    """Whether both our chains are still the first rule of their hook."""
    for hook, chain in CHAINS.items():
        listed = _iptables("-S", hook).stdout.splitlines()
        rules = [line for line in listed if line.startswith("-A ")]
        if not rules or rules[0] != f"-A {hook} -j {chain}":
            return False
    return True


def cleanup(*, binaries: list[Path]) -> list[str]:
    """Undo everything a node (running, stopped or crashed) changed; say what was undone.

    ``binaries`` are the executables node programs run from, to find strays by
    ``/proc/<pid>/exe`` whatever their parent: containerd shims re-parent to init.
    """
    undone: list[str] = []
    for pid in node_pids(binaries=binaries):
        with _ignore_gone():
            os.kill(pid, signal.SIGKILL)
            undone.append(f"killed {pid}")
    undone += _kill_and_remove_cgroups()
    undone += _unmount_under([STATE_DIR, RUN_DIR, Path("/var/lib/kubelet"),
                              Path("/run/netns"), Path("/run/containerd")])
    for f in sorted(Path("/run/netns").glob("cni-*")) if Path("/run/netns").exists() else []:
        f.unlink(missing_ok=True)
        undone.append(f"removed {f}")
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        _run(["ip", "link", "delete", BRIDGE], check=True)
        undone.append(f"deleted bridge {BRIDGE}")
    undone += _remove_chains()
    if HOST_STATE.exists():
        state = json.loads(HOST_STATE.read_text())
        for name, value in state["sysctls"].items():
            if value is not None and read_sysctl(name) != value:
                Path("/proc/sys", name).write_text(value)
                undone.append(f"sysctl {name}={value}")
        for path in map(Path, state["absent"]):
            if path.exists():
                shutil.rmtree(path, ignore_errors=True)
                undone.append(f"removed {path}")
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    shutil.rmtree(STATE_DIR, ignore_errors=True)
    return undone


def leftovers(*, binaries: list[Path]) -> list[str]:
    """What of a node is still on this machine: empty once it is stopped and cleaned."""
    found = [f"process {pid}" for pid in node_pids(binaries=binaries)]
    found += [f"mount {target}" for target in mounts_under(
        [STATE_DIR, RUN_DIR, Path("/var/lib/kubelet"), Path("/run/netns")])]
    found += [f"cgroup {path}" for path in cgroup_dirs()]
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        found.append(f"bridge {BRIDGE}")
    for family in ("iptables-save", "ip6tables-save"):
        for line in _run([family]).stdout.splitlines():
            if line.startswith(":") and line[1:].startswith(("KUBE-", "AGENTRUN-")):
                found.append(f"{family} chain {line.split()[0][1:]}")
    found += [f"path {p}" for p in (STATE_DIR, RUN_DIR) if p.exists()]
    return found


def node_pids(*, binaries: list[Path]) -> list[int]:
    """Processes of node programs run from ``binaries`` (never an API server's)."""
    wanted = {str(b.resolve()) for b in binaries}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            exe = os.readlink(entry / "exe")
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        names = {Path(exe).name, argv[1].decode(errors="replace") if len(argv) > 1 else ""}
        if exe in wanted and names & NODE_PROGRAMS:
            found.append(int(entry.name))
    return found


def cgroup_dirs() -> list[Path]:
    """The ``kubepods`` cgroups the kubelet made, in every mounted hierarchy."""
    found = []
    for line in Path("/proc/mounts").read_text().splitlines():
        _, target, kind = line.split()[:3]
        if kind in ("cgroup", "cgroup2") and (Path(target) / "kubepods").is_dir():
            found.append(Path(target) / "kubepods")
    return found


def mounts_under(roots: list[Path]) -> list[str]:
    prefixes = [str(root).rstrip("/") + "/" for root in roots]
    targets = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    return [t for t in targets if any((t + "/").startswith(p) for p in prefixes)]


def _kill_and_remove_cgroups() -> list[str]:
    undone = []
    for root in cgroup_dirs():
        deadline = time.monotonic() + 20
        for directory in [*sorted(root.rglob("*"), key=lambda p: -len(p.parts)), root]:
            if not directory.is_dir():
                continue
            while True:
                procs = _cgroup_procs(directory)
                if not procs:
                    break
                for pid in procs:
                    with _ignore_gone():
                        os.kill(pid, signal.SIGKILL)
                if time.monotonic() > deadline:
                    raise RuntimeError(f"processes {procs} in {directory} survive SIGKILL")
                time.sleep(0.05)  # waiting for the kernel to reap what was killed
            with _ignore_gone():
                directory.rmdir()
        undone.append(f"removed cgroup {root}")
    return undone


def _cgroup_procs(directory: Path) -> list[int]:
    try:
        return [int(p) for p in (directory / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _unmount_under(roots: list[Path]) -> list[str]:
    undone = []
    for target in sorted(mounts_under(roots), key=len, reverse=True):
        if _run(["umount", "-l", target]).returncode == 0:
            undone.append(f"unmounted {target}")
    return undone


def _remove_chains() -> list[str]:
    undone = []
    for hook, chain in CHAINS.items():
        while _iptables("-D", hook, "-j", chain).returncode == 0:
            pass
        if _iptables("-n", "-L", chain).returncode == 0:
            _iptables("-F", chain, check=True)
            _iptables("-X", chain, check=True)
            undone.append(f"removed chain {chain}")
    # The kubelet's and kube-proxy's chains, in both families: they never remove them.
    for family in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            undone += _remove_kube_chains(family, table)
    return undone


def _remove_kube_chains(family: str, table: str) -> list[str]:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return _run([family, "-w", "5", "-t", table, *args])

    listed = run("-S").stdout.splitlines()
    chains = sorted({line.split()[1] for line in listed if line.startswith("-N KUBE-")})
    for line in listed:
        words = shlex.split(line)
        if words[0] == "-A" and words[1] not in chains and words[-1] in chains:
            run("-D", *words[1:])
    for chain in chains:
        run("-F", chain)
    undone = []
    for chain in chains:
        if run("-X", chain).returncode == 0:
            undone.append(f"removed chain {family}/{table}/{chain}")
    return undone


def read_sysctl(name: str) -> str | None:
    try:
        return Path("/proc/sys", name).read_text().strip()
    except OSError:
        return None


def _iptables(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return _run(["iptables", "-w", "5", *args], check=check)


def _run(argv: list[str], *, check: bool = False) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): "
                           f"{result.stderr.strip()}")
    return result


def _ignore_gone() -> contextlib.suppress:
    """Ignore a process or cgroup that went away between listing and acting on it."""
    return contextlib.suppress(ProcessLookupError, FileNotFoundError)
