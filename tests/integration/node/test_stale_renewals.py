"""Renewal failures stop a real worker's new effects before its lease lapses.

A worker pod sends an effect (a new key each time, through ``worker.effect``) every 0.5 s
and goes on trying when ``LeaseLapsed`` stops one. Then its renewals are made to fail,
and only they: a ValidatingAdmissionPolicy the test installs refuses (422) any change of
``spec.renewTime`` by the worker's service account in the test's namespace, so the pod's
record commits (the effects' intents and outcomes, patches that leave ``renewTime`` as
it is) still pass. That is the case where nothing but the keeper can stop the effects: an
unreachable API server or a deleted RoleBinding would fail the record commits too, and
the effects would stop for that reason alone (the keeper's lapse under an unreachable
server is ``tests/integration/test_worker_keeper.py``'s).

Covers: effects go on after the first refused renewal (the keeper still vouches for the
last success) and stop before the lease could lapse: no POST reaches the owner after the
last successful renewal's arrival (audit log) plus the lease duration; the worker was told
(``on_lapse``) and met ``LeaseLapsed``; then the operator, seeing the lease expire, fences
the attempt by deleting its pod, and no POST came before it was gone either.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import kubernetes
import pytest

from tests.integration.node import stale
from tests.support.actors.operators import OperatorProcess
from tests.support.actors.workers import (
    LEASE_SECONDS,
    audit_log,
    follow_logs,
    json_lines,
    wait_pod_phase,
    wait_renewed,
    worker_user,
)
from tests.support.cluster.audit import Write, writes
from tests.support.plays.scenarios import Scenario
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.kubelet, pytest.mark.serial]  # a cluster-wide policy
owner = stale.owner
TICKS_BEFORE = 4  # effects that pass before the renewals are made to fail
RENEWALS = """
worker = Worker.from_env()
worker.start(on_lapse=lambda why: say(told="lapse", at=time.time(), why=why),
             on_resume=lambda why: say(told="resume", at=time.time()),
             on_lost=lambda why: say(told="lost", at=time.time(), why=why))
post, n, deadline = sender(worker), 0, time.monotonic() + 150
while time.monotonic() < deadline:
    n += 1
    try:
        worker.effect("tick", key="tick-" + str(n), call=post)
        say(sent=n, at=time.time())
    except keeper.LeaseLost as error:
        say(stopped="LeaseLost", n=n, at=time.time(), why=str(error))
        break
    except keeper.LeaseLapsed as error:
        say(stopped="LeaseLapsed", n=n, at=time.time(), why=str(error))
    time.sleep(0.5)  # in the pod: the worker's pace, a poll of its lease between effects
worker.stop()
"""


@pytest.fixture
def refuse_renewals(scenario: Scenario) -> Iterator[object]:
    """Calling it installs the policy that refuses the worker's renewals (removed after)."""
    api = kubernetes.client.AdmissionregistrationV1Api(scenario.cluster.client())
    name = f"test-refuses-renewals-{scenario.namespace}"

    def install() -> None:
        api.create_validating_admission_policy({
            "metadata": {"name": name},
            "spec": {"failurePolicy": "Fail",
                     "matchConstraints": {"resourceRules": [{
                         "apiGroups": ["coordination.k8s.io"], "apiVersions": ["v1"],
                         "resources": ["leases"], "operations": ["UPDATE"]}]},
                     "matchConditions": [{
                         "name": "the-worker",
                         "expression": f"request.userInfo.username == "
                                       f"'{worker_user(scenario.namespace)}'"}],
                     "validations": [{
                         "expression": "object.spec.?renewTime == oldObject.spec.?renewTime",
                         "message": "renewals are refused by the test (records pass)",
                         "reason": "Invalid"}]}})
        api.create_validating_admission_policy_binding({
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"],
                     "matchResources": {"namespaceSelector": {"matchLabels": {
                         "kubernetes.io/metadata.name": scenario.namespace}}}}})

    yield install
    for delete in (api.delete_validating_admission_policy_binding,
                   api.delete_validating_admission_policy):
        try:
            delete(name)
        except kubernetes.client.ApiException as error:
            if error.status != 404:
                raise


def lease_updates(scenario: Scenario, lease: str) -> list[Write]:
    """The worker's renewals of ``lease`` (PUTs: ``update``), refused ones included."""
    return [w for w in writes(audit_log(scenario), namespace=scenario.namespace,
                              user=worker_user(scenario.namespace))
            if w.resource == "leases" and w.name == lease and w.verb == "update"]


def test_failing_renewals_stop_new_effects_before_the_lease_lapses(
        scenario: Scenario, operator: OperatorProcess, worker_image: str,
        owner: stale.TimedOwner, refuse_renewals: object, tmp_path: Path) -> None:
    slot = stale.sdk_run(scenario, image=worker_image, script=RENEWALS, owner=owner,
                         max_attempts=1)
    first = f"{slot}-1"
    wait_pod_phase(scenario, first, {"Running"})
    logs = follow_logs(scenario, first, tmp_path / "worker.log")
    try:
        wait_renewed(scenario, first, times=2)
        wait_for(lambda: len(owner.worker_posts()) >= TICKS_BEFORE, timeout=60,
                 message=f"{TICKS_BEFORE} effects at the owner")
        assert callable(refuse_renewals)
        refuse_renewals()
        # The operator sees no renewal for a lease duration and fences: the pod goes.
        wait_for(lambda: scenario.pod(first) is None, timeout=90,
                 message=f"pod {first} deleted by the operator (fenced)")
    finally:
        logs.terminate()
        logs.wait(timeout=10)
    told = json_lines((tmp_path / "worker.log").read_text(errors="replace"))

    updates = lease_updates(scenario, first)
    refused = [w for w in updates if w.code == 422]
    assert refused, [str(w) for w in updates]
    succeeded = [w for w in updates if w.code == 200]
    last_ok = max(w.at for w in succeeded)
    assert last_ok < refused[0].at and all(w.at < refused[0].at for w in succeeded)
    lapses_at = last_ok + timedelta(seconds=LEASE_SECONDS)  # on the server's record

    arrivals = [datetime.fromtimestamp(at, UTC) for at, _, _ in owner.arrivals]
    assert arrivals and max(arrivals) < lapses_at, (max(arrivals), lapses_at)
    after_refusal = [at for at in arrivals if at > refused[0].at]
    assert after_refusal, "effects went on while the keeper still vouched for the lease"
    assert len({key for _, key, _ in owner.arrivals}) == len(owner.arrivals)  # a key each
    assert all(token == 1 for _, _, token in owner.arrivals)

    stopped = [t for t in told if t.get("stopped") == "LeaseLapsed"]
    lapse = next(t for t in told if t.get("told") == "lapse")
    assert stopped, told
    assert datetime.fromtimestamp(lapse["at"], UTC) < lapses_at, lapse  # told in time
    assert "status 422" in lapse["why"], lapse  # the refused renewal, not an outage
    sent = [t["sent"] for t in told if "sent" in t]
    assert len(sent) == len(owner.arrivals), (sent, len(owner.arrivals))
    assert max(sent) < stopped[0]["n"], (sent, stopped[0])  # none once LeaseLapsed met
    told_at = datetime.fromtimestamp(lapse["at"], UTC)
    print(f"renewals ok {len(succeeded)}, refused {len(refused)}; effects "
          f"{len(arrivals)} ({len(after_refusal)} after the first refusal); last effect "
          f"{(lapses_at - max(arrivals)).total_seconds():.2f}s before the lapse point; "
          f"told lapse {(lapses_at - told_at).total_seconds():.2f}s before; "
          f"LeaseLapsed met {len(stopped)} times")
    scenario.wait_state(slot, "RetryWait", timeout=60)
