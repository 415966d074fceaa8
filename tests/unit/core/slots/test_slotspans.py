"""The spans a slot status write completes: a pure diff of the status read and written."""

from __future__ import annotations

from agentrun.api import traces
from agentrun.api.meta import OwnerReference
from agentrun.api.slots import CommandKind, CommandRecord, Outcome, Slot, SlotState, SlotStatus
from agentrun.core.slots import slotspans
from tests.unit.core.corefakes import (
    RUN_UID,
    SLOT_UID,
    T0,
    active,
    attempt,
    claiming,
    retry_wait,
    seconds,
)
from tests.unit.core.corefakes import slot as bare_slot

NOW = T0 + seconds(600)
TRACE = traces.trace_id(RUN_UID)
SLOT_SPAN = traces.slot_span(SLOT_UID)


def slot(status: SlotStatus | None = None) -> Slot:
    """The fakes' slot, controlled by the fakes' run and created at T0."""
    found = bare_slot(status)
    meta = found.metadata.model_copy(update={"creation_timestamp": T0, "owner_references": [
        OwnerReference(api_version="agentrun.dev/v1alpha1", kind="AgentRun", name="r",
                       uid=RUN_UID, controller=True)]})
    return found.model_copy(update={"metadata": meta})


def spans(old: SlotStatus, new: SlotStatus) -> dict[str, traces.SpanRecord]:
    found = slotspans.of_slot_write(slot=slot(old), old=old, new=new, now=NOW)
    assert len({s.name for s in found}) == len(found)
    assert {s.trace for s in found} <= {TRACE}
    return {s.name: s for s in found}


def test_an_attempt_ending_is_its_span_under_the_slot() -> None:
    running = active(2)
    ended = running.model_copy(update={"state": SlotState.RETRY_WAIT, "attempts": [
        attempt(1), attempt(2, outcome=Outcome.LOST)]})
    found = spans(running, ended)
    assert set(found) == {"attempt 2"}
    span = found["attempt 2"]
    assert (span.span, span.parent) == (traces.attempt_span(SLOT_UID, 2), SLOT_SPAN)
    assert (span.start, span.end) == (T0, T0 + seconds(60))
    assert span.attributes["agentrun.outcome"] == "Lost"
    assert span.attributes["agentrun.owner"] == "alice"
    assert [e.name for e in span.events] == ["lease expired"]
    assert span.error == "Lost"
    # Written again (a retried reconcile reads it back): nothing new.
    assert spans(ended, ended) == {}


def test_a_succeeded_attempt_and_slot_are_no_errors_and_the_slot_ends_under_the_run() -> None:
    running = active(1)
    done = running.model_copy(update={"state": SlotState.SUCCEEDED, "attempts": [
        attempt(1, outcome=Outcome.SUCCEEDED)]})
    found = spans(running, done)
    assert set(found) == {"attempt 1", "slot review-sources"}
    assert found["attempt 1"].error is None and found["attempt 1"].events == ()
    whole = found["slot review-sources"]
    assert (whole.span, whole.parent) == (SLOT_SPAN, traces.run_span(RUN_UID))
    assert (whole.start, whole.end, whole.error) == (T0, NOW, None)
    failed = spans(running, done.model_copy(update={"state": SlotState.FAILED}))
    assert failed["slot review-sources"].error == "the slot failed"


def test_a_claim_is_a_span_under_its_attempt_from_when_the_slot_opened() -> None:
    opened = CommandRecord(request_id="c-1", kind=CommandKind.CLAIM, actor="alice",
                           outcome="Accepted", time=T0 - seconds(30))
    before = claiming(1).model_copy(update={"commands": [opened]})
    started = active(1).model_copy(update={"commands": [opened]})
    found = spans(before, started)
    claim = found["claim"]
    parent = traces.attempt_span(SLOT_UID, 1)
    assert (claim.parent, claim.span) == (parent, traces.child_span(parent, "claim"))
    assert (claim.start, claim.end) == (T0 - seconds(30), T0)
    assert claim.attributes["agentrun.owner"] == "alice"
    assert claim.attributes["agentrun.launch_spec"] == "cpu-spec@1"


def test_each_new_ledger_entry_is_a_moment_with_who_why_and_the_check() -> None:
    before = retry_wait()
    refused = CommandRecord(request_id="r-1", kind=CommandKind.REASSIGN, actor="bob",
                            reason="mine", outcome="Rejected", predicate="NotOwner",
                            message="not the owner", time=T0 + seconds(5))
    accepted = refused.model_copy(update={"request_id": "r-2", "actor": "alice",
                                          "reason": "node lost", "outcome": "Accepted",
                                          "predicate": None, "message": ""})
    once = before.model_copy(update={"commands": [refused]})
    found = slotspans.of_slot_write(slot=slot(before), old=before, new=once, now=NOW)
    (bob,) = found
    assert (bob.name, bob.parent, bob.start, bob.end) == (
        "command Reassign", SLOT_SPAN, T0 + seconds(5), T0 + seconds(5))
    assert {k: v for k, v in bob.attributes.items() if k.startswith("agentrun.command")} == {
        "agentrun.command.kind": "Reassign", "agentrun.command.request_id": "r-1",
        "agentrun.command.outcome": "Rejected", "agentrun.command.actor": "bob",
        "agentrun.command.reason": "mine", "agentrun.command.predicate": "NotOwner",
        "agentrun.command.message": "not the owner"}
    twice = once.model_copy(update={"commands": [refused, accepted]})
    (alice,) = slotspans.of_slot_write(slot=slot(once), old=once, new=twice, now=NOW)
    assert alice.attributes["agentrun.command.actor"] == "alice"
    assert "agentrun.command.predicate" not in alice.attributes
    assert alice.span != bob.span


def test_a_slot_with_no_run_or_uid_reports_nothing() -> None:
    running = active(1)
    done = running.model_copy(update={"state": SlotState.SUCCEEDED, "attempts": [
        attempt(1, outcome=Outcome.SUCCEEDED)]})
    assert slotspans.of_slot_write(slot=bare_slot(running), old=running, new=done,
                                   now=NOW) == []


def test_a_tombstone_is_the_fence_under_its_attempt() -> None:
    fence = slotspans.of_tombstone(slot=slot(active(3)), lease="research-1-review-sources-3",
                                   now=NOW)
    assert fence is not None
    assert (fence.name, fence.parent, fence.start) == (
        "fence", traces.attempt_span(SLOT_UID, 3), NOW)
    assert slotspans.of_tombstone(slot=slot(active(3)), lease="no-number", now=NOW) is None
    assert slotspans.of_tombstone(slot=bare_slot(active(3)), lease="x-3", now=NOW) is None


def test_an_attempt_failed_at_its_claim_has_no_claim_span_only_its_failure() -> None:
    before = claiming(1)
    failed = retry_wait().model_copy(update={"attempts": [
        attempt(1, outcome=Outcome.CLAIM_FAILED)]})
    found = spans(before, failed)
    assert set(found) == {"attempt 1"}
    assert found["attempt 1"].error == "ClaimFailed"
