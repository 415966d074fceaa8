"""Pinning a run (snapshots, pins) and laying out its slots.

See docs/design/runs-and-configuration.md.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest

from agentrun.api import names
from agentrun.api.configs import WorkflowDocument
from agentrun.api.runs import JOURNAL_BASE_PREFIX_CHARS, AgentRun, JournalPin, JournalSettings, Pins
from agentrun.api.slots import Slot, SlotSpec
from agentrun.core.base import naming
from agentrun.core.runs import resolution, runobjects
from agentrun.core.runs.resolution import Resolution
from tests.unit.core import launchfakes as lf


def resolved_for(run: AgentRun, **overrides: list[dict[str, Any]]) -> Resolution:
    found = resolution.resolve(run=run, config_maps=lf.config_maps(**overrides))
    assert isinstance(found, Resolution), found
    return found


@pytest.fixture
def run() -> AgentRun:
    return lf.run()


@pytest.fixture
def resolved(run: AgentRun) -> Resolution:
    return resolved_for(run)


# --- needs_pinning: pins never re-resolve -------------------------------------------------

def test_needs_pinning_only_while_unpinned(run: AgentRun, resolved: Resolution) -> None:
    assert runobjects.needs_pinning(run)
    pins = runobjects.pins(run=run, resolution=resolved, journal=None)
    pinned = lf.run(status={"pinned": pins.wire()})
    assert not runobjects.needs_pinning(pinned)


def test_a_run_being_deleted_is_not_pinned(run: AgentRun) -> None:
    deleting = run.model_copy(update={"metadata": run.metadata.model_copy(
        update={"deletion_timestamp": lf.T0})})
    assert not runobjects.needs_pinning(deleting)


def test_a_newer_revision_leaves_a_pinned_run_and_its_snapshot_alone(
        run: AgentRun, resolved: Resolution) -> None:
    pins = runobjects.pins(run=run, resolution=resolved, journal=None)
    body = runobjects.snapshot_body(run=run, resolved=resolved.workflow, tenant=lf.TENANT)
    pinned = lf.run(status={"pinned": pins.wire()})
    newer = "nodes:\n  - {name: research, workerClass: gpu}\n  - {name: report, workerClass: cpu}\n"
    maps = [lf.config_map("workflow", 1), lf.config_map("workflow", 2, text=newer)]
    # The operator asks needs_pinning before it ever resolves: a pinned run never does.
    assert not runobjects.needs_pinning(pinned)
    assert pinned.status.pinned == pins
    # What a fresh run would pick is another snapshot; the pinned one is untouched.
    fresh = resolved_for(run, workflow=maps)
    assert fresh.workflow.revision == 2
    newer_body = runobjects.snapshot_body(run=run, resolved=fresh.workflow, tenant=lf.TENANT)
    assert newer_body["metadata"]["name"] != body["metadata"]["name"]
    assert runobjects.snapshot_body(run=run, resolved=resolved.workflow, tenant=lf.TENANT) == body


# --- snapshots ----------------------------------------------------------------------------

def test_snapshot_name_and_digest(run: AgentRun, resolved: Resolution) -> None:
    body = runobjects.snapshot_body(run=run, resolved=resolved.workflow, tenant=lf.TENANT)
    digest = hashlib.sha256(lf.WORKFLOW.encode()).hexdigest()
    assert resolved.workflow.sha256 == digest
    assert body["metadata"]["name"] == f"{lf.RUN}-workflow-{digest[:10]}"
    assert body["metadata"]["name"] == naming.config_snapshot_name(
        run=lf.RUN, kind="workflow", sha256=digest)
    assert body["metadata"]["namespace"] == lf.NS


def test_snapshot_is_immutable_and_copies_only_the_data_key(run: AgentRun) -> None:
    cm = lf.config_map("package", 1)
    cm["data"]["notes.txt"] = "not pinned"
    found = resolved_for(run, package=[cm])
    body = runobjects.snapshot_body(run=run, resolved=found.package, tenant=None)
    assert body["immutable"] is True
    assert body["data"] == {"package.yaml": lf.PACKAGE}
    assert (body["apiVersion"], body["kind"]) == ("v1", "ConfigMap")


def test_snapshot_labels(run: AgentRun, resolved: Resolution) -> None:
    labels = runobjects.snapshot_body(run=run, resolved=resolved.bindings,
                                    tenant=lf.TENANT)["metadata"]["labels"]
    assert labels == {
        names.RUN_LABEL: lf.RUN, names.CONFIG_KIND_LABEL: "bindings",
        names.CONFIG_NAME_LABEL: "report-agents", names.REVISION_LABEL: "1",
        names.SNAPSHOT_LABEL: "report-agents-r1", names.TENANT_LABEL: lf.TENANT}
    untenanted = runobjects.snapshot_body(run=run, resolved=resolved.bindings, tenant=None)
    assert names.TENANT_LABEL not in untenanted["metadata"]["labels"]
    assert names.ACCEPTED_LABEL not in labels


def test_snapshot_owner_reference(run: AgentRun, resolved: Resolution) -> None:
    body = runobjects.snapshot_body(run=run, resolved=resolved.package, tenant=lf.TENANT)
    assert body["metadata"]["ownerReferences"] == [{
        "apiVersion": "agentrun.dev/v1alpha1", "kind": "AgentRun", "name": lf.RUN,
        "uid": lf.RUN_UID, "controller": True, "blockOwnerDeletion": True}]


def test_snapshot_is_deterministic(run: AgentRun) -> None:
    first = [runobjects.snapshot_body(run=run, resolved=r, tenant=lf.TENANT)
             for r in resolved_for(run).all()]
    second = [runobjects.snapshot_body(run=run, resolved=r, tenant=lf.TENANT)
              for r in resolved_for(run).all()]
    assert first == second
    assert len({b["metadata"]["name"] for b in first}) == 3


def test_one_byte_of_text_changes_the_snapshot(run: AgentRun) -> None:
    a = resolved_for(run).package
    b = resolved_for(run, package=[lf.config_map("package", 1, text=lf.PACKAGE + " ")]).package
    assert a.sha256 != b.sha256
    assert runobjects.snapshot_name(run=run, resolved=a) != runobjects.snapshot_name(
        run=run, resolved=b)


def test_resolution_skips_the_snapshots_it_made(run: AgentRun, resolved: Resolution) -> None:
    body = runobjects.snapshot_body(run=run, resolved=resolved.workflow, tenant=lf.TENANT)
    body["metadata"]["labels"][names.ACCEPTED_LABEL] = "true"  # even if someone adds it
    again = resolved_for(run, workflow=[lf.config_map("workflow", 1), body])
    assert again.workflow.source == "report-flow-r1"


def test_matches_snapshot(run: AgentRun, resolved: Resolution) -> None:
    body = runobjects.snapshot_body(run=run, resolved=resolved.workflow, tenant=lf.TENANT)
    sha = resolved.workflow.sha256
    assert runobjects.matches_snapshot(body, run_uid=lf.RUN_UID, sha256=sha)
    assert not runobjects.matches_snapshot(body, run_uid="uid-other-run", sha256=sha)
    assert not runobjects.matches_snapshot(body, run_uid=lf.RUN_UID, sha256="0" * 64)
    mutable = {**body, "immutable": False}
    assert not runobjects.matches_snapshot(mutable, run_uid=lf.RUN_UID, sha256=sha)
    edited = copy.deepcopy(body)
    edited["data"]["workflow.yaml"] += "\n# edited"
    assert not runobjects.matches_snapshot(edited, run_uid=lf.RUN_UID, sha256=sha)
    not_controller = copy.deepcopy(body)
    not_controller["metadata"]["ownerReferences"][0]["controller"] = False
    assert not runobjects.matches_snapshot(not_controller, run_uid=lf.RUN_UID, sha256=sha)
    assert not runobjects.matches_snapshot({}, run_uid=lf.RUN_UID, sha256=sha)


def test_pins(run: AgentRun, resolved: Resolution) -> None:
    pins = runobjects.pins(run=run, resolution=resolved, journal=None)
    assert isinstance(pins, Pins)
    assert pins.workflow.source == "report-flow-r1"
    assert pins.workflow.revision == 1
    assert pins.workflow.uid == "uid-report-flow-r1"
    assert pins.workflow.sha256 == resolved.workflow.sha256
    assert pins.snapshot_names() == {
        r.kind: runobjects.snapshot_body(run=run, resolved=r, tenant=None)["metadata"]["name"]
        for r in resolved.all()}


# --- slots --------------------------------------------------------------------------------

def bodies(run: AgentRun, workflow: WorkflowDocument) -> list[dict[str, Any]]:
    return runobjects.slot_bodies(run=run, workflow=workflow, tenant=lf.TENANT)


def test_slot_bodies(run: AgentRun, resolved: Resolution) -> None:
    research, report = bodies(run, resolved.workflow_document)
    assert (report["apiVersion"], report["kind"]) == ("agentrun.dev/v1alpha1", "Slot")
    assert report["metadata"]["name"] == naming.slot_name(run=lf.RUN, node="report")
    assert report["metadata"]["namespace"] == lf.NS
    assert report["metadata"]["labels"] == {names.RUN_LABEL: lf.RUN, names.NODE_LABEL: "report",
                                            names.TENANT_LABEL: lf.TENANT}
    assert report["metadata"]["ownerReferences"] == [runobjects.owner_reference(run)]
    assert report["spec"] == {"run": lf.RUN, "node": "report", "workerClass": "cpu",
                              "dependsOn": ["research"]}
    assert research["spec"]["retry"] == {"maxAttempts": 5}
    assert research["spec"]["dependsOn"] == []
    assert "status" not in report
    # The body is a valid Slot as the API would return it.
    assert Slot.model_validate(report).spec == SlotSpec.model_validate(report["spec"])


def test_slot_names_fit_for_a_49_character_run_and_never_collide() -> None:
    long_run = lf.run(name="r" * names.MAX_RUN_NAME)
    nodes = [f"node-{i}" for i in range(40)] + ["n" * 63, "n" * 62 + "m"]
    workflow = WorkflowDocument.model_validate(
        {"nodes": [{"name": n, "workerClass": "cpu"} for n in nodes]})
    found = [b["metadata"]["name"] for b in runobjects.slot_bodies(
        run=long_run, workflow=workflow, tenant=None)]
    assert all(len(n) <= names.MAX_SLOT_NAME == 58 for n in found)
    assert len(set(found)) == len(nodes)
    assert all(names.TENANT_LABEL not in b["metadata"]["labels"] for b in runobjects.slot_bodies(
        run=long_run, workflow=workflow, tenant=None))


def test_matches_slot(run: AgentRun, resolved: Resolution) -> None:
    body = bodies(run, resolved.workflow_document)[0]
    assert runobjects.matches_slot(body, run_uid=lf.RUN_UID, node="research")
    assert not runobjects.matches_slot(body, run_uid=lf.RUN_UID, node="report")
    assert not runobjects.matches_slot(body, run_uid="uid-older-run", node="research")
    stranger = copy.deepcopy(body)
    stranger["metadata"]["ownerReferences"] = []
    assert not runobjects.matches_slot(stranger, run_uid=lf.RUN_UID, node="research")


# --- journal_pin: the operator's journal settings, made the run's own at launch -----------

SETTINGS = JournalSettings(endpoint="https://s3.example:443", bucket="journals",
                           prefix="platform/agentrun", region="eu-central-1",
                           secret="journal-keys")


def test_the_journal_prefix_is_the_runs_own_by_uid(run: AgentRun) -> None:
    found = runobjects.journal_pin(run=run, journal=SETTINGS)
    assert found == JournalPin(endpoint="https://s3.example:443", bucket="journals",
                               prefix=f"platform/agentrun/{lf.NS}/{lf.RUN_UID}",
                               region="eu-central-1", secret="journal-keys")
    recreated = run.model_copy(update={"metadata": run.metadata.model_copy(
        update={"uid": "uid-run-2"})})
    again = runobjects.journal_pin(run=recreated, journal=SETTINGS)
    assert again is not None and again.prefix == f"platform/agentrun/{lf.NS}/uid-run-2"


def test_no_settings_no_journal_pin(run: AgentRun, resolved: Resolution) -> None:
    assert runobjects.journal_pin(run=run, journal=None) is None
    assert runobjects.pins(run=run, resolution=resolved, journal=None).journal is None
    with_journal = runobjects.pins(run=run, resolution=resolved, journal=SETTINGS)
    assert with_journal.journal == runobjects.journal_pin(run=run, journal=SETTINGS)
    assert with_journal.model_copy(update={"journal": None}) == runobjects.pins(
        run=run, resolution=resolved, journal=None)


def test_an_empty_settings_prefix_puts_journals_at_the_buckets_root(run: AgentRun) -> None:
    found = runobjects.journal_pin(run=run, journal=SETTINGS.model_copy(update={"prefix": ""}))
    assert found is not None and found.prefix == f"{lf.NS}/{lf.RUN_UID}"
    assert found.region == "eu-central-1"


def test_the_longest_settings_prefix_still_fits_the_pin(run: AgentRun) -> None:
    longest = JournalSettings(endpoint="http://m", bucket="abc",
                              prefix="p" * JOURNAL_BASE_PREFIX_CHARS)
    uid = "0d9c5a4e-7f2b-4b39-9c1e-3f0b8a6f2d11"
    widest = run.model_copy(update={"metadata": run.metadata.model_copy(
        update={"namespace": "n" * 63, "uid": uid})})
    found = runobjects.journal_pin(run=widest, journal=longest)
    assert found is not None and len(found.prefix) == 512


def test_a_run_without_a_uid_gets_no_shared_prefix(run: AgentRun) -> None:
    nameless = run.model_copy(update={"metadata": run.metadata.model_copy(update={"uid": None})})
    with pytest.raises(ValueError, match="uid"):
        runobjects.journal_pin(run=nameless, journal=SETTINGS)
