"""Approvals at the sender: an effect that needs approval is sent only for an approved digest.

Covers: the first call commits the payload (``<key>.payload``, its record's digest the
payload's) and ``<key>.approval`` (effect, owner, digest, the redacted view, approvers)
and raises ApprovalRequested, sending nothing; asked again in the same attempt nothing
more is committed; an ``<key>.approved`` decision for this digest sends it once, the
intent recording the digest; one for another digest (other arguments) asks again; a
denied one raises EffectDenied and sends nothing; the LaunchSpec's floor applies to a
worker that asks for fewer approvers or none, and an effect it requires without a
payload is refused before anything; the floors' env is parsed strictly.
"""

from __future__ import annotations

import pytest

from agentrun.api import names
from agentrun.worker import _approvals as approvals
from agentrun.worker import _records as records
from agentrun.worker._effects import Answer
from tests.unit.worker.test_effects import Owner, intent, ledger

PAYLOAD = {"to": "all", "token": "s3cret", "body": "the report"}
DIGEST = approvals.payload_digest(PAYLOAD)


def decided(decision: str, *, digest: str = DIGEST,
            approvals: int = 1) -> dict[str, records.Record]:
    payload = {"value": {"decision": decision, "required": approvals, "approvals": approvals},
               "digest": digest, "questionAttempt": 1, "expired": False, "actor": "bob"}
    key = f"publish{names.APPROVED_SUFFIX}"
    return {key: records.make(key=key, kind=records.Kind.DECISION, attempt=2, payload=payload)}


def send(found: object, owner: Owner, *, approvers: int = 1,
         payload: records.JSON = PAYLOAD) -> object:
    return found.effect("publish", key="publish", call=owner.call,  # type: ignore[attr-defined]
                        reconcile=owner.reconcile, owner="blog", payload=payload,
                        approvers=approvers, redact=("token",))


def test_a_first_call_asks_with_the_payload_and_sends_nothing() -> None:
    owner = Owner()
    found, memory, _ = ledger(attempt=1, owner=owner)
    with pytest.raises(approvals.ApprovalRequested) as asked:
        send(found, owner, approvers=2)
    assert (asked.value.key, asked.value.digest) == ("publish", DIGEST)
    kept, request = memory.committed
    assert (kept.key, kept.digest, kept.inline) == ("publish.payload", DIGEST, PAYLOAD)
    assert request.key == "publish.approval" and request.kind is records.Kind.DECISION
    assert request.inline == {
        "effect": "publish", "owner": "blog", "digest": DIGEST, "approvers": 2,
        "view": '{"body":"the report","to":"all","token":"<redacted>"}'}
    with pytest.raises(approvals.ApprovalRequested):  # again: nothing more is committed
        send(found, owner, approvers=2)
    assert len(memory.committed) == 2
    assert not [entry for entry in owner.log if entry[0] == "call"]


def test_an_approved_digest_is_sent_once_and_the_intent_records_it() -> None:
    owner = Owner()
    found, memory, _ = ledger(attempt=2, owner=owner, committed=decided("approved"))
    assert send(found, owner) == {"published": 1}
    intent = next(r for r in memory.committed if r.key == "publish.intent")
    assert isinstance(intent.inline, dict)
    assert intent.inline["approval"] == {"payloadDigest": DIGEST, "approvals": 1,
                                         "required": 1}
    assert [entry[0] for entry in owner.log].count("call") == 1


def test_a_decision_by_fewer_approvers_than_now_required_does_not_count() -> None:
    owner = Owner()
    found, _, _ = ledger(attempt=2, owner=owner, committed=decided("approved"))
    found.floors = {"publish": 2}  # raised since the one approval was given
    with pytest.raises(approvals.ApprovalRequested):
        send(found, owner)
    assert not [entry for entry in owner.log if entry[0] == "call"]


def test_an_ambiguous_effect_that_the_owner_never_got_is_resent_only_as_approved() -> None:
    """An intent without an outcome (attempt 1 sent it, approved, then died); the owner
    answers not-applied: attempt 2 re-sends only under the approval of this digest."""
    owner = Owner(answers=[Answer.NOT_APPLIED])
    committed = {**intent(1), **decided("approved")}
    found, _, _ = ledger(attempt=2, owner=owner, committed=committed)
    assert send(found, owner) == {"published": 1}
    assert [entry[0] for entry in owner.log if entry[0] != "commit"] == ["reconcile", "call"]
    other = Owner(answers=[Answer.NOT_APPLIED])
    again, _, _ = ledger(attempt=2, owner=other, committed=committed)
    with pytest.raises(approvals.ApprovalRequested):  # other arguments: asked again
        send(again, other, payload={"to": "nobody"})
    assert [entry[0] for entry in other.log if entry[0] != "commit"] == ["reconcile"]


def test_an_effect_already_applied_needs_no_payload_even_under_a_floor() -> None:
    owner = Owner(answers=[Answer.APPLIED])
    found, _, _ = ledger(attempt=2, owner=owner, committed=intent(1))
    found.floors = {"publish": 1}
    assert found.effect("publish", key="publish", call=owner.call,
                        reconcile=owner.reconcile) == {"published": 1}
    assert not [entry for entry in owner.log if entry[0] == "call"]


def test_other_arguments_ask_again() -> None:
    owner = Owner()
    found, memory, _ = ledger(attempt=2, owner=owner, committed=decided("approved"))
    with pytest.raises(approvals.ApprovalRequested) as asked:
        send(found, owner, payload={**PAYLOAD, "to": "everyone"})
    assert asked.value.digest != DIGEST
    assert [r.key for r in memory.committed] == ["publish.payload", "publish.approval"]
    assert not [entry for entry in owner.log if entry[0] == "call"]


def test_a_denied_payload_is_never_sent() -> None:
    owner = Owner()
    found, memory, _ = ledger(attempt=2, owner=owner, committed=decided("denied"))
    with pytest.raises(approvals.EffectDenied, match="denied by bob"):
        send(found, owner)
    assert memory.committed == [] and owner.log == []


def test_the_launchspecs_floor_is_never_lowered() -> None:
    owner = Owner()
    found, memory, _ = ledger(attempt=1, owner=owner)
    found.floors = {"publish": 2}
    with pytest.raises(approvals.ApprovalRequested):
        send(found, owner, approvers=0)  # the worker asks for none: the floor holds
    assert memory.committed[-1].inline["approvers"] == 2
    other = Owner()
    bare, kept, _ = ledger(attempt=1, owner=other)
    bare.floors = {"publish": 1}
    with pytest.raises(approvals.ApprovalError, match="give payload="):
        bare.effect("publish", key="publish", call=other.call)
    assert kept.committed == [] and other.log == []


@pytest.mark.parametrize(("text", "ok"), [
    (None, {}), ("", {}), ('{"publish":2}', {"publish": 2}),
    ("[1]", None), ('{"publish":0}', None), ('{"publish":4}', None), ('{"publish":true}', None),
    ("not json", None)])
def test_the_floors_env_is_parsed_strictly(text: str | None, ok: dict[str, int] | None) -> None:
    if ok is not None:
        assert approvals.floors(text) == ok
    else:
        with pytest.raises(approvals.ApprovalError, match=names.ENV_APPROVALS):
            approvals.floors(text)
    with pytest.raises(approvals.ApprovalError, match="approvers must be"):
        approvals.required(name="publish", approvers=9, floor={})
