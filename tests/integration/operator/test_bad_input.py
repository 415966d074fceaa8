"""Bad input cannot stall a slot: the operator's side, end to end.

Covers, against a real API server with the operator running:
- a 200 KiB command with an unusable request id on a slot whose Active attempt's pod has
  Failed: the attempt still ends at once, then the command is rejected into the ledger
  (under ``invalid-<hash>``) and removed, and the Slot stays under its size bound;
- a generated matrix: every command kind (resolve-effect and answer too) x {blank, oversize,
  malformed} request id, the fields x {missing, blank, oversize, malformed}, and a
  duplicate request id (of a hold, sent again as a hold); each case
  ends in exactly one ledger entry with its predicate (a duplicate in none) and its
  annotations removed, the slot's guarded status unchanged, no pod or lease created,
  the Slot's status under ``bounds.SLOT_STATUS_BYTES``, and an Active attempt of another
  slot of the run whose pod fails meanwhile still ends within seconds; a command with
  no request id is not a command and is left alone;
- a run's budget command out of every bound (an unusable id, tokens that are no number,
  a 200 KiB reason) is refused into the run's ledger once and removed, the run's status
  stays small, and its slot's attempt ends meanwhile; admission's refusals of the same
  are ``test_budgets.py``'s;
- a relabelled Slot (``agentrun.dev/run``) still counts for its run: its dependent
  starts once it succeeds;
- a minted token: an editor (the standard ``edit`` role) asks for a token of the worker's
  ServiceAccount bound to another's attempt pod (``kubectl create token
  --bound-object-kind Pod``); the policy ``agentrun-pod-tokens`` refuses it with its
  message (``serial``: the shipped validating policies in force), and the slot and the
  attempt's Lease are unchanged.

The worker's own bad input is covered where it is written: a record nested past the
bound (400 and 1,000 levels) and a full Lease (``RecordLimit``, the sidecar's 422) in
``test_worker_records.py``; control and format characters in what the plugin prints in
``tests/unit/plugin/``; an impostor pod's renewals and records in
``test_lease_policy.py`` and ``tests/integration/node/test_impostor.py``. A namespace
the LaunchSpec's pod cannot meet (a ResourceQuota counting limits it lacks, a LimitRange
its resources exceed) is ``test_quotas.py``'s and ``test_crash_quota.py``'s: the
LaunchSpec says why (``Valid`` False) and no attempt is spent. The journal's: bad
``--journal-*`` flags exit 2 with the reason (``tests/unit/test_cli.py``); a pinned
journal location out of its bounds is refused by the API server and writes nothing
(``tests/integration/test_crds.py``); a head moved backwards or after the tombstone is
refused by admission, and a node or payload name taken by other content is never
committed over (``tests/integration/node/test_journal.py``, ``test_journal_store.py``).

Commands are written through the API (as ``admin``, stamped by admission): a 200 KiB
value does not fit on a command line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from agentrun.api import bounds
from agentrun.api.slots import COMMANDS_KEPT
from agentrun.core.commands import parsing, registry
from agentrun.core.policies import tokenpolicy
from tests.support.actors.operators import OperatorProcess
from tests.support.plays.scenarios import (
    Object,
    Scenario,
    exhausted_beside_active,
    holds_throughout,
    unchanged,
)
from tests.support.waiting import wait_for, wait_for_default_service_account

pytestmark = pytest.mark.integration

GROUP, VERSION = "agentrun.dev", "v1alpha1"
HUGE = "x" * 200_000
# Every registered command, by its word, and the suffixes of its fields' annotations.
KINDS = {spec.word: tuple(field.suffix for field in spec.takes) for spec in registry.COMMANDS}


def launched(scenario: Scenario, *, nodes: tuple[tuple[str, str, list[str]], ...] = (
        ("research", "cpu", []),)) -> None:
    scenario.configs(nodes=nodes)
    scenario.launch_spec("cpu-workers", classes=["cpu"], lease_seconds=5)
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)
    scenario.run("study", max_attempts=1)


def write(scenario: Scenario, slot: str, annotations: dict[str, str | None]) -> None:
    scenario.custom.patch_namespaced_custom_object(
        GROUP, VERSION, scenario.namespace, "slots", slot,
        {"metadata": {"annotations": annotations}})


def status_size(slot: Object) -> int:
    return len(json.dumps(slot["status"], ensure_ascii=True, separators=(",", ":")))


def decided(scenario: Scenario, slot: str, ledger_id: str, *, id_key: str,
            timeout: float = 30) -> tuple[Object, Object]:
    """Wait for ``ledger_id`` in the ledger and the command's id annotation gone."""
    def done(found: Object) -> bool:
        ids = [c["requestId"] for c in found.get("status", {}).get("commands", [])]
        return ledger_id in ids and id_key not in (found["metadata"].get("annotations") or {})
    found = scenario.wait_slot(slot, done, message=f"{ledger_id} decided", timeout=timeout)
    entry = next(c for c in found["status"]["commands"] if c["requestId"] == ledger_id)
    return found, entry


def test_a_garbage_command_never_stops_an_active_attempt_from_ending(
        scenario: Scenario, operator: OperatorProcess) -> None:
    launched(scenario)
    slot = scenario.slot_name_eventually("study", "research")
    scenario.wait_state(slot, "Active")
    raw_id = "y" * 300
    write(scenario, slot, {"agentrun.dev/reassign-id": raw_id,
                           "agentrun.dev/reassign-reason": HUGE,
                           "agentrun.dev/reassign-worker-class": "Not A Class!",
                           "agentrun.dev/reassign-run": "study"})
    scenario.finish(f"{slot}-1", "Failed", exit_code=3)
    # The pod failed before any renewal: the attempt ends at once, command or not.
    ended = scenario.wait_state(slot, "RetryWait", timeout=15)["status"]
    assert (ended["attempts"][-1]["outcome"], ended["attempts"][-1]["exitCode"]) == ("Failed", 3)
    ledger_id = parsing.invalid_id("agentrun.dev/reassign-id", raw_id)
    after, entry = decided(scenario, slot, ledger_id, id_key="agentrun.dev/reassign-id")
    assert (entry["outcome"], entry["predicate"]) == ("Rejected", "Malformed")
    assert "agentrun.dev/reassign-id is 300 characters long" in entry["message"]
    assert len(entry["reason"].encode()) <= bounds.REASON_BYTES
    assert not any(k.startswith("agentrun.dev/reassign-")
                   for k in after["metadata"].get("annotations") or {})
    assert status_size(after) <= bounds.SLOT_STATUS_BYTES
    assert scenario.pods() == [f"{slot}-1"] and scenario.leases() == [f"{slot}-1"]
    scenario.wait_event("CommandRejected", ledger_id)


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    request_id: str
    fields: dict[str, str]
    predicate: str


def cases() -> list[Case]:
    """The matrix: every kind x bad request ids, then every field x its bad values."""
    good = {"reassign": {"reason": "node lost", "worker-class": "cpu", "run": "study"},
            "hold": {"reason": "look first"}, "give-up": {}, "claim": {}, "release": {},
            "resolve-effect": {"key": "publish", "outcome": "applied",
                               "reason": "the owner has it"},
            "answer": {"key": "plan", "value": '{"publish": true}', "reason": "go ahead",
                       "run": "study"},
            "approve": {"key": "publish", "digest": "a" * 64, "reason": "checked it",
                        "run": "study"},
            "deny": {"key": "publish", "digest": "a" * 64, "reason": "wrong recipients",
                     "run": "study"},
            "rerun": {"from-step": "draft", "reason": "redo the draft", "run": "study"}}
    assert set(good) == set(KINDS), "a good value for every registered command"
    found = []
    for kind in KINDS:
        for variant, rid in (("blank", "  "), ("oversize", "r" * 254),
                             ("malformed", "no spaces!")):
            found.append(Case(f"{kind}-id-{variant}", kind, rid, good[kind], "Malformed"))
    for kind, field, value, predicate in (
            ("reassign", "reason", None, "BlankReason"), ("reassign", "reason", " ", "BlankReason"),
            ("reassign", "reason", HUGE, "BlankReason"),
            ("reassign", "worker-class", "w" * 64, "Malformed"),
            ("reassign", "worker-class", "GPU!", "Malformed"),
            ("reassign", "run", None, "WrongRun"), ("reassign", "run", "", "Malformed"),
            ("reassign", "run", "r" * 50, "Malformed"),
            ("reassign", "tenant", "a tenant", "Malformed"),
            ("reassign", "tenant", "t" * 64, "Malformed"),
            ("hold", "reason", None, "BlankReason"), ("hold", "reason", "", "BlankReason"),
            ("hold", "reason", HUGE, "BlankReason"),
            ("give-up", "reason", None, "BlankReason"), ("give-up", "reason", "\t", "BlankReason"),
            ("give-up", "reason", HUGE, "BlankReason"),
            ("resolve-effect", "key", "k" * 300, "Malformed"),
            ("resolve-effect", "key", "no spaces!", "Malformed"),
            ("resolve-effect", "outcome", "maybe", "Malformed"),
            ("resolve-effect", "outcome", "a" * 40, "Malformed"),
            ("resolve-effect", "result", "r" * 600, "Malformed"),
            ("resolve-effect", "reason", None, "BlankReason"),
            ("resolve-effect", "reason", HUGE, "BlankReason"),
            ("answer", "key", "k" * 300, "Malformed"), ("answer", "key", "Plan!", "Malformed"),
            ("answer", "value", "v" * 600, "Malformed"), ("answer", "value", None, "Malformed"),
            ("answer", "key", "other", "NoPendingQuestion"),  # no question is pending
            ("answer", "run", None, "WrongRun"), ("answer", "reason", None, "BlankReason"),
            ("answer", "reason", HUGE, "BlankReason"),
            ("answer", "value-from", "cm/value", "Malformed"),  # the value's digest missing
            # well-formed: the question's checks come first (none is pending here)
            ("answer", "value-from", "missing/value@sha256:" + "0" * 64, "NoPendingQuestion"),
            ("approve", "key", "k" * 300, "Malformed"), ("approve", "digest", "ABC", "Malformed"),
            ("approve", "digest", "a" * 65, "Malformed"),
            ("approve", "digest", None, "Malformed"),
            ("approve", "key", "other", "NoPendingQuestion"),  # no approval is pending
            ("approve", "run", None, "WrongRun"), ("approve", "reason", None, "BlankReason"),
            ("deny", "digest", "g" * 64, "Malformed"), ("deny", "key", "Pub!", "Malformed"),
            ("deny", "key", "other", "NoPendingQuestion"),
            ("deny", "reason", HUGE, "BlankReason"),
            ("rerun", "from-step", "Draft!", "Malformed"),
            ("rerun", "from-step", "k" * 300, "Malformed"),
            ("rerun", "run", None, "WrongRun"), ("rerun", "reason", None, "BlankReason"),
            ("rerun", "reason", HUGE, "BlankReason"),
            # well-formed, but this slot's run keeps no journal to find it in
            ("rerun", "from-step", "never-ran", "StepNotCommitted")):
        fields = {k: v for k, v in good[kind].items() if k != field}
        if field == "value-from":  # an answer by reference is given instead of its value
            fields.pop("value")
        if value is not None:
            fields[field] = value
        shown = "missing" if value is None else ("oversize" if len(value) > 60 else repr(value))
        found.append(Case(f"{kind}-{field}-{shown}", kind, f"m-{len(found)}", fields, predicate))
    return found


def test_the_bad_input_matrix_changes_nothing_but_the_ledger(
        scenario: Scenario, operator: OperatorProcess) -> None:
    slot, elsewhere, objects = exhausted_beside_active(scenario)
    ended_elsewhere_at: datetime | None = None
    for n, case in enumerate(cases()):
        if n == len(cases()) // 2:
            # Halfway through the bad input, the pod of the Active slot elsewhere fails.
            ended_elsewhere_at = datetime.now(UTC)
            scenario.finish(f"{elsewhere}-1", "Failed", exit_code=4)
        before = scenario.slot(slot)
        keys = {f"agentrun.dev/{case.kind}-{field}": None for field in KINDS[case.kind]}
        keys.update({f"agentrun.dev/{case.kind}-{k}": v for k, v in case.fields.items()})
        keys[f"agentrun.dev/{case.kind}-id"] = case.request_id
        write(scenario, slot, keys)
        id_key = f"agentrun.dev/{case.kind}-id"
        ledger_id = (case.request_id if parsing.request_id_problem(id_key, case.request_id)
                     is None else parsing.invalid_id(id_key, case.request_id))
        after, entry = decided(scenario, slot, ledger_id, id_key=id_key)
        assert (entry["outcome"], entry["predicate"]) == ("Rejected", case.predicate), case.name
        assert entry["message"], case.name
        # One entry more, the oldest dropped once the ledger is full (it keeps the last 50).
        assert len(after["status"]["commands"]) == min(len(
            before["status"].get("commands", [])) + 1, COMMANDS_KEPT), case.name
        assert after["status"]["commands"][-1]["requestId"] == ledger_id, case.name
        unchanged(before, after)
        assert status_size(after) <= bounds.SLOT_STATUS_BYTES, case.name
        assert not any(k.startswith(f"agentrun.dev/{case.kind}-") and v
                       for k, v in (after["metadata"].get("annotations") or {}).items()
                       if not k.endswith("-actor")), case.name
    assert scenario.pods() == objects and scenario.leases() == objects
    # The attempt elsewhere was judged on time, bad input or not (its pod never renewed:
    # it ends at once, so within a few seconds of the failure).
    assert ended_elsewhere_at is not None
    other = scenario.wait_state(elsewhere, "RetryWait", timeout=15)["status"]["attempts"][-1]
    ended = datetime.fromisoformat(other["endedAt"].replace("Z", "+00:00"))
    assert other["outcome"] == "Failed" and ended - ended_elsewhere_at < timedelta(seconds=5)

    # A duplicate request id: removed, nothing recorded again.
    before = scenario.slot(slot)
    used = [c.request_id for c in cases() if c.kind == "hold" and c.request_id.startswith("m-")]
    write(scenario, slot, {"agentrun.dev/hold-id": used[-1],
                           "agentrun.dev/hold-reason": "again"})
    after = scenario.wait_slot(slot, lambda s: "agentrun.dev/hold-id" not in (
        s["metadata"].get("annotations") or {}), message="the duplicate removed")
    assert after["status"]["commands"] == before["status"]["commands"]

    # No request id: not a command; it stays where the person put it and nothing happens.
    write(scenario, slot, {"agentrun.dev/reassign-reason": "no id given"})
    count = len(after["status"]["commands"])
    holds_throughout(lambda: len(scenario.slot(slot)["status"]["commands"]) == count
                     and "agentrun.dev/reassign-reason" in (
                         scenario.slot(slot)["metadata"].get("annotations") or {}),
                     seconds=2, message="a command without a request id is left alone")


def test_a_garbage_budget_command_on_a_run_is_refused_once_and_stops_no_slot(
        scenario: Scenario, operator: OperatorProcess) -> None:
    """A run's budget command past admission (none in force here), out of every bound: an
    unusable request id, tokens that are no number, a 200 KiB reason. It is refused into
    the run's ledger once (``Malformed``, under ``invalid-<hash>``), its annotations are
    removed, the run's status stays small, and its slot's attempt still ends meanwhile."""
    scenario.configs()
    scenario.launch_spec("cpu-workers", classes=["cpu"], lease_seconds=5)
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)
    scenario.run("study", max_attempts=1, extra={"budget": {"tokens": 100}})
    slot = scenario.slot_name_eventually("study", "research")
    scenario.wait_state(slot, "Active")
    scenario.custom.patch_namespaced_custom_object(
        GROUP, VERSION, scenario.namespace, "agentruns", "study", {"metadata": {"annotations": {
            "agentrun.dev/budget-id": "not an id " + "x" * 300,
            "agentrun.dev/budget-add": "-5e9", "agentrun.dev/budget-reason": HUGE}}})
    scenario.finish(f"{slot}-1", "Failed", exit_code=1)

    def refused() -> Object | None:
        run = scenario.agentrun("study")
        entries = (run.get("status") or {}).get("commands") or []
        annotations = run["metadata"].get("annotations") or {}
        return run if entries and "agentrun.dev/budget-id" not in annotations else None
    run = wait_for(refused, timeout=30, message="the garbage budget command decided")
    [entry] = run["status"]["commands"]
    assert (entry["outcome"], entry["predicate"]) == ("Rejected", "Malformed")
    assert entry["requestId"].startswith("invalid-")
    assert run["status"]["budget"] == {"tokens": 100, "currency": "USD", "raises": 0}
    assert len(json.dumps(run["status"])) < 64 * 1024
    assert scenario.wait_state(slot, "RetryWait", timeout=15)["status"]["attempts"][-1][
        "outcome"] == "Failed"


def test_a_relabelled_slot_still_counts_for_its_run(
        scenario: Scenario, operator: OperatorProcess) -> None:
    launched(scenario, nodes=(("first", "cpu", []), ("second", "cpu", ["first"])))
    first = scenario.slot_name_eventually("study", "first")
    second = scenario.slot_name_eventually("study", "second")
    scenario.wait_state(first, "Active")
    scenario.custom.patch_namespaced_custom_object(
        GROUP, VERSION, scenario.namespace, "slots", first,
        {"metadata": {"labels": {"agentrun.dev/run": "someone-else"}}})
    scenario.finish(f"{first}-1", "Succeeded", exit_code=0)
    scenario.wait_state(first, "Succeeded", timeout=15)
    scenario.wait_state(second, "Active", timeout=30)


@pytest.mark.serial
def test_a_minted_token_for_anothers_attempt_pod_is_refused(
        scenario: Scenario, operator: OperatorProcess, validating: None) -> None:
    scenario.rbac.create_namespaced_role_binding(scenario.namespace, {
        "metadata": {"name": "bob-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}]})
    launched(scenario)
    slot = scenario.slot_name_eventually("study", "research")
    scenario.wait_state(slot, "Active")
    pod = scenario.core.read_namespaced_pod(f"{slot}-1", scenario.namespace)
    before, lease = scenario.slot(slot), scenario.lease(f"{slot}-1")
    mint = ("-n", scenario.namespace, "create", "token", pod.spec.service_account_name,
            "--bound-object-kind", "Pod", "--bound-object-name", pod.metadata.name,
            "--bound-object-uid", pod.metadata.uid)
    # The policy is in force (the ``validating`` fixture's canary); bob's binding is not
    # until the API server's RBAC informer has it: wait for that, then ask once.
    wait_for(lambda: scenario.cluster.kubectl(
        "-n", scenario.namespace, "auth", "can-i", "create", "serviceaccounts/token",
        "--as", "bob").stdout.strip() == "yes", timeout=30, message="bob may mint tokens")
    refused = scenario.cluster.kubectl(*mint, user="bob")
    assert refused.returncode != 0, refused.stdout
    assert f"ValidatingAdmissionPolicy '{tokenpolicy.POD_TOKENS}'" in refused.stderr
    assert f"a token bound to pod {pod.metadata.name} could write records" in refused.stderr
    assert not refused.stdout  # no token
    unchanged(before, scenario.slot(slot))
    assert scenario.lease(f"{slot}-1") == lease
