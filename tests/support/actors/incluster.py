"""The operator running in the cluster, as the pod of ``manifests/deploy/operator.yaml``.

The shipped manifest names the registry image; on the local node nothing can be pulled,
so the rendered Deployment is patched here (never the file): the project image loaded
into the node, ``imagePullPolicy: Never``, and ``--namespace`` set to the test's
namespace, so this operator serves that namespace only and no other test's.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from agentrun import workload
from agentrun.core.policies import fencing
from tests.support.cluster.clusters import Cluster
from tests.support.waiting import wait_for

DEPLOY = Path(__file__).resolve().parents[3] / "manifests" / "deploy" / "operator.yaml"
SYSTEM_NAMESPACE = "agentrun-system"
NAME = "agentrun-operator"
OPERATOR_USER = fencing.operator_user(namespace=SYSTEM_NAMESPACE)
SELECTOR = "app.kubernetes.io/name=agentrun-operator"


def rendered(*, image: str, namespace: str) -> list[dict[str, Any]]:
    """The shipped objects, the Deployment patched to run ``image`` for ``namespace``."""
    found = []
    for document in yaml.safe_load_all(DEPLOY.read_text()):
        if not document:
            continue
        document = copy.deepcopy(document)  # the file's YAML anchors share one dict
        if document["kind"] == "Deployment":
            (container,) = document["spec"]["template"]["spec"]["containers"]
            assert container["image"].startswith("ghcr.io/"), container["image"]
            container["image"] = image
            container["imagePullPolicy"] = "Never"
            container["args"] = [*container["args"], "--namespace", namespace]
        found.append(document)
    return found


class InClusterOperator:
    """Deploys the operator's Deployment and removes it (and waits for its pod to go)."""

    def __init__(self, *, cluster: Cluster, image: str, namespace: str) -> None:
        self.cluster = cluster
        self.image = image
        self.namespace = namespace
        self.core = kubernetes.client.CoreV1Api(cluster.client())
        self.apps = kubernetes.client.AppsV1Api(cluster.client())

    def pods(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.core.api_client.sanitize_for_serialization(
            self.core.list_namespaced_pod(SYSTEM_NAMESPACE, label_selector=SELECTOR).items)
        return found

    def start(self, *, timeout: float = 120) -> list[dict[str, Any]]:
        """Apply the objects; the operator's pods once all Running (one leads and serves
        from then on, the other stands by)."""
        assert self.pods() == [], "another in-cluster operator is still running"
        objects = rendered(image=self.image, namespace=self.namespace)
        result = self.cluster.kubectl("apply", "--server-side", "-f", "-",
                                      input="\n".join(json.dumps(o) for o in objects))
        assert result.returncode == 0, result.stderr

        def running() -> list[dict[str, Any]] | None:
            pods = self.pods()
            return pods if len(pods) == workload.REPLICAS and all(
                p["status"].get("phase") == "Running" for p in pods) else None
        pods: list[dict[str, Any]] = wait_for(
            running, timeout=timeout, message=f"the operator's pods Running; {self.events()}")
        return pods

    def logs(self) -> str:
        result = self.cluster.kubectl("logs", "-n", SYSTEM_NAMESPACE, "-l", SELECTOR,
                                      "--tail", "60")
        return result.stdout + result.stderr

    def events(self) -> list[str]:
        return [f"{e.reason}: {e.message}" for e in
                self.core.list_namespaced_event(SYSTEM_NAMESPACE).items][-5:]

    def stop(self, *, timeout: float = 60) -> None:
        """Delete the Deployment, its disruption budget, its metrics Service and its history
        API (what :meth:`start` applied beside the ServiceAccount) and wait until its pods
        are gone: no operator left
        serving, and no APIService left that nobody serves (the API server's discovery,
        hence every namespace's deletion, would wait on it)."""
        for delete in (lambda: self.apps.delete_namespaced_deployment(
                           NAME, SYSTEM_NAMESPACE, propagation_policy="Foreground"),
                       lambda: kubernetes.client.PolicyV1Api(
                           self.core.api_client).delete_namespaced_pod_disruption_budget(
                           NAME, SYSTEM_NAMESPACE),
                       lambda: self.core.delete_namespaced_service(
                           workload.METRICS_SERVICE, SYSTEM_NAMESPACE)):
            try:
                delete()
            except kubernetes.client.ApiException as error:
                if error.status != 404:
                    raise
        removed = self.cluster.kubectl("delete", "--ignore-not-found", "-f", "-", input="\n".join(
            json.dumps(o) for o in workload.history_api()))
        assert removed.returncode == 0, removed.stderr
        wait_for(lambda: self.pods() == [], timeout=timeout,
                 message="the in-cluster operator's pods gone")
