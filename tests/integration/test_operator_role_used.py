"""The operator's shipped roles checked against use.

Runs last in the session (marker ``last``, ordered by ``tests/conftest.py``): by then
every operator the suite started has run under the generated ClusterRole and Role only
(the local ``operator`` user is bound to exactly those), and the local control plane has
logged that user's reads as well as its writes (``AUDIT_POLICY``). From the audit log:

- every (verb, group, resource, subresource) the roles grant was used by ``operator`` at
  least once (asserted only when the whole integration suite ran: a subset uses less);
- the operator met no 403, but for the refusals other tests cause on purpose (a quota
  exceeded or counting limits a pod does not give: the API server says Forbidden, the
  operator waits under a condition; see ``EXPECTED_403``).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrun import manifests
from tests.support.cluster import audit
from tests.support.cluster.clusters import Cluster
from tests.support.parts import AFTER_PARALLEL, PART_DESELECTED

pytestmark = [pytest.mark.integration, pytest.mark.last]

INTEGRATION = Path(__file__).resolve().parent
Key = tuple[str, str, str, str]  # verb, group, resource, subresource


def granted() -> Iterator[Key]:
    for rule in [*manifests.OPERATOR_RULES, *manifests.OPERATOR_NAMESPACE_RULES]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                plural, _, sub = resource.partition("/")
                for verb in rule["verbs"]:
                    yield (verb, group, plural, sub)


def operator_events(log: Path) -> Iterator[dict[str, object]]:
    """The operator's requests in the session's audit log, its rotated files included
    (the log rotates at 100 MB: a whole suite writes more)."""
    for line in audit.lines(log):
        if '"operator"' not in line:  # cheap pre-filter
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if (event.get("user") or {}).get("username") == manifests.OPERATOR_USER:
            yield event


def key(event: dict[str, object]) -> Key:
    ref = event.get("objectRef") or {}
    assert isinstance(ref, dict)
    return (str(event.get("verb", "")), ref.get("apiGroup", ""), ref.get("resource", ""),
            ref.get("subresource", ""))


def whole_suite(session: pytest.Session) -> bool:
    """Every integration module collected and nothing deselected by -k or -m; in a part
    of make test's suite (``--part serial``), the parallel part ran before it on this
    cluster (tests/support/cluster/session.py)."""
    on_disk = {p.resolve() for p in INTEGRATION.rglob("test_*.py")}
    ran = {str(item.path) for item in session.items} | session.config.stash[PART_DESELECTED]
    option = session.config.option
    return (on_disk <= {Path(path).resolve() for path in ran} and not option.keyword
            and not option.markexpr and not option.lf and not option.deselect
            and (option.part is None or os.environ.get(AFTER_PARALLEL) == "1"))


# 403s the suite causes on purpose, each where the operator reports it and goes on:
# a quota exceeded (test_quotas.py: the claim waits under QuotaExceeded), a quota counting
# limits a pod does not give, and a LimitRange whose bounds the sidecar's defaults exceed
# (test_quotas.py, test_crash_quota.py: the LaunchSpec's Valid dry run is False, the claim
# waits under LaunchSpecRefused), PodSecurity
# refusing the template (test_crashes.py `claim-failed`, and the LaunchSpec's Valid dry
# run), and the stamping params Secret deleted with the operator running (test_stamping.py:
# the stamping policy denies every command write, the operator's removal of a decided
# command too, until its keeper mints anew), a create racing the deletion of a test's
# namespace (NamespaceLifecycle), and a template naming a ServiceAccount that does not exist
# (test_monitoring.py: the claim fails, ClaimFailed; the LaunchSpec's Valid dry run). An
# RBAC denial is never one of them.
EXPECTED_403 = ("exceeded quota", "failed quota: limits: must specify",
                "maximum cpu usage per Container is 500m",
                'violates PodSecurity "restricted:latest"',
                "error looking up service account",
                "no params found for policy binding with `Deny` parameterNotFoundAction",
                "because it is being terminated")
# OwnerReferencesPermissionEnforcement checks `update` on the owner's finalizers when the
# operator creates a child with blockOwnerDeletion: an authorization check inside the
# create, never a request of its own. Used when those creates were made (and allowed).
IMPLIED = {("update", "agentrun.dev", "agentruns", "finalizers"): {
               ("create", "agentrun.dev", "slots", "")},
           ("update", "agentrun.dev", "slots", "finalizers"): {
               ("create", "", "pods", ""), ("create", "coordination.k8s.io", "leases", "")}}


def test_the_operator_used_every_verb_it_is_granted_and_met_no_403(
        cluster: Cluster, request: pytest.FixtureRequest) -> None:
    if cluster.audit_log is None:
        pytest.skip("needs the local control plane's audit log")
    used: set[Key] = set()
    refused: Counter[str] = Counter()
    for event in operator_events(cluster.audit_log):
        status = event.get("responseStatus") or {}
        annotations = event.get("annotations") or {}
        assert isinstance(status, dict) and isinstance(annotations, dict)
        message = str(status.get("message", ""))
        if int(status.get("code", 0)) == 403:
            if (annotations.get("authorization.k8s.io/decision") == "forbid"
                    or not any(expected in message for expected in EXPECTED_403)):
                refused[f"{' '.join(key(event))}: {message[:300]}"] += 1
            continue
        used.add(key(event))
    used |= {implied for implied, by in IMPLIED.items() if by <= used}
    unused = sorted(set(granted()) - used)
    whole = whole_suite(request.session)
    problems = ([f"the operator met 403s: {dict(refused)}"] if refused else []) + (
        [f"granted to the operator but never used in the suite: {unused}"]
        if unused and whole else [])
    assert not problems, "\n".join(problems)
    if not whole:
        pytest.skip("the whole integration suite did not run: not every verb is used; "
                    "no 403 was met")
