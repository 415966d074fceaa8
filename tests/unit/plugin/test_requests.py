"""The plugin's commands without a cluster: annotations, bounds, outcomes, exit codes."""

from __future__ import annotations

import re
from typing import Any

import pytest

from agentrun.api import bounds, names
from agentrun.api.slots import CommandKind, Predicate
from agentrun.core.commands import parsing
from agentrun.plugin import requests
from agentrun.plugin.requests import Request
from tests.support.commandsamples import SAMPLES

RID = "0123456789abcdef0123456789abcdef"


def test_a_reassignment_writes_its_id_and_fields_and_nothing_stamped() -> None:
    request = Request(kind=CommandKind.REASSIGN, request_id=RID,
                      fields={"reason": "oom twice", "worker_class": "gpu", "run": "study"})
    assert requests.written(request) == {
        names.REASSIGN_ID: RID, names.REASSIGN_REASON: "oom twice",
        names.REASSIGN_WORKER_CLASS: "gpu", names.REASSIGN_RUN: "study"}


@pytest.mark.parametrize("shape", parsing.SHAPES, ids=lambda s: str(s.kind))
def test_no_command_writes_what_admission_stamps(shape: parsing.Shape) -> None:
    request = Request(kind=shape.kind, request_id=RID,
                      fields={f: SAMPLES[f] for f in shape.fields})
    written = requests.written(request)
    assert not set(written) & set(shape.stamped)
    assert written[shape.id] == RID
    assert set(written) <= set(shape.keys)
    # What the plugin writes is what the operator reads back as the same command.
    pending = parsing.pending(written)
    assert pending is not None and pending.malformed is None
    assert pending.command.kind is shape.kind and pending.command.request_id == RID


def test_the_patch_carries_the_slots_version_as_its_precondition() -> None:
    request = Request(kind=CommandKind.CLAIM, request_id=RID)
    assert requests.patch(request, resource_version="42") == {
        "metadata": {"annotations": {names.CLAIM_ID: RID}, "resourceVersion": "42"}}
    assert requests.patch(request, resource_version=None) == {
        "metadata": {"annotations": {names.CLAIM_ID: RID}}}


@pytest.mark.parametrize(("kind", "fields", "says"), [
    (CommandKind.REASSIGN, {"reason": "x" * (bounds.REASON_BYTES + 1)}, "--reason is 1025"),
    (CommandKind.REASSIGN, {"reason": "é" * 513}, "bytes long (UTF-8)"),
    (CommandKind.REASSIGN, {"worker_class": "GPU"}, "--class must match"),
    (CommandKind.REASSIGN, {"worker_class": "a" * 64}, "--class is 64 characters"),
    (CommandKind.REASSIGN, {"tenant": "-bad"}, "--tenant must match"),
    (CommandKind.RESOLVE_EFFECT, {"effect_key": "a.intent"}, "--key must match"),
    (CommandKind.RESOLVE_EFFECT, {"outcome": "maybe"}, "--outcome must match"),
    (CommandKind.RESOLVE_EFFECT, {"result": "x" * 513}, "--result is 513 bytes"),
    (CommandKind.HOLD, {"worker_class": "gpu"}, "--class does not apply to Hold"),
    (CommandKind.CLAIM, {"reason": "why"}, "--reason does not apply to Claim"),
])
def test_a_value_out_of_its_bound_is_refused_naming_the_flag(
        kind: CommandKind, fields: dict[str, str], says: str) -> None:
    with pytest.raises(requests.BadInput, match=re.escape(says)):
        requests.check(kind, fields)
    with pytest.raises(requests.BadInput):
        requests.written(Request(kind=kind, request_id=RID, fields=fields))


def test_a_blank_reason_is_left_to_the_operators_guard() -> None:
    requests.check(CommandKind.REASSIGN, {"reason": "   "})  # BlankReason is a verdict


def test_the_largest_values_within_bounds_pass() -> None:
    requests.check(CommandKind.RESOLVE_EFFECT, {
        "reason": "r" * bounds.REASON_BYTES, "effect_key": "k" * bounds.STEP_KEY_CHARS,
        "outcome": "not-applied", "result": "x" * bounds.RESOLVE_RESULT_BYTES})


def test_fresh_request_ids_are_valid_and_distinct() -> None:
    ids = {requests.new_request_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(parsing.request_id_problem("id", i) is None for i in ids)


@pytest.mark.parametrize("rid", [RID, "a" * bounds.REQUEST_ID_CHARS])
def test_the_resend_id_is_derived_valid_and_new(rid: str) -> None:
    again = requests.resend_id(rid)
    assert again != rid and again.endswith(".resend")
    assert parsing.request_id_problem("id", again) is None
    assert requests.resend_id(rid) == again  # deterministic: the same request


def slot(*entries: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[
        str, Any]:
    return {"metadata": {"name": "s", "annotations": annotations or {}},
            "status": {"commands": list(entries)}}


def test_the_ledger_entry_is_found_by_request_id_only() -> None:
    mine = {"requestId": RID, "outcome": "Accepted", "kind": "Claim"}
    other = {"requestId": "other", "outcome": "Rejected", "kind": "Claim"}
    assert requests.entry(slot(other, mine), RID) == mine
    assert requests.entry(slot(other), RID) is None
    assert requests.entry({"metadata": {}}, RID) is None


def test_a_waiting_command_of_the_same_kind_is_seen() -> None:
    waiting = slot(annotations={names.HOLD_ID: "earlier"})
    assert requests.pending_id(CommandKind.HOLD, waiting) == "earlier"
    assert requests.pending_id(CommandKind.RELEASE, waiting) is None


@pytest.mark.parametrize("predicate", list(Predicate))
def test_only_unproven_stamping_is_resent_and_every_rejection_exits_1(
        predicate: Predicate) -> None:
    record = {"requestId": RID, "kind": "Reassign", "outcome": "Rejected",
              "predicate": str(predicate), "message": "because"}
    assert requests.unproven(record) is (predicate in {
        Predicate.COMMANDS_REFUSED, Predicate.UNSTAMPED, Predicate.STALE_EPOCH})
    assert requests.exit_code(record) == requests.REJECTED == 1
    assert requests.describe(record) == f"Reassign {RID}: Rejected ({predicate}): because"


def test_an_accepted_command_exits_0_and_says_by_whom() -> None:
    record = {"requestId": RID, "kind": "Reassign", "outcome": "Accepted", "actor": "alice",
              "override": True, "message": "reassigned to gpu"}
    assert requests.exit_code(record) == 0
    assert not requests.unproven(record)
    assert requests.describe(record) == (
        f"Reassign {RID}: Accepted (by alice) using override: reassigned to gpu")
    assert requests.describe({"kind": "Claim", "requestId": RID, "outcome": "Accepted"}) == (
        f"Claim {RID}: Accepted")
