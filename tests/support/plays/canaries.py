"""Canary admission policies: how a test knows the shipped ones are in force.

The API server compiles every admission policy and binding its informers hold into one
snapshot, and each informer sees objects in the order they were written. So a canary
applied *after* the shipped policies, acting on one ConfigMap name only, is in force only
once every policy written before it is too (and once it is gone after them, they are
gone). A dry-run create of that ConfigMap asks, without writing anything.
"""

from __future__ import annotations

import json
import subprocess

from tests.support.cluster.clusters import Cluster
from tests.support.waiting import wait_for

REFUSING = "agentrun-test-canary"  # a ValidatingAdmissionPolicy: refuses its ConfigMap
MUTATING = "agentrun-test-mutating-canary"  # a MutatingAdmissionPolicy: annotates it
API = "admissionregistration.k8s.io/v1"
# A ConfigMap created with only a generateName has no name when admission sees it: an
# expression reading ``object.metadata.name`` would fail there and, the canaries failing
# closed, refuse every such create in the cluster.
NAME = "object.metadata.?name.orValue('')"
CONFIGMAP_CREATES = {"resourceRules": [{
    "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
    "resources": ["configmaps"]}]}
POLICIES = {
    REFUSING: [
        {"apiVersion": API, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": REFUSING},
         "spec": {"failurePolicy": "Fail", "matchConstraints": CONFIGMAP_CREATES,
                  "validations": [{"expression": f"{NAME} != '{REFUSING}'",
                                   "message": f"{REFUSING} in force"}]}},
        {"apiVersion": API, "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": REFUSING},
         "spec": {"policyName": REFUSING, "validationActions": ["Deny"]}}],
    MUTATING: [
        {"apiVersion": API, "kind": "MutatingAdmissionPolicy", "metadata": {"name": MUTATING},
         "spec": {"failurePolicy": "Fail", "reinvocationPolicy": "Never",
                  "matchConstraints": CONFIGMAP_CREATES,
                  "matchConditions": [{"name": "the-canary",
                                       "expression": f"{NAME} == '{MUTATING}'"}],
                  "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                      "expression": "Object{metadata: Object.metadata{annotations: "
                                    f"{{'{MUTATING}': 'in-force'}}}}}}"}}]}},
        {"apiVersion": API, "kind": "MutatingAdmissionPolicyBinding",
         "metadata": {"name": MUTATING}, "spec": {"policyName": MUTATING}}],
}
KINDS = {REFUSING: "validatingadmissionpolicybinding,validatingadmissionpolicy",
         MUTATING: "mutatingadmissionpolicybinding,mutatingadmissionpolicy"}


def _probe(cluster: Cluster, name: str) -> subprocess.CompletedProcess[str]:
    body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": name, "namespace": "default"}})
    return cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=body)


def in_force(cluster: Cluster, name: str) -> bool:
    """Whether canary ``name`` acts on a dry-run create of its ConfigMap."""
    result = _probe(cluster, name)
    if name == REFUSING:
        if result.returncode == 0:
            return False
        assert f"{REFUSING} in force" in result.stderr, result.stderr  # no other refusal
        return True
    assert result.returncode == 0, result.stderr
    annotations = json.loads(result.stdout).get("metadata", {}).get("annotations") or {}
    return bool(annotations.get(MUTATING) == "in-force")


def apply(cluster: Cluster, name: str, *, what: str) -> None:
    """Apply canary ``name`` and wait until it acts: ``what`` was written before it."""
    result = cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": POLICIES[name]}))
    assert result.returncode == 0, result.stderr
    wait_for(lambda: in_force(cluster, name), timeout=30, message=f"{what} in force")


def remove(cluster: Cluster, name: str, *, what: str) -> None:
    """Delete canary ``name`` and wait until it no longer acts: nor does ``what``, deleted
    before it."""
    result = cluster.kubectl("delete", "--ignore-not-found", KINDS[name], name)
    assert result.returncode == 0, result.stderr
    wait_for(lambda: not in_force(cluster, name), timeout=30,
             message=f"{what} no longer in force")
