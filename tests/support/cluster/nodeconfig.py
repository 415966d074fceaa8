"""The node's configuration files, as data: containerd, CNI, kubelet, kube-proxy.

Why apart from :mod:`localnode`: every setting here is a decision (see
docs/design/testing-and-tooling.md, "The real node") and reads better without the process
handling around it. The rule they share: every listener bound to an explicit address,
loopback or the node IP, never a wildcard; nothing routed or masqueraded off the machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.cluster.nodehost import BRIDGE, SERVICE_RANGE, Network

# Where every registry resolves to: a loopback port nothing serves. Nothing can be pulled
# here, and trying must not send a packet (not even a DNS query) off the machine.
NO_REGISTRY = "https://127.0.0.1:9"


def registry_hosts() -> str:
    """``_default/hosts.toml``: every registry host replaced by :data:`NO_REGISTRY`."""
    return f'server = "{NO_REGISTRY}"\n'


def containerd_toml(*, root: Path, state: Path, socket: Path, runc: Path, cni_bin: Path,
                    cni_conf: Path, sandbox_image: str, registry_dir: Path) -> str:
    """containerd v2 (config version 3) with roots of its own and only a unix socket."""
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    return f"""version = 3
root = "{root}"
state = "{state}"

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[{runtime}]
  # root here lacks CAP_SYS_RESOURCE: runc may not lower oom_score_adj below ours.
  restrict_oom_score_adj = true
  [{runtime}.containerd]
    default_runtime_name = "runc"
    [{runtime}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{runtime}.containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
  [{runtime}.cni]
    bin_dirs = ["{cni_bin}"]
    conf_dir = "{cni_conf}"
    max_conf_num = 1

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{sandbox_image}"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "{registry_dir}"

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins.'io.containerd.nri.v1.nri']
  disable = true
"""


def cni_conflist(network: Network) -> dict[str, Any]:
    """The bridge, no masquerade, and routes to the pod subnet and Service range only."""
    return {
        "cniVersion": "1.0.0",
        "name": "agentrun",
        "plugins": [{
            "type": "bridge",
            "bridge": BRIDGE,
            "isGateway": True,
            "isDefaultGateway": False,
            "ipMasq": False,
            "hairpinMode": True,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": str(network.subnet), "gateway": network.node_ip}]],
                # The subnet (and the node IP in it) is on-link; nothing else is routed.
                "routes": [{"dst": str(SERVICE_RANGE), "gw": network.node_ip}],
            },
        }],
    }


def kubelet_config(*, network: Network, pki: Path, socket: Path, root: Path,
                   port: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": network.node_ip,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 0,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(pki / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(pki / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "containerRuntimeEndpoint": f"unix://{socket}",
        "cgroupDriver": "cgroupfs",
        # The VM holds cgroup v1 hierarchies; kubelet v1.37 refuses them unless told.
        "failCgroupV1": False,
        "failSwapOn": False,
        # Nothing can be pulled again here: never collect an image.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%"},
        "resolvConf": "",
        "clusterDomain": "cluster.local",
        "podLogsDir": str(root / "pod-logs"),
        "volumePluginDir": str(root / "volume-plugins"),
        "staticPodPath": "",
        "enableDebuggingHandlers": True,
        "shutdownGracePeriod": "0s",
        "logging": {"format": "text"},
    }


def proxy_config(*, network: Network, kubeconfig: Path, healthz_port: int,
                 metrics_port: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": "agentrun-node",
        "bindAddress": network.node_ip,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "nodePortAddresses": [f"{network.node_ip}/32"],
        "clusterCIDR": str(network.subnet),
        "detectLocalMode": "ClusterCIDR",
        # Leave the host's conntrack sysctls alone.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                      "tcpCloseWaitTimeout": "0s"},
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
    }
