"""The ValidatingAdmissionPolicy on pod-bound tokens: in a tenant's namespace, a node's alone.

A record on an attempt's Lease is trusted because only a token bound to the attempt's pod
may write it (:mod:`agentrun.core.policies.leasepolicy`). Such a token is what a kubelet requests
to project a pod's ServiceAccount token: a TokenRequest (``create`` on
``serviceaccounts/token``) whose ``spec.boundObjectRef`` is the Pod. The standard ``edit``
role grants that ``create`` for every ServiceAccount of the namespace, so without this
policy any editor could mint a token bound to another person's attempt pod (``kubectl
create token <account> --bound-object-kind Pod --bound-object-name <pod>``) and commit
records the successor would take as that attempt's.

In a tenant's namespace (label ``agentrun.dev/tenant``: agentrun runs attempts nowhere
else), a TokenRequest bound to a Pod is refused unless the requester is a node (group
``system:nodes``: the kubelet; the NodeRestriction admission plugin already limits a node
to the pods bound to it) or the controller (:func:`agentrun.core.policies.validating.controller`:
the operator, cluster admins). Tokens bound to nothing, to a Secret or to a Node stay
anyone's to mint as RBAC allows: they carry no pod name, so the attempt-Lease policy
refuses every write they attempt. A refusal is a 403 that names the pod and the way out.
"""

from __future__ import annotations

from agentrun.api import names
from agentrun.core.policies import validating

POD_TOKENS = "agentrun-pod-tokens"
NODES = "system:nodes"
TENANT_NAMESPACES = {"matchExpressions": [{"key": names.TENANT_LABEL,
                                           "operator": "Exists"}]}


def pod_tokens() -> list[validating.Object]:
    """The policy and its binding (see the module docstring)."""
    pod = "object.spec.boundObjectRef.name"
    return validating.policy_pair(
        POD_TOKENS,
        namespaces=TENANT_NAMESPACES,
        conditions=[{"name": "bound-to-a-pod", "expression":
                     "object.spec.?boundObjectRef.?kind.orValue('') == 'Pod'"},
                    {"name": "not-a-node", "expression":
                     f"!request.userInfo.?groups.orValue([]).exists(g, g == '{NODES}')"},
                    {"name": "not-the-controller",
                     "expression": f"!{validating.controller()}"}],
        rules=[validating.match_rule("", "v1", ["serviceaccounts/token"], ["CREATE"])],
        validations=[validating.dynamic_validation("false", (
            "'in a namespace of an agentrun tenant only the node running a pod (its kubelet) "
            "requests a token bound to it: a token bound to pod ' + "
            f"{pod} + ' could write records on an agentrun attempt\\'s Lease as that "
            "attempt. Request one bound to no pod (kubectl create token ' + request.name + "
            "' without --bound-object-kind Pod), or ask a cluster admin'"), reason="Forbidden")])
