"""No command written while actor stamping was not in force is ever trusted.

Against the real API server, as the real users: ``alice`` owns the slot's prior attempt,
``bob`` (an editor of the namespace too) forges ``reassign-actor: alice``, carrying an
epoch he copied from a server-side dry run (``kubectl annotate --dry-run=server -o json``
shows what admission stamped, epoch included). Covers:

- the copied epoch while stamping is in force: restamped, bob is the actor (NotOwner);
- attack (a): the binding deleted with the operator running: refused at once
  (CommandsRefused), never accepted as alice's;
- attack (b): the binding deleted while the operator is stopped, a forged command
  written, the binding restored and a later unrelated ``kubectl annotate``: StaleEpoch;
- the policy edited and restored with the operator stopped: StaleEpoch;
- the policy deleted and re-created, the binding edited, with the operator running:
  CommandsRefused while not as shipped, accepted again once a new epoch is minted;
- the params Secret deleted (every write to a Slot is denied, with the reason) and edited
  (a command stamped under the earlier epoch: StaleEpoch); deleted, and minted anew by the
  running operator's keeper on its own (killed right after minting, restarted: kept);
- an operator started while the params Secret is missing: ``/readyz`` says 503 (why:
  stamping) until it has minted the epoch, and the audit log shows its first slot create
  after the Secret's, none of its writes refused by its own stamping policy.

Each test changes cluster-wide admission objects (``serial``) and restores them.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.actors.operators import OperatorProcess, stamping_in_force
from tests.support.cluster import audit
from tests.support.cluster.clusters import Cluster
from tests.support.cluster.processes import free_port
from tests.support.plays.scenarios import Object, Scenario, condition_of, request_id, unchanged
from tests.support.waiting import wait_for

pytestmark = pytest.mark.serial

MANIFESTS = Path(__file__).resolve().parents[3] / "manifests"
STAMP_ACTORS = MANIFESTS / "admission" / "stamp-actors.yaml"
POLICY = "agentrun-stamp-actors"
SECRET = ("-n", "agentrun-system", "secret", "agentrun-stamping")
EPOCH = "agentrun.dev/reassign-epoch"


@pytest.fixture
def restore(cluster: Cluster) -> Iterator[None]:
    """Whatever a test did to the admission objects, put the shipped ones back after it
    (anew: an edit by another field manager would survive a server-side apply)."""
    yield
    for verb in (("delete", "--ignore-not-found"), ("apply", "--server-side")):
        done = cluster.kubectl(*verb, "-f", str(STAMP_ACTORS))
        assert done.returncode == 0, done.stderr
    stamping_in_force(cluster)


def replace_shipped(cluster: Cluster) -> None:
    """An admin restores the shipped objects in place (same uids, new generations)."""
    replaced = cluster.kubectl("replace", "-f", str(STAMP_ACTORS))
    assert replaced.returncode == 0, replaced.stderr


def owned_by_alice(scenario: Scenario) -> str:
    return scenario.owned_retry_wait(owner="alice")


def dry_run(scenario: Scenario, slot: str, *, user: str) -> dict[str, str]:
    """What admission would stamp on a reassignment by ``user`` (nothing is written)."""
    result = scenario.cluster.kubectl(
        "-n", scenario.namespace, "annotate", "--dry-run=server", "-o", "json", "--overwrite",
        f"slots.agentrun.dev/{slot}", "agentrun.dev/reassign-id=probe", user=user)
    assert result.returncode == 0, result.stderr
    annotations: dict[str, str] = json.loads(result.stdout)["metadata"]["annotations"]
    return annotations


def copied_epoch(scenario: Scenario, slot: str) -> str:
    stamped = dry_run(scenario, slot, user="bob")
    assert stamped["agentrun.dev/reassign-actor"] == "bob"
    assert stamped["agentrun.dev/reassign-override"] == "false"
    return stamped[EPOCH]


def stamping_stopped(scenario: Scenario, slot: str) -> None:
    wait_for(lambda: "agentrun.dev/reassign-actor" not in dry_run(scenario, slot, user="bob"),
             timeout=30, message="admission to stop stamping actors")


def forge(scenario: Scenario, slot: str, epoch: str) -> str:
    """bob writes a reassignment claiming to be alice, with the copied epoch."""
    rid = request_id()
    result = scenario.annotate(slot, user="bob", reassign_id=rid, reassign_run="study",
                               reassign_worker_class="cpu", reassign_reason="take it over",
                               reassign_actor="alice", reassign_epoch=epoch,
                               reassign_override="true")
    assert result.returncode == 0, result.stderr
    return rid


def refused(scenario: Scenario, slot: str, rid: str, *, before: Object,
            predicates: set[str]) -> Object:
    entry = scenario.wait_ledger(slot, rid, timeout=60)
    assert entry["outcome"] == "Rejected", entry
    assert entry["predicate"] in predicates, entry
    assert "re-send" in entry["message"] or entry["predicate"] == "NotOwner", entry
    after = scenario.slot(slot)
    unchanged(before, after)
    assert scenario.pods() == [f"{slot}-1"]
    return entry


def genuine_reassign_accepted(scenario: Scenario, slot: str) -> Object:
    """alice's own reassignment, re-sent until the operator trusts stamping again."""
    def attempt() -> Object | None:
        rid = request_id()
        assert scenario.annotate(slot, user="alice", reassign_id=rid, reassign_run="study",
                                 reassign_worker_class="cpu",
                                 reassign_reason="retry it").returncode == 0
        entry = scenario.wait_ledger(slot, rid)
        return entry if entry["outcome"] == "Accepted" else None
    entry: Object = wait_for(attempt, timeout=60, interval=1.0,
                             message="alice's reassignment accepted once stamping is back")
    assert entry["actor"] == "alice"
    return entry


def test_an_epoch_copied_from_a_dry_run_does_not_make_a_forged_actor_stand(
        scenario: Scenario, operator: OperatorProcess) -> None:
    slot = owned_by_alice(scenario)
    before = scenario.slot(slot)
    rid = forge(scenario, slot, copied_epoch(scenario, slot))
    entry = refused(scenario, slot, rid, before=before, predicates={"NotOwner"})
    assert (entry["actor"], entry.get("override")) == ("bob", None)


def test_attack_a_binding_deleted_with_the_operator_running(
        scenario: Scenario, operator: OperatorProcess, cluster: Cluster,
        restore: None) -> None:
    slot = owned_by_alice(scenario)
    epoch = copied_epoch(scenario, slot)
    before = scenario.slot(slot)
    assert cluster.kubectl("delete", "mutatingadmissionpolicybinding", POLICY).returncode == 0
    # At once, before admission has even stopped stamping: never accepted as alice's.
    first = forge(scenario, slot, epoch)
    entry = refused(scenario, slot, first, before=before,
                    predicates={"CommandsRefused", "NotOwner"})
    assert entry["predicate"] == "CommandsRefused" or entry["actor"] == "bob"
    stamping_stopped(scenario, slot)
    second = forge(scenario, slot, epoch)
    entry = refused(scenario, slot, second, before=before, predicates={"CommandsRefused"})
    assert "MutatingAdmissionPolicyBinding agentrun-stamp-actors is missing" in entry["message"]
    shown = condition_of(scenario.slot(slot)["status"], "CommandsRefused")
    assert shown is not None and (shown["status"], shown["reason"]) == ("True",
                                                                        "StampingNotInForce")


def test_attack_b_forged_while_the_operator_was_stopped_is_refused_after_restore(
        scenario: Scenario, operator: OperatorProcess, cluster: Cluster,
        restore: None) -> None:
    slot = owned_by_alice(scenario)
    epoch = copied_epoch(scenario, slot)
    before = scenario.slot(slot)
    operator.stop()
    assert cluster.kubectl("delete", "mutatingadmissionpolicybinding", POLICY).returncode == 0
    stamping_stopped(scenario, slot)
    rid = forge(scenario, slot, epoch)
    assert scenario.slot(slot)["metadata"]["annotations"]["agentrun.dev/reassign-actor"] == \
        "alice"  # unstamped: the forgery is stored as written
    assert cluster.kubectl("apply", "--server-side", "-f",
                           str(STAMP_ACTORS)).returncode == 0
    stamping_in_force(cluster)
    # A later, unrelated annotate by the owner refreshes kubectl's managedFields entry.
    assert scenario.cluster.kubectl(
        "-n", scenario.namespace, "annotate", f"slots.agentrun.dev/{slot}",
        "example.com/note=looked at it", user="alice").returncode == 0
    operator.start()
    entry = refused(scenario, slot, rid, before=before, predicates={"StaleEpoch"})
    assert "earlier stamping epoch" in entry["message"]
    genuine_reassign_accepted(scenario, slot)


def test_the_policy_edited_and_restored_while_the_operator_was_stopped(
        scenario: Scenario, operator: OperatorProcess, cluster: Cluster,
        restore: None) -> None:
    slot = owned_by_alice(scenario)
    epoch = copied_epoch(scenario, slot)
    before = scenario.slot(slot)
    operator.stop()
    edited = cluster.kubectl("patch", "mutatingadmissionpolicy", POLICY, "--type=json",
                             "-p", '[{"op": "remove", "path": "/spec/mutations/0"}]')
    assert edited.returncode == 0, edited.stderr
    stamping_stopped(scenario, slot)
    rid = forge(scenario, slot, epoch)
    replace_shipped(cluster)  # same uid, generation 3
    stamping_in_force(cluster)
    operator.start()
    refused(scenario, slot, rid, before=before, predicates={"StaleEpoch"})


@pytest.mark.parametrize("change", ["policy-recreated", "binding-edited"])
def test_stamping_changed_with_the_operator_running(
        scenario: Scenario, operator: OperatorProcess, cluster: Cluster, restore: None,
        change: str) -> None:
    slot = owned_by_alice(scenario)
    epoch = copied_epoch(scenario, slot)
    before = scenario.slot(slot)
    if change == "policy-recreated":
        changed = cluster.kubectl("delete", "mutatingadmissionpolicy", POLICY)
        says = "MutatingAdmissionPolicy agentrun-stamp-actors is missing"
    else:
        selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                          "operator": "NotIn",
                                          "values": [scenario.namespace]}]}
        changed = cluster.kubectl(
            "patch", "mutatingadmissionpolicybinding", POLICY, "--type=merge", "-p",
            json.dumps({"spec": {"matchResources": {"namespaceSelector": selector}}}))
        says = "MutatingAdmissionPolicyBinding agentrun-stamp-actors is not as shipped"
    assert changed.returncode == 0, changed.stderr
    stamping_stopped(scenario, slot)
    rid = forge(scenario, slot, epoch)
    entry = refused(scenario, slot, rid, before=before, predicates={"CommandsRefused"})
    assert says in entry["message"]
    if change == "policy-recreated":
        created = cluster.kubectl("apply", "--server-side", "-f", str(STAMP_ACTORS))
        assert created.returncode == 0, created.stderr
    else:
        replace_shipped(cluster)
    rid = forge(scenario, slot, epoch)  # now restamped as bob, or refused until re-minted
    entry = refused(scenario, slot, rid, before=before,
                    predicates={"CommandsRefused", "StaleEpoch", "NotOwner"})
    assert entry["predicate"] != "NotOwner" or entry["actor"] == "bob"
    genuine_reassign_accepted(scenario, slot)


def test_the_params_secret_deleted_then_edited(
        scenario: Scenario, operator: OperatorProcess, cluster: Cluster,
        restore: None) -> None:
    slot = owned_by_alice(scenario)
    before = scenario.slot(slot)
    operator.stop()
    assert cluster.kubectl("delete", *SECRET).returncode == 0
    denied = scenario.annotate(slot, user="alice", hold_id=request_id(), hold_reason="wait")
    assert denied.returncode != 0
    assert "no params found" in denied.stderr and POLICY in denied.stderr
    assert "agentrun.dev/hold-id" not in (scenario.slot(slot)["metadata"].get("annotations")
                                          or {})  # nothing was written
    stamping_in_force(cluster)  # as the operator's keeper would: a new epoch

    # alice's genuine hold, stamped under this epoch; then an admin edits the epoch.
    rid = request_id()
    assert scenario.annotate(slot, user="alice", hold_id=rid,
                             hold_reason="wait").returncode == 0
    edited = cluster.kubectl("patch", *SECRET, "--type=merge",
                             "-p", '{"data": {"epoch": "ZWRpdGVkLWJ5LWFuLWFkbWlu"}}')
    assert edited.returncode == 0, edited.stderr
    operator.start()
    entry = refused(scenario, slot, rid, before=before, predicates={"StaleEpoch"})
    assert entry["actor"] == "alice"  # recorded as stamped, refused all the same
    again = request_id()
    assert scenario.annotate(slot, user="alice", hold_id=again,
                             hold_reason="wait").returncode == 0
    assert scenario.wait_ledger(slot, again)["outcome"] == "Accepted"


def test_the_params_secret_deleted_with_the_operator_running_is_minted_anew(
        scenario: Scenario, operator: OperatorProcess, cluster: Cluster,
        restore: None) -> None:
    slot = owned_by_alice(scenario)
    before = scenario.slot(slot)
    epoch = copied_epoch(scenario, slot)
    operator.stop()
    rid = request_id()  # stamped under the epoch that is about to go
    assert scenario.annotate(slot, user="alice", hold_id=rid, hold_reason="wait").returncode == 0
    assert cluster.kubectl("delete", *SECRET).returncode == 0
    # Its keeper mints a new epoch on its own, a few seconds later; killed right after
    # that write, the next start finds the epoch in force and mints no other.
    operator.start(crash_at="stamping-epoch")
    assert operator.wait_crashed(timeout=60) == -9
    minted = json.loads(cluster.kubectl("get", *SECRET, "-o", "json").stdout)
    operator.start()
    wait_for(lambda: dry_run(scenario, slot, user="bob").get(EPOCH) not in (None, epoch),
             timeout=60, message="a new epoch minted by the running operator")
    refused(scenario, slot, rid, before=before, predicates={"StaleEpoch", "CommandsRefused"})
    kept = json.loads(cluster.kubectl("get", *SECRET, "-o", "json").stdout)
    assert kept["data"] == minted["data"]  # the epoch minted before the crash stands
    again = request_id()
    assert scenario.annotate(slot, user="alice", hold_id=again,
                             hold_reason="wait").returncode == 0
    assert scenario.wait_ledger(slot, again)["outcome"] == "Accepted"


def readyz(port: int) -> tuple[int, str] | None:
    """``/readyz``'s status and text, or None while nothing answers on ``port``."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()
    except OSError:
        return None


def test_an_operator_started_without_its_epoch_is_unready_and_refused_nothing(
        scenario: Scenario, operator: OperatorProcess, cluster: Cluster, restore: None,
        tmp_path: Path) -> None:
    if cluster.audit_log is None:
        pytest.skip("needs the local control plane's audit log")
    operator.stop()
    nodes = tuple((node, "cpu", []) for node in ("one", "two", "three"))
    scenario.configs(nodes=nodes)
    scenario.launch_spec("cpu-workers", classes=["cpu"])
    scenario.run("wide")  # created while the epoch exists: its slots are the operator's
    since = datetime.now(UTC)
    assert cluster.kubectl("delete", *SECRET).returncode == 0
    port = free_port()
    starting = OperatorProcess(cluster=cluster, namespace=scenario.namespace,
                               log=tmp_path / "starting.log",
                               args=["--metrics-port", str(port)]).start()
    try:
        answers: list[tuple[int, str]] = []

        def serving() -> bool:
            found = readyz(port)
            if found is not None:
                answers.append(found)
            return found is not None and found[0] == 200
        wait_for(serving, timeout=90,
                 message=f"/readyz 200 once the epoch is minted; {starting.tail()}")
        # The keeper mints 5 s after it first finds the policy as shipped: /readyz says
        # why it waits meanwhile (after "not primed yet").
        waiting = [text for code, text in answers if code == 503 and "stamping" in text]
        assert waiting and "not in force" in waiting[0], answers[:3]
        wait_for(lambda: len(scenario.slot_names("wide")) == 3, timeout=60,
                 message="the run's three slots")
        log = cluster.audit_log
        minted = [w for w in audit.writes(log, namespace="agentrun-system", user="operator",
                                          since=since)
                  if w.resource == "secrets" and w.verb == "create" and w.code == 201]
        assert len(minted) == 1, minted
        ours = audit.writes(log, namespace=scenario.namespace, user="operator", since=since)
        refused = [w.row() for w in ours if w.code == 403]
        assert not refused, refused  # none refused by its own stamping policy
        creates = [w for w in ours if (w.verb, w.resource) == ("create", "slots")]
        assert len(creates) == 3 and all(w.code == 201 for w in creates), creates
        assert min(w.at for w in creates) > minted[0].at  # nothing before the epoch
    finally:
        starting.stop()
