"""A worker in any language: a shell-script main container beside the native sidecar.

The LaunchSpec sets ``spec.sidecar``; the operator's pod then runs ``agentrun-worker
sidecar`` as its first init container (``restartPolicy: Always``) and the main container
is ``sh -c <script>`` using curl on ``$AGENTRUN_SIDECAR_URL``. Covers: the script checks
in, finds its step not committed (404), commits it (201), checks in over more than a
lease duration and exits 0 → the slot Succeeded; every renewal before the operator's
tombstone is the pod's service account's (its pod-bound token); the record is on the
attempt's Lease as ``record.agentrun.dev/<key>`` and decodes with the SDK's record codec.
Then a main container that checks in once and hangs: the sidecar stops renewing after
the window (it says so, once), the lease expires, the operator deletes the pod to fence
it and ends the attempt (``Failed`` when the killed pod is seen Failed, ``Lost`` when it
is gone first): the sidecar did not keep it alive. And in a namespace enforcing the
restricted Pod Security Standard: a LaunchSpec whose main container falls short is
``Valid`` False (``PodSecurityRefused``, saying what to set), and one whose main container
complies runs, the sidecar's default securityContext admitted beside it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentrun.worker import _records as records
from tests.support.actors.operators import OperatorProcess
from tests.support.actors.workers import (
    LEASE_SECONDS,
    START_DEADLINE_SECONDS,
    WORKER_ACCOUNT,
    grant_worker_role,
    lease_renewers,
    renewed_by_its_pod_then_tombstoned,
    wait_pod_phase,
    worker_user,
)
from tests.support.cluster.localcluster import NODE_NAME
from tests.support.plays.scenarios import GROUP, VERSION, Object, Scenario
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kubelet
CHECK_IN_SECONDS = 5  # the bound's minimum: the hung case ends soon
NOTES = {"sources": ["a", "b"], "by": "shell"}
# curl retries a refused connection: the kubelet starts the main container once the
# sidecar's startup probe passed, so this is only a guard.
PRELUDE = """
set -eu
S="$AGENTRUN_SIDECAR_URL"
c() { curl -sS --fail-with-body --retry 5 --retry-connrefused --retry-delay 1 "$@"; }
"""
WRITES_A_RECORD = PRELUDE + f"""
c -X POST "$S/v1/check-in"
before=$(curl -sS -o /dev/null -w '%{{http_code}}' "$S/v1/steps/notes")
echo "before: $before"
[ "$before" = 404 ] || exit 10
echo "put: $(c -X PUT -H 'Content-Type: application/json' \
    --data '{json.dumps(NOTES)}' "$S/v1/steps/notes")"
i=0
while [ $i -lt {3 * LEASE_SECONDS} ]; do c -X POST "$S/v1/check-in"; sleep 1; i=$((i+1)); done
echo "after: $(c "$S/v1/steps/notes")"
"""
HANGS = PRELUDE + """
c -X POST "$S/v1/check-in"
echo "checked in; hanging"
sleep 3600
"""


COMMITS_AND_EXITS = PRELUDE + f"""
c -X POST "$S/v1/check-in"
echo "put: $(c -X PUT -H 'Content-Type: application/json' \
    --data '{json.dumps(NOTES)}' "$S/v1/steps/notes")"
"""
# What the restricted Pod Security Standard asks of a container (the image runs as 65532).
RESTRICTED = {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
              "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}


def sidecar_spec(scenario: Scenario, *, image: str, script: str, name: str = "sidecar-workers",
                 worker_class: str = "cpu", security: dict[str, Any] | None = None) -> None:
    main = {"name": "main", "image": image, "imagePullPolicy": "Never",
            "command": ["sh", "-c", script],
            **({"securityContext": security} if security is not None else {})}
    body: Any = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LaunchSpec",
                 "metadata": {"name": name},
                 "spec": {"claim": {"workerClasses": [worker_class]},
                          "lease": {"durationSeconds": LEASE_SECONDS},
                          "startDeadlineSeconds": START_DEADLINE_SECONDS,
                          "sidecar": {"image": image, "checkInSeconds": CHECK_IN_SECONDS},
                          "template": {"spec": {"restartPolicy": "Never",
                                                "serviceAccountName": WORKER_ACCOUNT,
                                                "terminationGracePeriodSeconds": 2,
                                                "containers": [main]}}}}
    scenario.custom.create_namespaced_custom_object(
        GROUP, VERSION, scenario.namespace, "launchspecs", body)


def one_attempt(scenario: Scenario, *, image: str, script: str) -> tuple[str, str]:
    grant_worker_role(scenario)
    scenario.configs()
    sidecar_spec(scenario, image=image, script=script)
    scenario.run("study", max_attempts=1)
    slot = scenario.slot_name_eventually("study", "research")
    return slot, f"{slot}-1"


def logs(scenario: Scenario, pod: str, container: str) -> str:
    found = scenario.cluster.kubectl("logs", "-n", scenario.namespace, pod, "-c", container)
    return found.stdout + found.stderr


def test_a_shell_script_worker_renews_and_commits_a_record(
        scenario: Scenario, operator: OperatorProcess, worker_image: str) -> None:
    slot, first = one_attempt(scenario, image=worker_image, script=WRITES_A_RECORD)
    pod = wait_pod_phase(scenario, first, {"Succeeded", "Failed"}, timeout=120)
    main = logs(scenario, first, "main")
    assert pod["status"]["phase"] == "Succeeded", main + logs(scenario, first, "agentrun-worker")
    assert pod["spec"]["nodeName"] == NODE_NAME
    (sidecar,) = pod["spec"]["initContainers"]
    assert (sidecar["name"], sidecar["restartPolicy"]) == ("agentrun-worker", "Always")
    lines = dict(line.split(": ", 1) for line in main.splitlines() if ": " in line)
    assert lines["before"] == "404"
    assert json.loads(lines["put"]) == {"result": NOTES}
    assert json.loads(lines["after"]) == {"result": NOTES}

    done = scenario.wait_state(slot, "Succeeded", timeout=60)["status"]
    assert done["attempts"][-1]["outcome"] == "Succeeded"
    # 3 lease durations of check-ins, a renewal every 1.7 s: well over one lease's worth.
    renewed_by_its_pod_then_tombstoned(scenario, first, at_least=int(2 * LEASE_SECONDS // 1.7))

    lease: Object | None = scenario.lease(first)
    assert lease is not None
    annotation = f"{records.PREFIX}notes"
    value = lease["metadata"]["annotations"][annotation]
    record = records.decode(annotation=annotation, value=value, attempt=1)
    assert (record.kind, record.attempt, record.inline) == (records.Kind.STEP_RESULT, 1, NOTES)
    assert record.digest == records.digest(records.canonical(NOTES))


def test_a_hung_main_container_is_not_kept_alive(
        scenario: Scenario, operator: OperatorProcess, worker_image: str) -> None:
    slot, first = one_attempt(scenario, image=worker_image, script=HANGS)
    wait_pod_phase(scenario, first, {"Running"}, timeout=120)
    wait_for(lambda: "checked in; hanging" in logs(scenario, first, "main"), timeout=60,
             message="the main container checked in")
    stopped = wait_for(lambda: "renewals stop" in (text := logs(scenario, first,
                                                                "agentrun-worker")) and text,
                       timeout=3 * CHECK_IN_SECONDS, message="the sidecar stops renewing")
    assert stopped.count("renewals stop") == 1
    assert "the main container has not checked in for" in stopped

    ended = scenario.wait_slot(slot, lambda s: "outcome" in (
        (s.get("status", {}).get("attempts") or [{}])[-1]), message="the attempt ended",
        timeout=60)["status"]
    # The operator fenced it for its expired lease (docs/design/states.md): the pod deleted,
    # then seen Failed (killed, 137) or gone (Lost), whichever the kubelet reports first.
    attempt = ended["attempts"][-1]
    assert attempt["outcome"] in ("Lost", "Failed"), ended
    scenario.wait_event("PodDeleted", "the lease is expired but the pod is still Running")
    scenario.wait_event("AttemptEnded", f"attempt {first} ended {attempt['outcome']}")
    wait_for(lambda: (p := scenario.pod(first)) is None or bool(
        p["metadata"].get("deletionTimestamp")), timeout=30, message=f"pod {first} deleted")
    worker = worker_user(scenario.namespace)
    renewals = [u for u in lease_renewers(scenario, first) if u == worker]
    assert 1 <= len(renewals) <= 10, renewals  # a window's worth, then none


def valid(scenario: Scenario, name: str) -> dict[str, Any]:
    """The LaunchSpec's ``Valid`` condition, once definitive (``DryRunRefused``, a refusal
    of another kind, is tried again 30 s later by design)."""
    def found() -> dict[str, Any] | None:
        spec = scenario.custom.get_namespaced_custom_object(
            GROUP, VERSION, scenario.namespace, "launchspecs", name)
        return next((c for c in (spec.get("status") or {}).get("conditions") or []
                     if c["type"] == "Valid" and c["reason"] != "DryRunRefused"), None)
    condition: dict[str, Any] = wait_for(found, timeout=75, message=f"{name} judged")
    return condition


def test_a_sidecar_worker_runs_where_the_restricted_standard_is_enforced(
        scenario: Scenario, operator: OperatorProcess, worker_image: str) -> None:
    labelled = scenario.cluster.kubectl("label", "namespace", scenario.namespace,
                                        "pod-security.kubernetes.io/enforce=restricted")
    assert labelled.returncode == 0, labelled.stderr
    grant_worker_role(scenario)  # the template's ServiceAccount, before any dry run
    sidecar_spec(scenario, image=worker_image, script=COMMITS_AND_EXITS, name="lax-workers",
                 worker_class="gpu")
    lax = valid(scenario, "lax-workers")
    assert (lax["status"], lax["reason"]) == ("False", "PodSecurityRefused"), lax
    assert 'container "main"' in lax["message"] and "securityContext" in lax["message"], lax
    assert 'container "agentrun-worker"' not in lax["message"], lax  # the sidecar complies

    scenario.configs()
    sidecar_spec(scenario, image=worker_image, script=COMMITS_AND_EXITS, security=RESTRICTED)
    compliant = valid(scenario, "sidecar-workers")
    assert (compliant["status"], compliant["reason"]) == ("True", "DryRunSucceeded"), compliant
    scenario.run("study", max_attempts=1)
    slot = scenario.slot_name_eventually("study", "research")
    first = f"{slot}-1"
    pod = wait_pod_phase(scenario, first, {"Succeeded", "Failed"}, timeout=120)
    main = logs(scenario, first, "main")
    assert pod["status"]["phase"] == "Succeeded", main + logs(scenario, first, "agentrun-worker")
    (sidecar,) = pod["spec"]["initContainers"]
    assert sidecar["securityContext"] == RESTRICTED  # the default, admitted
    assert json.loads(dict(line.split(": ", 1) for line in main.splitlines()
                           if ": " in line)["put"]) == {"result": NOTES}
    assert scenario.wait_state(slot, "Succeeded", timeout=60)["status"]["attempts"][-1][
        "outcome"] == "Succeeded"
