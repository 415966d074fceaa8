"""The operator's workload: its Deployment and PodDisruptionBudget, its metrics Service,
and the history API's Service and APIService.

Objects only (``manifests/deploy/operator.yaml`` and the chart's templates are made of
them, by :mod:`agentrun.manifests` and :mod:`agentrun.chart`); the RBAC and admission
policies they run under are :mod:`agentrun.manifests`' own.
"""

from __future__ import annotations

from typing import Any

from agentrun.api import names

IMAGE = "ghcr.io/agentrun/agentrun-operator:0.1.0"
PULL_POLICY = "IfNotPresent"
METRICS_PORT = 8080  # agentrun.cli's default --metrics-port
METRICS_PORT_NAME = "metrics"
METRICS_SERVICE = f"{names.OPERATOR_APP}-metrics"
HISTORY_PORT = 8443  # the operator's --history-port in its pod
HISTORY_PORT_NAME = "history"
SELECTOR = {"app.kubernetes.io/name": names.OPERATOR_APP}
RESOURCES: dict[str, dict[str, str]] = {"requests": {"cpu": "50m", "memory": "128Mi"},
                                        "limits": {"memory": "512Mi"}}
# The kubelet's probes on the metrics server (agentrun.controller.metrics): /healthz while
# the process serves HTTP, /readyz once the stores are primed, the stamping epoch is in
# force and the queue runs. Priming lists every watched kind, so readiness may take a
# while on a big cluster: no deadline on it, only on liveness, which answers at once.
PROBES = {
    "livenessProbe": {"httpGet": {"path": "/healthz", "port": METRICS_PORT_NAME},
                      "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 6},
    "readinessProbe": {"httpGet": {"path": "/readyz", "port": METRICS_PORT_NAME},
                       "periodSeconds": 5, "timeoutSeconds": 5, "failureThreshold": 3},
}


def operator_args(*, port: int = METRICS_PORT) -> list[str]:
    """The operator's command line in its pod: metrics (and probes) on every address, the
    history API on its port, leader election (its identity: the pod's name, ``POD_NAME``;
    the fencing policy lets only the leader's pod write)."""
    return ["run", "--metrics-address", "0.0.0.0", "--metrics-port", str(port),
            "--history-port", str(HISTORY_PORT), "--leader-elect"]


# The pod's own name, which leader election and the Events' reportingInstance use, and
# its namespace, where the operator keeps its Lease and Secrets (agentrun.kube.ownnamespace).
POD_NAME_ENV = {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
POD_NAMESPACE_ENV = {"name": "POD_NAMESPACE",
                     "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}


REPLICAS = 2  # one leads, one stands by (the chart's ``replicas``)
# Spread over nodes when it can (soft: a one-node cluster still runs both): a lost node
# then leaves a primed standby.
SPREAD = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
    "weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": dict(SELECTOR)},
                                       "topologyKey": "kubernetes.io/hostname"}}]}}


def deployment(*, image: str = IMAGE, replicas: int | str = REPLICAS,
               namespace: str = names.OPERATOR_NAMESPACE) -> list[dict[str, Any]]:
    """The operator's service account and Deployment in ``namespace`` (the plain
    manifests' is the one :func:`agentrun.manifests.operator_rbac` makes; the chart's, the
    release's; the pods learn it from ``POD_NAMESPACE``): ``replicas`` replicas under leader
    election and the fence, a rolling update that starts a new one and waits until it is
    Ready (a primed standby) before it stops an old one, spread over nodes when it can.

    The election and the fence make a restart, an upgrade or a lost node safe like a
    failover: the new leader writes only once admission sees it in the fencing token
    (docs/design/leadership.md).
    """
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": names.OPERATOR_APP, "namespace": namespace}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": names.OPERATOR_APP, "namespace": namespace,
                      "labels": dict(SELECTOR)},
         "spec": {
             "replicas": replicas,
             "strategy": {"type": "RollingUpdate",
                          "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
             "selector": {"matchLabels": dict(SELECTOR)},
             "template": {
                 "metadata": {"labels": dict(SELECTOR)},
                 "spec": {
                     "serviceAccountName": names.OPERATOR_APP,
                     "affinity": SPREAD,
                     "securityContext": {"runAsNonRoot": True,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{
                         "name": "operator", "image": image, "imagePullPolicy": PULL_POLICY,
                         "args": operator_args(),
                         "env": [POD_NAME_ENV, POD_NAMESPACE_ENV],
                         "ports": [{"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT,
                                    "protocol": "TCP"},
                                   {"name": HISTORY_PORT_NAME, "containerPort": HISTORY_PORT,
                                    "protocol": "TCP"}],
                         **PROBES,
                         "resources": RESOURCES,
                         "securityContext": {"allowPrivilegeEscalation": False,
                                             "readOnlyRootFilesystem": True,
                                             "capabilities": {"drop": ["ALL"]}},
                     }],
                 }},
         }},
    ]


def disruption_budget(*, namespace: str = names.OPERATOR_NAMESPACE) -> list[dict[str, Any]]:
    """At most one replica down by a voluntary disruption (a drain, an eviction): another
    stays to lead or to take over. ``maxUnavailable`` rather than ``minAvailable``: with
    one replica it never blocks a drain; a replica that is not Ready may always be
    evicted (it serves nothing)."""
    return [{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
             "metadata": {"name": names.OPERATOR_APP, "namespace": namespace,
                          "labels": dict(SELECTOR)},
             "spec": {"maxUnavailable": 1, "selector": {"matchLabels": dict(SELECTOR)},
                      "unhealthyPodEvictionPolicy": "AlwaysAllow"}}]


def metrics_service(*, namespace: str = names.OPERATOR_NAMESPACE) -> list[dict[str, Any]]:
    """A ClusterIP Service in front of the operator's metrics port, for Prometheus."""
    return [{"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": METRICS_SERVICE, "namespace": namespace,
                          "labels": dict(SELECTOR)},
             "spec": {"type": "ClusterIP", "selector": dict(SELECTOR),
                      "ports": [{"name": METRICS_PORT_NAME, "port": METRICS_PORT,
                                 "targetPort": METRICS_PORT_NAME, "protocol": "TCP"}]}}]


def history_api(*, namespace: str = names.OPERATOR_NAMESPACE) -> list[dict[str, Any]]:
    """The history API: a Service in front of the operator's history port and the
    APIService that makes the API server forward ``history.agentrun.dev`` to it. Its
    ``caBundle`` is left out: the operator puts its own certificate there at start
    (``controller.servingcerts``). While no operator serves it, discovery of the group
    fails, and the API server's namespace deletion waits for it (as for every aggregated
    API): run the operator."""
    return [{"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": names.HISTORY_SERVICE, "namespace": namespace,
                          "labels": dict(SELECTOR)},
             "spec": {"type": "ClusterIP", "selector": dict(SELECTOR),
                      "ports": [{"name": HISTORY_PORT_NAME, "port": 443,
                                 "targetPort": HISTORY_PORT_NAME, "protocol": "TCP"}]}},
            apiservice(namespace=namespace)]


def apiservice(*, namespace: str = names.OPERATOR_NAMESPACE) -> dict[str, Any]:
    """The history API's APIService, forwarding to the Service in ``namespace``."""
    return {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": names.HISTORY_APISERVICE, "labels": dict(SELECTOR)},
            "spec": {"group": names.HISTORY_GROUP, "version": names.HISTORY_VERSION,
                     "service": {"name": names.HISTORY_SERVICE, "namespace": namespace,
                                 "port": 443},
                     "groupPriorityMinimum": 1000, "versionPriority": 15}}
