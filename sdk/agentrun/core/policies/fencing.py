"""Fencing: the API server refuses the operator's writes from any pod but the leader's.

Leader election (:mod:`agentrun.core.policies.leadership`) says who should lead; it
cannot stop a former leader that was paused (a long GC, a frozen VM, SIGSTOP) or cut off
from the API server and does not know yet that its lease passed on: its reconciles may be
midway, each about to write what it decided from what it read before. Preconditions
(``resourceVersion``, deterministic names) make such a late write fail where the new
leader has written since, but not on an object the new leader has not touched yet: a
claim of a slot it has not looked at, which could exceed ``spec.maxActive`` by one.

So the fencing is the API server's, with a classic *fencing token*: the Secret
``agentrun-operator-leader`` in the operator's namespace names the leader's pod
(``agentrun.dev/leader``) and its *term* (``agentrun.dev/leader-term``: the leader
Lease's ``leaseTransitions`` when it took it). The ValidatingAdmissionPolicy
``agentrun-fence-operator`` takes that Secret as its params and, for every create,
update, patch or delete by the operator's ServiceAccount (the namespace, its user's and
the Secret's, is an argument: the chart installs into any namespace):

- refuses it unless the request's token is bound to the pod the Secret names (the API
  server puts the pod's name in ``request.userInfo.extra['authentication.kubernetes.io/
  pod-name']``, as for attempt Leases);
- lets the election through (the leader Lease), and the token itself, whose term may only
  grow: a former leader that wakes up after its successor wrote the token cannot name
  itself again.

A new leader takes the Lease, writes the token with its term, then makes sure admission
sees it before its first write (a server-side dry run the policy must accept:
:func:`probe_body`). From then on no write of a former leader's is admitted.

Why a Secret and not the Lease itself as the params: the API server keeps a param
informer per ``paramKind``, and for a built-in kind it stops that informer for good the
first time no binding names the kind for a moment (an uninstall and reinstall does it);
the params are then frozen until the API server restarts (kubernetes/kubernetes#130887,
measured here with a Lease: a holder changed three times, admission still saw the first).
Secrets are read by the API server itself, whose own informer keeps theirs running
(measured: the binding deleted and re-created three times, each change seen); the
stamping policy's epoch is a Secret for the same reason. ``tests/integration/operator/
test_leader_election.py`` re-creates the binding and checks that the params follow.

A missing Secret admits (``parameterNotFoundAction: Allow``): the API server looks for the
params before it evaluates ``matchConditions``, so a Deny would refuse every matched
write in the cluster, everyone's, until the first election. Nothing is fenced until a
leader has written the token; deleting it unfences until the next take. Writes by any
other identity (the local ``operator`` user of the tests, an operator run from a
kubeconfig: they run alone, without election) are not matched. With several API servers
each has its own cache: the dry run proves one; another may admit a former leader's
write for the milliseconds its watch lags.
"""

from __future__ import annotations

from typing import Any

from agentrun.api import names
from agentrun.core.policies import admission, leasepolicy, validating

Object = dict[str, Any]
ALL = ("CREATE", "UPDATE", "DELETE")
POD = f"request.userInfo.?extra.orValue({{}})[?'{leasepolicy.POD_NAME}'].orValue([])"
FENCED = "fenced"  # the word every refusal starts with (what a former leader's log shows)
SPARED = ("kube-system", "kube-node-lease", "kube-public")  # never matched


def operator_user(*, namespace: str) -> str:
    """The user the operator's pods write as: its ServiceAccount in ``namespace``."""
    return f"system:serviceaccount:{namespace}:{names.OPERATOR_APP}"



def rules() -> list[Object]:
    """Everything the operator writes (its ClusterRole's and Role's write verbs)."""
    return [
        validating.match_rule(names.GROUP, names.VERSION,
                              ["agentruns", "agentruns/status", "slots", "slots/status",
                               "launchspecs/status"], list(ALL)),
        validating.match_rule("", "v1", ["pods", "configmaps", "events", "secrets"],
                              list(ALL)),
        validating.match_rule("coordination.k8s.io", "v1", ["leases"], list(ALL)),
        # the history API's caBundle (controller.servingcerts)
        validating.match_rule("apiregistration.k8s.io", "v1", ["apiservices"], list(ALL)),
    ]


def _named(group: str, resource: str, name: str, *, namespace: str) -> str:
    return (f"request.resource.group == '{group}' && request.resource.resource == "
            f"'{resource}' && request.namespace == '{namespace}' && "
            f"request.name == '{name}'")


def _term(obj: str) -> str:
    """CEL: the token's term in ``obj`` (-1: none, or not a whole number: never an error,
    which would refuse every later write of the token)."""
    text = (f"{obj}.metadata.?annotations.orValue({{}})"
            f"[?'{names.LEADER_TERM_ANNOTATION}'].orValue('')")
    return f"({text}.matches('^[0-9]{{1,18}}$') ? int({text}) : -1)"


def fence_policy(*, namespace: str) -> list[Object]:
    """The fencing ValidatingAdmissionPolicy and its binding (same name), for the operator
    installed in ``namespace`` (its ServiceAccount, leader Lease and fencing token there).
    Cluster-scoped objects that name the namespace: one install per cluster."""
    election = _named("coordination.k8s.io", "leases", names.LEADER_LEASE,
                      namespace=namespace)
    token = _named("", "secrets", names.LEADER_SECRET, namespace=namespace)
    leader = f"params.metadata.?annotations.orValue({{}})[?'{names.LEADER_ANNOTATION}']"
    where = f"{namespace}/{names.LEADER_SECRET}"
    spec: Object = {
        "failurePolicy": "Fail",
        "paramKind": {"apiVersion": "v1", "kind": "Secret"},
        # Never the control plane's own namespaces: a failure to resolve the params
        # (failurePolicy Fail) must not stop node heartbeats or controllers' elections.
        "matchConstraints": {"namespaceSelector": {"matchExpressions": [{
                                 "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                 "values": list(SPARED)}]},
                             "objectSelector": {},
                             "resourceRules": rules(), "matchPolicy": "Equivalent"},
        "matchConditions": [
            {"name": "the-operator",
             "expression": "request.userInfo.username == "
                           f"'{operator_user(namespace=namespace)}'"},
            {"name": "not-the-election", "expression": f"!({election})"},
        ],
        "variables": [{"name": "pod", "expression": POD},
                      {"name": "leader", "expression": f"{leader}.orValue('')"},
                      {"name": "token", "expression": token}],
        "validations": [
            validating.dynamic_validation(
                "variables.token || (variables.pod.size() == 1 && "
                "variables.pod[0] == variables.leader)",
                f"'{FENCED}: ' + (variables.pod.size() == 1 ? 'pod ' + variables.pod[0] : "
                "'a token bound to no pod') + ' is not the leader (the fencing token "
                f"{where} names ' + (variables.leader == '' ? 'nobody' : variables.leader) "
                "+ '): only the leader writes'",
                reason="Forbidden"),
            validating.dynamic_validation(
                "!variables.token || request.operation != 'UPDATE' || "
                f"{_term('object')} > {_term('oldObject')}",
                f"'{FENCED}: the fencing token {where} is at term ' + "
                f"string({_term('oldObject')}) + '; a leader writes it only with a later "
                "term (it took the leader Lease since)'",
                reason="Forbidden"),
        ],
    }
    return [
        {"apiVersion": admission.ADMISSION_API, "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": names.FENCE_POLICY}, "spec": spec},
        {"apiVersion": admission.ADMISSION_API, "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": names.FENCE_POLICY},
         "spec": {"policyName": names.FENCE_POLICY, "validationActions": ["Deny"],
                  "paramRef": {"name": names.LEADER_SECRET, "namespace": namespace,
                               "parameterNotFoundAction": "Allow"}}},
    ]


def token_body(*, identity: str, term: int, resource_version: str | None,
               namespace: str) -> Object:
    """The fencing token naming ``identity`` at ``term`` (a create, or a PUT under the
    resourceVersion read), in the operator's ``namespace``."""
    metadata: Object = {"name": names.LEADER_SECRET, "namespace": namespace,
                        "labels": {"app.kubernetes.io/name": names.OPERATOR_APP},
                        "annotations": {names.LEADER_ANNOTATION: identity,
                                        names.LEADER_TERM_ANNOTATION: str(term)}}
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": metadata}


def token_names(secret: Object | None) -> tuple[str, int]:
    """Who the token names, and at which term (``("", -1)``: no token)."""
    annotations = ((secret or {}).get("metadata") or {}).get("annotations") or {}
    try:
        term = int(annotations.get(names.LEADER_TERM_ANNOTATION, "-1"))
    except ValueError:
        term = -1
    return str(annotations.get(names.LEADER_ANNOTATION) or ""), term


def probe_body(identity: str, *, namespace: str) -> Object:
    """What a new leader dry-runs before its first write: an Event in the operator's
    ``namespace`` (never stored: the dry run), which admission accepts only once it sees
    this replica in the token."""
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": "agentrun-leader-probe-", "namespace": namespace},
            "involvedObject": {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                               "name": names.LEADER_LEASE, "namespace": namespace},
            "reason": "LeaderProbe", "message": f"{identity} checks that it is fenced in",
            "type": "Normal", "source": {"component": names.OPERATOR_APP}}
