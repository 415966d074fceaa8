"""A pod that cannot be confirmed gone, because its node is lost: what a person can do.

Terms:
- a *stuck pod*: an attempt's pod that is being deleted, or in phase Unknown, and has not
  finished (:class:`~agentrun.core.attempts.observations.PodPhase` ``Terminating`` or
  ``Unknown``). Only its node's kubelet can confirm that its containers stopped; until
  then the attempt has not ended (the table of :mod:`agentrun.core.attempts.ending`), and
  no replacement starts: the process may still run and act.
- a *lost node*: the stuck pod's Node does not exist, or its ``Ready`` condition is not
  ``True`` (``False``, ``Unknown``, or none yet): no kubelet there will confirm anything
  soon. A stuck pod on a Ready node is a graceful shutdown under way, and says nothing.

The operator does not end such an attempt on its own: a node that stopped reporting may
only be cut off from the API server while its pods still run, and a successor beside a
live predecessor is exactly what the slot exists to prevent. A person who knows the node
is down can let the attempt end, in one of two ways, each named in the condition with
its risk: the ``node.kubernetes.io/out-of-service`` taint (the pod garbage collector then
deletes every terminating pod on that NotReady node), or a forced delete of this one pod.
Once the pod is gone the attempt ends as its pod and lease say, and the replacement
proceeds by itself.

Everything here is pure: the Node is read by the controller (only for a stuck pod).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentrun.core.attempts.observations import PodPhase

STUCK = frozenset({PodPhase.TERMINATING, PodPhase.UNKNOWN})
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"


@dataclass(frozen=True, kw_only=True)
class NodeView:
    """A stuck pod's Node as read: ``exists``; its ``Ready`` condition's status
    (``ready``: None when it has none) and ``lastTransitionTime`` (``since``, the raw
    string the API returned); whether it carries the out-of-service taint."""

    name: str
    exists: bool
    ready: str | None = None
    since: str | None = None
    out_of_service: bool = False

    @property
    def lost(self) -> bool:
        return not self.exists or self.ready != "True"


def node_name(pod: Mapping[str, Any] | None) -> str | None:
    """The node a pod is bound to (None: not scheduled, or no pod)."""
    found = ((pod or {}).get("spec") or {}).get("nodeName")
    return found if isinstance(found, str) and found else None


def node_view(name: str, node: Mapping[str, Any] | None) -> NodeView:
    """Read a Node object (a dict as the API returns it, or None when not found)."""
    if node is None:
        return NodeView(name=name, exists=False)
    found = next((c for c in (node.get("status") or {}).get("conditions") or []
                  if isinstance(c, dict) and c.get("type") == "Ready"), None)
    taints = (node.get("spec") or {}).get("taints") or []
    return NodeView(
        name=name, exists=True,
        ready=str(found.get("status")) if found else None,
        since=str(found.get("lastTransitionTime")) if found and found.get(
            "lastTransitionTime") else None,
        out_of_service=any(isinstance(t, dict) and t.get("key") == OUT_OF_SERVICE
                           for t in taints))


@dataclass(frozen=True, kw_only=True)
class Explanation:
    """The condition's reason and message for a stuck pod on a lost node."""

    reason: str
    message: str


def explain(*, pod: str, namespace: str, phase: PodPhase, node: NodeView) -> Explanation:
    """Why attempt ``pod`` cannot end yet, since when, and what a person can do about it.

    Deterministic in its inputs (the node's transition time, never "now"), so a slot
    looked at again writes nothing new. With pod, namespace and node names of 63
    characters each it fits a condition's message whole; a longer node name (up to 253)
    may have the condition's bound clip its tail.
    """
    state = "is being deleted" if phase is PodPhase.TERMINATING else "is in phase Unknown"
    force = f"`kubectl delete pod {pod} -n {namespace} --force --grace-period=0` (this pod only)"
    after = ". Once the pod is gone, the replacement proceeds by itself"
    risk = ("the risk: a machine only cut off still runs its workers until they notice "
            "their leases are gone (their commits are fenced, effects outside are not)")
    if not node.exists:
        return Explanation(reason="NodeMissing", message=(
            f"the pod of attempt {pod} {state} on node {node.name}, which no longer exists: "
            "no kubelet confirms that its containers stopped, so no replacement starts. The "
            f"pod garbage collector deletes such pods by itself; or {force}; {risk}{after}"))
    ready = f"Ready={node.ready}" if node.ready else "no Ready condition"
    since = f" since {node.since}" if node.since else ""
    lost = (f"the pod of attempt {pod} {state} on node {node.name}, NotReady ({ready}{since}): "
            "no kubelet confirms that its containers stopped, so no replacement starts")
    if node.out_of_service:
        return Explanation(reason="NodeOutOfService", message=(
            f"{lost}. The node has the {OUT_OF_SERVICE} taint: the pod garbage collector "
            f"deletes its terminating pods shortly; or {force}{after}"))
    return Explanation(reason="NodeNotReady", message=(
        f"{lost}. Once the node is known to be down: `kubectl taint node {node.name} "
        f"{OUT_OF_SERVICE}=nodeshutdown:NoExecute` (its terminating pods are then deleted) "
        f"or {force}; {risk}{after}"))
