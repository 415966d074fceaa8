"""``tests.support.actors.leaders``' reading of the audit log: when each pod's fence came in
force, and which writes it must have refused (what ``make failover`` and the leader
election test check).

Covers: a term starts at a pod's first admitted probe (refused probes and repeats do not
start one); a write received after another pod's probe was answered, and admitted, is
late; one received before it was answered is not (admission may have evaluated it
first); refused writes and the election's own writes are never late; the lead coming
back to a pod (a, b, a) starts a new term; nothing is late before the first term; the
audit log read into those kinds (a probe is a dry-run Event in the operator's namespace,
other dry runs and reviews are not writes, the election is the leader Lease and token by
name there, only completed requests count).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

from agentrun.api import names
from agentrun.core.policies import fencing, leasepolicy
from tests.support.actors.leaders import (
    ELECTION,
    PROBE,
    WRITE,
    Write,
    fenced_in,
    late_writes,
    operator_writes,
)

T0 = datetime(2026, 12, 6, tzinfo=UTC)


def at(seconds: float, pod: str, *, kind: str = WRITE, code: int = 201,
       took: float = 0.01) -> Write:
    when = T0 + timedelta(seconds=seconds)
    return Write(at=when, done=when + timedelta(seconds=took), pod=pod, code=code,
                 what=f"{kind} by {pod}", kind=kind)


def test_terms_start_at_a_pods_first_admitted_probe() -> None:
    writes = [at(1, "a", kind=PROBE), at(2, "a", kind=PROBE), at(5, "b", kind=PROBE, code=403),
              at(6, "b", kind=PROBE), at(9, "a", kind=PROBE)]
    assert [pod for _, pod in fenced_in(writes)] == ["a", "b", "a"]
    assert fenced_in(writes)[1][0] == T0 + timedelta(seconds=6.01)  # answered, not received


def test_a_write_admitted_after_another_pods_fence_is_late() -> None:
    writes = [at(0.5, "b"),  # before any fence: not judged
              at(1, "a", kind=PROBE), at(2, "a"), at(3, "b", code=403),
              at(5, "b", kind=PROBE, took=0.5),
              at(5.2, "a"),  # received before b's probe was answered: may have gone first
              at(5.6, "a", kind=ELECTION),  # the election is never fenced
              at(5.7, "a", code=403),  # refused: the fence working
              at(6, "b"), at(7, "a")]
    late = late_writes(writes)
    assert [(w.at, w.pod, holder) for w, holder in late] == [
        (T0 + timedelta(seconds=7), "a", "b")]


def test_the_lead_coming_back_makes_the_other_pods_writes_late() -> None:
    writes = [at(1, "a", kind=PROBE), at(2, "b", kind=PROBE), at(3, "a", kind=PROBE),
              at(4, "a"), at(4.5, "b")]
    assert [(w.pod, holder) for w, holder in late_writes(writes)] == [("b", "a")]


def _event(verb: str, resource: str, name: str, *, namespace: str = "t", dry: bool = False,
           code: int = 201, pod: str = "a", stage: str = "ResponseComplete",
           message: str = "") -> str:
    uri = f"/api/v1/namespaces/{namespace}/{resource}" + ("?dryRun=All" if dry else "")
    return json.dumps({
        "stage": stage, "verb": verb, "requestURI": uri,
        "requestReceivedTimestamp": "2026-12-06T00:00:01.000000Z",
        "stageTimestamp": "2026-12-06T00:00:01.010000Z",
        "user": {"username": fencing.operator_user(namespace=names.OPERATOR_NAMESPACE),
                 "extra": {leasepolicy.POD_NAME: [pod]}},
        "objectRef": {"resource": resource, "namespace": namespace, "name": name},
        "responseStatus": {"code": code, "message": message}})


def test_the_audit_log_is_read_into_writes_probes_and_the_election(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text("\n".join([
        _event("create", "events", "", namespace=names.OPERATOR_NAMESPACE, dry=True),
        _event("create", "pods", "w-1", dry=True),  # a LaunchSpec's check: no write
        _event("update", "leases", names.LEADER_LEASE, namespace=names.OPERATOR_NAMESPACE),
        _event("update", "secrets", names.LEADER_SECRET, namespace=names.OPERATOR_NAMESPACE),
        _event("update", "leases", names.LEADER_LEASE),  # not the election's: a write
        _event("create", "subjectaccessreviews", ""),  # a question
        _event("create", "pods", "w-1", stage="RequestReceived"),
        _event("create", "pods", "w-1", code=403, message="fenced: pod a is not the leader"),
    ]) + "\n")
    found = operator_writes(SimpleNamespace(audit_log=log),  # type: ignore[arg-type]
                            since=T0)
    assert [(w.kind, w.what) for w in found] == [
        (PROBE, "create events "), (ELECTION, f"update leases {names.LEADER_LEASE}"),
        (ELECTION, f"update secrets {names.LEADER_SECRET}"),
        (WRITE, f"update leases {names.LEADER_LEASE}"), (WRITE, "create pods w-1")]
    assert found[-1].message.startswith(fencing.FENCED) and not found[-1].admitted
