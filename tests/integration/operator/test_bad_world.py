"""Bad input beyond the command values: the rest of the bad-input matrix, one namespace.

With the operator running (no validating policies: what the operator decides itself), on a
run ``study`` whose slot ``research`` waits for reassignment and whose slot ``elsewhere``
is Active, every case of this matrix is applied in turn, and each leaves the message a
person needs where they look, ``study``'s run and slots unchanged (but for a command's
ledger entry), no pod or lease beyond the two attempt-1 ones, and every Slot under
``bounds.SLOT_STATUS_BYTES``:

- well-formed commands naming an unknown worker class, an unknown run, a wrong tenant
  (``UnknownWorkerClass``, ``WrongRun``, ``WrongTenant`` in the ledger);
- a squatted name: another run's package snapshot taken first (``NameSquatted`` on it);
- a LaunchSpec with an invalid template (``Valid`` False ``InvalidTemplate``);
- the pinned sources deleted (the LaunchSpec and the accepted configuration): pins hold;
- configuration that fails its schema (``ConfigInvalid`` on the run naming it).

With all of that still in place, the pod of ``elsewhere`` fails: its attempt is judged
within seconds. The admission side of the same commands (refused, nothing written, the
resourceVersion unchanged) is in ``test_validating.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from agentrun.api import bounds
from agentrun.core.base import naming
from agentrun.core.runs import resolution
from tests.support.actors.operators import OperatorProcess
from tests.support.plays.scenarios import (
    Object,
    Scenario,
    condition_of,
    exhausted_beside_active,
    request_id,
    unchanged,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration
GROUP, VERSION = "agentrun.dev", "v1alpha1"
ANN = "agentrun.dev/"


def status_size(found: Object) -> int:
    return len(json.dumps(found.get("status") or {}, ensure_ascii=True, separators=(",", ":")))


def said(found: Object, type_: str, reason: str) -> Object | None:
    """Condition ``type_`` with ``reason``, once the operator has written it."""
    condition = condition_of(found.get("status") or {}, type_)
    return condition if condition and condition.get("reason") == reason else None


def reassign(scenario: Scenario, slot: str, predicate: str, fragment: str,
             **values: str) -> Callable[[], None]:
    """A well-formed reassignment the guards refuse: ``predicate`` and ``fragment`` shown."""
    def case() -> None:
        rid = request_id()
        fields = {"id": rid, "run": "study", "worker-class": "cpu", "reason": "node lost"}
        fields.update({k.replace("_", "-"): v for k, v in values.items()})
        scenario.custom.patch_namespaced_custom_object(
            GROUP, VERSION, scenario.namespace, "slots", slot,
            {"metadata": {"annotations": {f"{ANN}reassign-{k}": v for k, v in fields.items()}}})
        found = scenario.wait_slot(slot, lambda s: any(
            c["requestId"] == rid for c in s.get("status", {}).get("commands", []))
            and f"{ANN}reassign-id" not in (s["metadata"].get("annotations") or {}),
            message=f"{predicate} decided", timeout=30)
        entry = next(c for c in found["status"]["commands"] if c["requestId"] == rid)
        assert (entry["outcome"], entry["predicate"]) == ("Rejected", predicate)
        assert fragment in entry["message"], entry["message"]
    return case


def squatted_run(scenario: Scenario) -> None:
    text = yaml.safe_dump({"outcome": "a sourced report"})
    name = naming.config_snapshot_name(run="squat", kind="package",
                                       sha256=resolution.sha256_of(text))
    scenario.core.create_namespaced_config_map(scenario.namespace, {
        "metadata": {"name": name}, "data": {"package.yaml": "outcome: something else\n"}})
    scenario.run("squat")
    run = wait_for(lambda: said(scenario.agentrun("squat"), "NameSquatted", "NameSquatted"),
                   timeout=30, message="run squat says NameSquatted")
    assert f"delete configmap {name}" in run["message"]
    assert scenario.slot_names("squat") == []
    scenario.wait_event("NameSquatted", name)


def invalid_template(scenario: Scenario) -> None:
    made = scenario.launch_spec("broken", classes=["gpu"])
    container = {**made["spec"]["template"]["spec"]["containers"][0], "name": "Not_A_DNS_Label"}
    # A merge patch (the list replaced whole), not a replace under the created version:
    # the operator may have written the spec's status (Valid) meanwhile, a 409 for us.
    scenario.custom.patch_namespaced_custom_object(
        GROUP, VERSION, scenario.namespace, "launchspecs", "broken",
        {"spec": {"template": {"spec": {"containers": [container]}}}})

    def shown() -> Object | None:
        found = scenario.custom.get_namespaced_custom_object(
            GROUP, VERSION, scenario.namespace, "launchspecs", "broken")
        condition = said(found, "Valid", "InvalidTemplate")
        return condition if condition and condition["observedGeneration"] == 2 else None
    condition = wait_for(shown, timeout=30, message="broken is Valid False InvalidTemplate")
    assert condition["status"] == "False" and "Not_A_DNS_Label" in condition["message"]


def sources_deleted(scenario: Scenario) -> None:
    scenario.custom.delete_namespaced_custom_object(
        GROUP, VERSION, scenario.namespace, "launchspecs", "cpu-workers")
    for kind in ("package", "workflow", "bindings"):
        scenario.core.delete_namespaced_config_map(f"study-{kind}-r1", scenario.namespace)
    published = {f"study-{kind}-r1" for kind in ("package", "workflow", "bindings")}
    wait_for(lambda: not published & {c.metadata.name for c in scenario.core.
                                      list_namespaced_config_map(scenario.namespace).items},
             timeout=30, message="the published study configuration gone")


def schema_failure(scenario: Scenario) -> None:
    scenario.config(kind="package", name="broken", revision=1,
                    text=yaml.safe_dump({"outcome": "fine"}))
    scenario.config(kind="workflow", name="broken", revision=1,
                    text=yaml.safe_dump({"nodes": "not a list"}))
    scenario.config(kind="bindings", name="broken", revision=1,
                    text=yaml.safe_dump({"nodes": []}))
    scenario.run("invalid", config="broken")
    condition = wait_for(lambda: said(scenario.agentrun("invalid"), "Pinned", "ConfigInvalid"),
                         timeout=30, message="run invalid says ConfigInvalid")
    assert "broken" in condition["message"] and condition["status"] == "False"
    assert scenario.slot_names("invalid") == []
    scenario.wait_event("ConfigInvalid", "broken")


def test_bad_input_around_a_run_changes_nothing_and_never_delays_judging(
        scenario: Scenario, operator: OperatorProcess) -> None:
    slot, elsewhere, objects = exhausted_beside_active(scenario)
    run_before = scenario.agentrun("study")

    cases: dict[str, Callable[[], None]] = {
        "unknown worker class": reassign(scenario, slot, "UnknownWorkerClass", "tpu",
                                         worker_class="tpu"),
        "unknown run": reassign(scenario, slot, "WrongRun", "nosuch", run="nosuch"),
        "wrong tenant": reassign(scenario, slot, "WrongTenant", "someone-else",
                                 tenant="someone-else"),
        "squatted name": lambda: squatted_run(scenario),
        "invalid template": lambda: invalid_template(scenario),
        "pinned sources deleted": lambda: sources_deleted(scenario),
        "configuration failing its schema": lambda: schema_failure(scenario),
    }
    for name, case in cases.items():
        before = {s: scenario.slot(s) for s in (slot, elsewhere)}
        case()
        for each, was in before.items():
            now = scenario.slot(each)
            unchanged(was, now)
            assert now["metadata"].get("labels") == was["metadata"].get("labels"), name
            assert status_size(now) <= bounds.SLOT_STATUS_BYTES, name
        assert len(scenario.slot(elsewhere)["status"].get("commands", [])) == len(
            before[elsewhere]["status"].get("commands", [])), name
        run_now = scenario.agentrun("study")
        assert run_now["spec"] == run_before["spec"], name
        assert run_now["status"].get("pinned") == run_before["status"].get("pinned"), name
        assert condition_of(run_now["status"], "Pinned") == condition_of(
            run_before["status"], "Pinned"), name
        assert scenario.pods() == objects and scenario.leases() == objects, name

    # Everything above still in place, the pod of the Active slot elsewhere fails: its
    # attempt is judged at once (it never renewed), within a few seconds.
    failed_at = datetime.now(UTC)
    scenario.finish(f"{elsewhere}-1", "Failed", exit_code=4)
    other = scenario.wait_slot(elsewhere, lambda s: s["status"]["attempts"][-1].get("endedAt")
                               is not None, message="elsewhere judged", timeout=15)
    last = other["status"]["attempts"][-1]
    ended = datetime.fromisoformat(last["endedAt"].replace("Z", "+00:00"))
    assert last["outcome"] == "Failed" and ended - failed_at < timedelta(seconds=5)
    assert scenario.pods() == objects and scenario.leases() == objects
