"""The demo's stage: the example objects changed for the local node, the operator, cleanup.

Terms: the *examples* are ``manifests/examples`` (what a newcomer applies by hand); the
*stage* is everything the demo sets up before its first step and removes after its last
(in ``--kubeconfig`` mode; with ``--up`` the whole control plane goes): the demo
namespace and its objects, the operator as a pod, the effect owner. Every change the
demo makes to the examples is one entry of :data:`CHANGES`, printed once at the start.
"""

from __future__ import annotations

import contextlib
import copy
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm
import kubernetes
import yaml
from clusters import Cluster
from waiting import wait_for

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "manifests" / "examples"
NAMESPACE = "agentrun-demo"
RUN = "research-report"
NODE = "research"
OWNER = "alice"  # claims attempt 1, so she owns the slot's attempts
OTHER = "bob"  # an editor too, but not the owner: the owner-actor rule stops him
PAUSE_POINT = "after-step:source-2"  # attempt 1 is killed here: notes 1 and 2 are saved
SAVED = ("source-1", "source-2")
LEASE_SECONDS = 10
Object = dict[str, Any]

CHANGES = (
    "claimPolicy Manual: alice claims each attempt, so an owner is recorded",
    f"workflow: the {NODE} node alone (the example agent researches, writes and publishes "
    "in one worker; a report node would publish a second report)",
    "gpu LaunchSpec runs on the local node (it has no GPU): no nodeSelector, tolerations, "
    "nvidia limits or node scope",
    f"lease {LEASE_SECONDS} s on both LaunchSpecs (the example's 30/60 s would make the "
    "demo wait)",
    "retry backoff 1 s (the example's 10 s)",
    f"attempt 1 on the cpu spec pauses at {PAUSE_POINT} (AGENTRUN_EXAMPLE_PAUSE) so the "
    "demo can kill it there",
    "alice and bob are editors and viewers of the namespace",
)


def example_objects() -> list[Object]:
    """The example objects, as ``kubectl apply`` would read them (the one reader: the
    kustomize base replaces this body with ``kubectl kustomize manifests/examples``)."""
    found: list[Object] = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        found.extend(copy.deepcopy(d) for d in yaml.safe_load_all(path.read_text()) if d)
    return found


def _container(spec: Object) -> Object:
    (container,) = spec["spec"]["template"]["spec"]["containers"]
    found: Object = container
    return found


def demo_objects(objects: list[Object], *, image: str, owner_url: str) -> list[Object]:
    """The examples with :data:`CHANGES` (and the image and owner URL of this machine)."""
    changed = copy.deepcopy(objects)
    by_kind: dict[str, list[Object]] = {}
    for obj in changed:
        by_kind.setdefault(obj["kind"], []).append(obj)
    for config in by_kind.get("ConfigMap", []):
        kind = config["metadata"].get("labels", {}).get("agentrun.dev/config-kind")
        if kind == "workflow":  # the research node alone
            flow = yaml.safe_load(config["data"]["workflow.yaml"])
            flow["nodes"] = [{**n, "dependsOn": []} for n in flow["nodes"] if n["name"] == NODE]
            for node in flow["nodes"]:
                node.get("retry", {}).get("backoff", {})["initialSeconds"] = 1
            config["data"]["workflow.yaml"] = yaml.safe_dump(flow, sort_keys=False)
        if kind == "bindings":  # publish to the demo's own effect owner
            bindings = yaml.safe_load(config["data"]["bindings.yaml"])
            bindings["nodes"] = [n for n in bindings["nodes"] if n["node"] == NODE]
            bindings["publish"]["url"] = owner_url
            config["data"]["bindings.yaml"] = yaml.safe_dump(bindings, sort_keys=False)
    for spec in by_kind.get("LaunchSpec", []):
        spec["spec"]["lease"] = {"durationSeconds": LEASE_SECONDS}
        container = _container(spec)
        container["image"] = image  # what this node has loaded (nothing is pulled)
        container["imagePullPolicy"] = "Never"
        if "gpu" in spec["spec"]["claim"]["workerClasses"]:  # no GPU here
            pod = spec["spec"]["template"]["spec"]
            pod.pop("nodeSelector", None)
            pod.pop("tolerations", None)
            spec["spec"].pop("scope", None)
            container["resources"] = {"requests": {"cpu": "50m", "memory": "64Mi"}}
        else:  # attempt 1 pauses where the demo kills it
            container["env"] = [{"name": "AGENTRUN_EXAMPLE_PAUSE",
                                 "value": f"{PAUSE_POINT}@1"}]
    for run in by_kind.get("AgentRun", []):
        run["spec"]["claimPolicy"] = "Manual"
        run["spec"]["retry"]["backoff"]["initialSeconds"] = 1
    return changed + editors()


def editors() -> list[Object]:
    """alice and bob as editors and viewers of the demo namespace (shipped ClusterRoles)."""
    return [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": f"demo-{role}", "namespace": NAMESPACE},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": role},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u}
                          for u in (OWNER, OTHER)]}
            for role in ("agentrun-editor", "agentrun-viewer")]


def apply(cluster: Cluster, objects: list[Object], *, user: str = "admin") -> None:
    """``kubectl apply --server-side`` of ``objects`` as ``user``; an error says which."""
    result = cluster.kubectl("apply", "--server-side", "--field-manager", "agentrun-demo",
                             "-f", "-", user=user,
                             input="\n".join(json.dumps(o) for o in objects))
    if result.returncode != 0:
        raise RuntimeError(f"kubectl apply failed: {result.stderr.strip()[:600]}")


def stage(cluster: Cluster, *, image: str, owner_url: str) -> None:
    """The demo namespace first (its objects need it), then the rest; the run is alice's."""
    objects = demo_objects(example_objects(), image=image, owner_url=owner_url)
    namespaces = [o for o in objects if o["kind"] == "Namespace"]
    runs = [o for o in objects if o["kind"] == "AgentRun"]
    apply(cluster, namespaces)
    apply(cluster, [o for o in objects if o not in namespaces and o not in runs])
    core = kubernetes.client.CoreV1Api(cluster.client())
    wait_for(lambda: core.read_namespaced_service_account("agentrun-worker", NAMESPACE),
             timeout=30, message="the worker's ServiceAccount")
    # alice launches her run (RBAC from her bindings, which may take a moment to apply)
    wait_for(lambda: cluster.kubectl("auth", "can-i", "create", "agentruns.agentrun.dev",
                                     "-n", NAMESPACE, user=OWNER).returncode == 0,
             timeout=30, message="alice may create AgentRuns")
    apply(cluster, runs, user=OWNER)


def remove_namespace(cluster: Cluster, *, timeout: float = 120) -> None:
    """Delete the demo namespace and wait until it is gone (its pods with it)."""
    core = kubernetes.client.CoreV1Api(cluster.client())
    try:
        core.delete_namespace(NAMESPACE)
    except kubernetes.client.ApiException as error:
        if error.status != 404:
            raise

    def gone() -> bool:
        try:
            core.read_namespace(NAMESPACE)
        except kubernetes.client.ApiException as error:
            return error.status == 404
        return False
    wait_for(gone, timeout=timeout, message=f"namespace {NAMESPACE} deleted")


@contextlib.contextmanager
def install_operator(cluster: Cluster, *, image: str,
                     take_ownership: bool) -> Iterator[helm.Release]:
    """The operator as a pod serving the demo namespace, installed with the Helm chart
    (CRDs, RBAC, admission policies, Deployment); uninstalled, its pod gone, at exit.

    ``take_ownership``: the cluster may hold the operator's objects already, applied by
    ``kubectl`` (``make install``, the suite's session); the chart adopts them, and its
    uninstall removes them (the caller who applied them applies them again).
    """
    with helm.Release(cluster.kubeconfig, image=image, namespaces=[NAMESPACE],
                      take_ownership=take_ownership) as release:
        yield release


def plugin(cluster: Cluster, *args: str, user: str) -> subprocess.CompletedProcess[str]:
    """``kubectl agentrun`` as ``user`` (its own context of the local cluster)."""
    import sys

    binary = Path(sys.executable).parent / "kubectl-agentrun"
    return subprocess.run([str(binary), "--kubeconfig", str(cluster.kubeconfig),
                           "--context", user, "-n", NAMESPACE, *args],
                          capture_output=True, text=True, check=False, timeout=150)
