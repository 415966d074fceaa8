"""The operator's history API registered in a test cluster, and waited on.

The chart registers it with a Service selecting the operator's pod; a test whose operator
is a process on the host registers the same APIService and Service (from
:func:`agentrun.workload.history_api`) with an EndpointSlice naming the host's address on
the node's bridge, which the API server (on the host) dials directly
(``--enable-aggregator-routing``).
"""

from __future__ import annotations

import json
from typing import Any

from agentrun import manifests, workload
from agentrun.api import names
from tests.support.cluster.clusters import Cluster
from tests.support.waiting import wait_for


def registration(address: str, port: int) -> list[dict[str, Any]]:
    """The chart's Service and APIService, the Service pointing at ``address:port``."""
    service, apiservice = workload.history_api()
    del service["spec"]["selector"]  # its endpoint is the operator process on the host
    slice_ = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
              "metadata": {"name": f"{names.HISTORY_SERVICE}-host",
                           "namespace": manifests.OPERATOR_NAMESPACE,
                           "labels": {"kubernetes.io/service-name": names.HISTORY_SERVICE}},
              "addressType": "IPv4",
              "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
              "ports": [{"name": workload.HISTORY_PORT_NAME, "port": port,
                         "protocol": "TCP"}]}
    service["spec"]["ports"][0]["targetPort"] = port
    return [service, slice_, apiservice]


def wait_available(cluster: Cluster, *, timeout: float = 90) -> None:
    """Until the API server calls the history APIService Available (it reached the
    server, over TLS it verified against the caBundle the operator put there)."""
    def available() -> bool:
        found = cluster.kubectl("get", "apiservice", names.HISTORY_APISERVICE, "-o", "json")
        conditions = json.loads(found.stdout or "{}").get("status", {}).get("conditions", [])
        return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)

    wait_for(available, timeout=timeout, message="the history APIService Available")
