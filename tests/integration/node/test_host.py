"""What the node does to this machine: listeners, firewall, the lock.

The network rule of these machines: traffic stays on the machine. Nothing of ours may
listen on a wildcard or the machine's outward address, pods have no route off it (see
test_pods), and our chains drop anything between the bridge and any other interface.
No packet is sent anywhere in these tests: they read the kernel's tables.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.cluster import nodehost
from tests.support.cluster.clusters import Cluster

pytestmark = pytest.mark.kubelet


def listening_sockets() -> dict[int, list[tuple[str, str, int]]]:
    """Socket inode -> (protocol, address, port) for TCP LISTEN and bound UDP sockets."""
    found: dict[int, list[tuple[str, str, int]]] = {}
    for proto, state in (("tcp", "0A"), ("tcp6", "0A"), ("udp", "07"), ("udp6", "07")):
        lines = Path(f"/proc/net/{proto}").read_text().splitlines()[1:]
        for line in lines:
            fields = line.split()
            if fields[3] != state:
                continue
            hex_address, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_address)
            # The kernel prints each 32-bit word in host (little-endian) order.
            words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            address = ipaddress.ip_address(words)
            found.setdefault(int(fields[9]), []).append((proto, str(address), int(hex_port, 16)))
    return found


def socket_inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    except OSError:
        pass
    return inodes


def test_nothing_of_ours_listens_on_a_wildcard_or_outward_address(cluster: Cluster) -> None:
    assert cluster.local is not None and cluster.node is not None
    ours = [p.pid for p in cluster.local.processes + cluster.node.processes]
    ours += nodehost.node_pids(binaries=cluster.node.binaries())
    sockets = listening_sockets()
    bound = {(pid, entry) for pid in set(ours) for inode in socket_inodes(pid)
             for entry in sockets.get(inode, [])}
    allowed = {"127.0.0.1", "::1", cluster.node.network.node_ip}
    wrong = sorted((pid, entry) for pid, entry in bound if entry[1] not in allowed)
    assert wrong == [], f"listeners off loopback and the node IP: {wrong}"
    addresses = {entry[1] for _, entry in bound}
    # The API server and the kubelet serve the node IP; the rest is loopback.
    assert cluster.node.network.node_ip in addresses
    assert (cluster.node.network.node_ip, 10250) in {(e[1], e[2]) for _, e in bound}


def test_our_chains_come_first_and_drop_bridge_to_elsewhere(cluster: Cluster) -> None:
    assert cluster.node is not None
    assert nodehost.jumps_first(), "kube-proxy's jumps came before ours"
    forward = subprocess.run(["iptables", "-w", "5", "-S", nodehost.CHAINS["FORWARD"]],
                             capture_output=True, text=True, check=True).stdout
    assert f"-i {nodehost.BRIDGE} ! -o {nodehost.BRIDGE} -j DROP" in forward
    assert f"! -i {nodehost.BRIDGE} -o {nodehost.BRIDGE} -j DROP" in forward
    inbound = subprocess.run(["iptables", "-w", "5", "-S", nodehost.CHAINS["INPUT"]],
                             capture_output=True, text=True, check=True).stdout
    assert f"! -d {cluster.node.network.node_ip}/32 -i {nodehost.BRIDGE} -j DROP" in inbound
    nat = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True,
                         check=True).stdout
    masquerades = [line for line in nat.splitlines() if "MASQUERADE" in line]
    # kube-proxy's one rule masquerades only what it marked (Service traffic from outside
    # the pod subnet, i.e. from this machine itself); nothing masquerades the bridge.
    assert all("KUBE-POSTROUTING" in line for line in masquerades), masquerades
    assert nodehost.BRIDGE not in nat


def test_a_second_node_is_refused_while_one_runs(cluster: Cluster) -> None:
    assert cluster.node is not None
    with pytest.raises(nodehost.NodeBusy, match="another local node is running") as busy:
        nodehost.NodeLock().acquire()
    assert str(cluster.owner) in str(busy.value)
    assert "NODE=0" in str(busy.value)
