"""Replicas of the operator that elect a leader, fenced as the chart's would be.

Shared by ``tests/integration/operator/test_leader_election.py`` and ``make faults``'
``failover`` scenario (``tests/support/faults/failover.py``). A *placeholder* is a pod of
the operator's ServiceAccount that never runs (no scheduler serves it): what a token is
bound to, so a replica running here as a local process acts with the identity an
in-cluster replica has (``system:serviceaccount:agentrun-system:agentrun-operator`` with
its pod's name in the token's extra), which the fencing policy
(``agentrun-fence-operator``) matches.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import kubernetes
import yaml

from agentrun import manifests
from agentrun.api import names
from agentrun.core.policies import fencing, leasepolicy
from tests.support.cluster import audit
from tests.support.cluster.clusters import Cluster

FENCE = Path(manifests.__file__).resolve().parents[2] / "manifests" / "admission" / \
    "fence-operator.yaml"
LEASE = ("-n", names.OPERATOR_NAMESPACE, "lease", names.LEADER_LEASE)
TOKEN = ("-n", names.OPERATOR_NAMESPACE, "secret", names.LEADER_SECRET)
ACCOUNT = names.OPERATOR_APP


def election(*, lease: float = 4, renew_deadline: float = 3,
             retry_period: float = 0.5) -> list[str]:
    """The flags of a replica electing on short timings (seconds)."""
    return ["--leader-elect", "--leader-election-lease", f"{lease:g}",
            "--leader-election-renew-deadline", f"{renew_deadline:g}",
            "--leader-election-retry-period", f"{retry_period:g}"]


def holder(cluster: Cluster) -> str | None:
    """The leader Lease's holder ('' when released; None when there is no Lease)."""
    found = cluster.kubectl("get", *LEASE, "-o", "json")
    if found.returncode != 0:
        return None
    spec = json.loads(found.stdout).get("spec") or {}
    return str(spec.get("holderIdentity") or "")


def placeholder(name: str) -> dict[str, object]:
    """A pod of the operator's ServiceAccount that never runs: what a token is bound to."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": names.OPERATOR_NAMESPACE},
            "spec": {"serviceAccountName": ACCOUNT, "restartPolicy": "Never",
                     "schedulerName": "agentrun-test-unserved",
                     "containers": [{"name": "operator", "image": "localhost/unused:0"}]}}


def bound_token(cluster: Cluster, pod: str | None, *, seconds: int = 600) -> str:
    """A token of the operator's ServiceAccount bound to ``pod`` (None: to no pod)."""
    core = kubernetes.client.CoreV1Api(cluster.client())
    spec: dict[str, object] = {"expirationSeconds": seconds}
    if pod is not None:
        uid = core.read_namespaced_pod(pod, names.OPERATOR_NAMESPACE).metadata.uid
        spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", "name": pod, "uid": uid}
    made = core.create_namespaced_service_account_token(ACCOUNT, names.OPERATOR_NAMESPACE,
                                                        {"spec": spec})
    return str(made.status.token)


def token_kubeconfig(cluster: Cluster, token: str, path: Path) -> Path:
    """The cluster's kubeconfig with its ``operator`` context acting with ``token``."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    context = next(c for c in config["contexts"] if c["name"] == "operator")
    context["context"]["user"] = "bound"
    config["users"] = [{"name": "bound", "user": {"token": token}}]
    config["contexts"] = [context]
    config["current-context"] = "operator"
    path.write_text(yaml.safe_dump(config))
    return path


@contextmanager
def fenced(cluster: Cluster, *, pods: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """The fencing policy in force, and placeholder pods ``pods`` of the operator's
    account; an earlier election's Lease and token deleted before and after."""
    account = {"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": ACCOUNT, "namespace": names.OPERATOR_NAMESPACE}}
    made = cluster.kubectl("apply", "-f", "-", input=json.dumps(account))  # (or the chart's)
    assert made.returncode == 0, made.stderr
    for pod in pods:
        cluster.kubectl("delete", "pod", "-n", names.OPERATOR_NAMESPACE, pod,
                        "--ignore-not-found", "--wait=true")
        made = cluster.kubectl("create", "-f", "-", input=json.dumps(placeholder(pod)))
        assert made.returncode == 0, made.stderr
    for left in (LEASE, TOKEN):  # an earlier install's election, at its own terms
        cluster.kubectl("delete", *left, "--ignore-not-found")
    applied = cluster.kubectl("apply", "--server-side", "-f", str(FENCE))
    assert applied.returncode == 0, applied.stderr
    try:
        yield pods
    finally:
        removed = cluster.kubectl("delete", "--ignore-not-found", "-f", str(FENCE))
        assert removed.returncode == 0, removed.stderr
        for pod in pods:
            cluster.kubectl("delete", "pod", "-n", names.OPERATOR_NAMESPACE, pod,
                            "--ignore-not-found", "--wait=false")
        for left in (LEASE, TOKEN):
            cluster.kubectl("delete", *left, "--ignore-not-found")


WRITE, PROBE, ELECTION = "write", "probe", "election"  # what a Write is


@dataclass(frozen=True)
class Write:
    """One write by the operator's ServiceAccount, from the audit log: its own work
    (:data:`WRITE`), a new leader's dry-run probe of the fence (:data:`PROBE`), or the
    election's (:data:`ELECTION`: the leader Lease and the fencing token)."""

    at: datetime  # requestReceivedTimestamp
    done: datetime  # stageTimestamp (the answer sent)
    pod: str  # the pod its token is bound to
    code: int  # the response's status code
    what: str  # "<verb> <resource> <name>"
    kind: str = WRITE
    message: str = ""  # the refusal's, when refused

    @property
    def admitted(self) -> bool:
        return self.code < 300


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def operator_writes(cluster: Cluster, *, since: datetime) -> list[Write]:
    """Every write by the operator's ServiceAccount received since ``since``, in the order
    received; reviews (SubjectAccessReviews: a question, not a write) left out."""
    assert cluster.audit_log is not None
    operator = fencing.operator_user(namespace=names.OPERATOR_NAMESPACE)  # the replicas'
    found = []
    for line in audit.lines(cluster.audit_log):
        if operator not in line:
            continue
        event = json.loads(line)
        user = event.get("user") or {}
        ref = event.get("objectRef") or {}
        at = _when(event["requestReceivedTimestamp"])
        dry = "dryRun" in event.get("requestURI", "")
        mine = ref.get("namespace") == names.OPERATOR_NAMESPACE
        if (user.get("username") != operator or at < since
                or event.get("stage") != "ResponseComplete"
                or event.get("verb") not in audit.WRITE_VERBS
                or ref.get("resource") == "subjectaccessreviews"
                or (dry and not (mine and ref.get("resource") == "events"))):
            continue  # (other dry runs: a LaunchSpec's pod checked, nothing written)
        kind = (PROBE if dry else
                ELECTION if mine and (ref.get("resource"), ref.get("name")) in (
                    ("leases", names.LEADER_LEASE), ("secrets", names.LEADER_SECRET))
                else WRITE)
        pod = (user.get("extra") or {}).get(leasepolicy.POD_NAME, [""])[0]
        found.append(Write(at=at, done=_when(event.get("stageTimestamp") or
                                             event["requestReceivedTimestamp"]),
                           pod=pod, code=int((event.get("responseStatus") or {})
                                             .get("code", 0)),
                           what=f"{event['verb']} {ref.get('resource')} {ref.get('name')}",
                           kind=kind, message=str((event.get("responseStatus") or {})
                                                  .get("message") or "")))
    return sorted(found, key=lambda w: w.at)


def fenced_in(writes: list[Write]) -> list[tuple[datetime, str]]:
    """When each pod's fence came in force, from ``writes``: (the end of its first admitted
    probe of a term, the pod), in order. A term is a run of probes by one pod; from its
    first admitted probe on, admission refuses every other pod's write."""
    found: list[tuple[datetime, str]] = []
    for write in writes:
        if write.kind == PROBE and write.admitted and (not found or found[-1][1] != write.pod):
            found.append((write.done, write.pod))
    return found


def fenced_for(terms: list[tuple[datetime, str]], write: Write) -> str | None:
    """The pod the fence let write when ``write`` was received (None: no fence yet)."""
    return next((pod for start, pod in reversed(terms) if start < write.at), None)


def late_writes(writes: list[Write]) -> list[tuple[Write, str]]:
    """Admitted writes (:data:`WRITE`) of a pod received after another pod's fence came in
    force, and which pod's: what the fence must never let through."""
    terms = fenced_in(writes)
    late = []
    for write in writes:
        if write.kind != WRITE or not write.admitted:
            continue
        holder = fenced_for(terms, write)
        if holder is not None and holder != write.pod:
            late.append((write, holder))
    return late
