"""One codec rule for what may be committed: a payload nests at most
``bounds.PAYLOAD_DEPTH`` levels, so what is encoded can be decoded.

Covers, at the bound (just under, at, over) and far over it (200: pydantic's parser gave
up there; 255-256: its serializer; 1,000: Python's json): the codec's encoding and
decoding (a deeper record text is refused before any parser recurses, and a value that
contains itself is measured, not looped on); a step through the SDK's ``Steps`` (refused
before anything is committed; at the bound read back by a successor); an effect whose
applied result is too deep (or not JSON): its outcome is still recorded, as applied and
unstorable, the call made once, and a successor gets the same :class:`ResultNotStored`
without calling; the sidecar's real HTTP server (a 1,000-deep body is a 400, not a 500).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentrun.api import bounds
from agentrun.api.records import nesting
from agentrun.worker import _effects as effects
from agentrun.worker import _prefix as prefix
from agentrun.worker import _records as records
from tests.support.actors.sidecarhttp import serving

from .sidecarfakes import Memory, make

DEPTH = bounds.PAYLOAD_DEPTH
Kind = records.Kind


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth):
        value = [value] if level % 16 else {"k": value}  # small: 256 levels fit inline
    return value


def steps(attempt: int, committed: dict[str, records.Record] | None = None) -> prefix.Steps:
    return prefix.Steps(prefix=prefix.Prefix(attempt=attempt, committed=committed or {}),
                        ledger=Memory())


@pytest.mark.parametrize("depth", [0, 1, DEPTH - 1, DEPTH])
def test_a_payload_within_the_bound_round_trips(depth: int) -> None:
    record = records.make(key="k", kind=Kind.STEP_RESULT, attempt=1, payload=nested(depth))
    text = records.encode(record)
    assert records.text_nesting(text.encode()) == depth + 1
    decoded = records.decode(annotation=record.annotation, value=text, attempt=1)
    assert records.payload(decoded, store=None) == nested(depth)


@pytest.mark.parametrize("depth", [DEPTH + 1, 200, 255, 256, 1000, 5000])
def test_a_deeper_payload_is_a_record_error_before_anything_is_encoded(depth: int) -> None:
    with pytest.raises(records.RecordError, match=f"at most {DEPTH} levels"):
        records.make(key="k", kind=Kind.STEP_RESULT, attempt=1, payload=nested(depth))
    with pytest.raises(ValueError, match=f"at most {DEPTH} levels"):
        records.Record(attempt=1, digest="0" * 64, inline=nested(depth), key="k",
                       kind=Kind.STEP_RESULT, size=1)


def test_a_value_that_contains_itself_is_measured_not_looped_on() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert nesting(loop) == DEPTH + 1
    with pytest.raises(records.RecordError, match=f"at most {DEPTH} levels"):
        records.canonical(loop)


@pytest.mark.parametrize("depth", [DEPTH + 1, 200, 1000, 100_000])
def test_a_deeper_record_text_is_refused_before_it_is_parsed(depth: int) -> None:
    inline = "[" * depth + "]" * depth  # as a worker without the SDK could write it
    text = ('{"attempt":1,"digest":"' + "0" * 64 + '","inline":' + inline +
            ',"key":"k","kind":"step-result","size":1}')
    with pytest.raises(records.RecordError, match=f"record k of attempt 1 is malformed.*"
                                                  f"at most {DEPTH} levels"):
        records.decode(annotation="record.agentrun.dev/k", value=text, attempt=1)


@pytest.mark.parametrize(("text", "depth"), [
    (b"", 0), (b"7", 0), (b"[]", 1), (b'{"a":[{"b":[1]}]}', 4),
    (b'["[[[[", "\\"[[", {"x": "]]"}]', 2), (b'"\\\\", [[', 2),  # brackets in strings
    (b'"never closed [[[[', 0), (b"[[[[}", 4),  # what a parser reaches before it fails
])
def test_text_nesting_counts_what_a_parser_would_recurse_into(text: bytes,
                                                              depth: int) -> None:
    assert records.text_nesting(text) == depth


@pytest.mark.parametrize("depth", [DEPTH - 1, DEPTH, DEPTH + 1, 200, 256])
def test_a_step_through_the_sdk_commits_only_what_a_successor_can_read(depth: int) -> None:
    first = steps(1)
    if depth > DEPTH:
        with pytest.raises(records.RecordError, match=f"at most {DEPTH} levels"):
            first.step("gather", do=lambda: nested(depth))
        assert first.ledger.committed == {}  # type: ignore[attr-defined]
        return
    assert first.step("gather", do=lambda: nested(depth)) == nested(depth)
    [(key, record)] = first.ledger.committed.items()  # type: ignore[attr-defined]
    stored = records.decode(annotation=record.annotation, value=records.encode(record),
                            attempt=1)
    successor = steps(2, {key: stored})
    assert successor.step("gather", do=lambda: pytest.fail("committed")) == nested(depth)
    assert successor.done == ["gather"]


class Owner:
    def __init__(self, result: Any) -> None:
        self.result, self.calls = result, 0

    def call(self, key: str, token: int) -> Any:
        self.calls += 1
        return self.result

    def reconcile(self, key: str) -> effects.Reconciled:
        return effects.Reconciled(answer=effects.Answer.APPLIED, result=self.result)


class Live:
    def ensure_live(self) -> None:
        pass


def ledger(found: prefix.Steps) -> effects.Ledger:
    return effects.Ledger(steps=found, keeper=Live(), run_uid="uid", slot="s")


@pytest.mark.parametrize("result", [nested(DEPTH), nested(1000), {"when": object()}])
def test_an_applied_effect_whose_result_cannot_be_stored_is_still_recorded(
        result: Any) -> None:
    owner, first = Owner(result), steps(1)
    with pytest.raises(effects.ResultNotStored, match="was applied") as raised:
        ledger(first).effect("publish", key="publish", call=owner.call)
    assert owner.calls == 1 and raised.value.key == "publish"
    memory = first.ledger.committed  # type: ignore[attr-defined]
    outcome = memory["publish.outcome"].inline
    assert outcome["answer"] == "applied" and outcome["result"] is None
    assert outcome["unstorable"]  # why, for the person reading the Lease
    successor = steps(2, dict(memory))
    with pytest.raises(effects.ResultNotStored, match=outcome["unstorable"][:40]):
        ledger(successor).effect("publish", key="publish", call=owner.call,
                                 reconcile=owner.reconcile)
    assert owner.calls == 1  # never sent again, nor asked about


def test_a_reconciled_result_that_cannot_be_stored_is_recorded_applied() -> None:
    owner = Owner(nested(DEPTH))
    intent = records.make(key="publish.intent", kind=Kind.EFFECT_INTENT, attempt=1,
                          payload={"effect": "publish"})
    second = steps(2, {"publish.intent": intent})
    with pytest.raises(effects.ResultNotStored):
        ledger(second).effect("publish", key="publish", call=owner.call,
                              reconcile=owner.reconcile)
    outcome = second.ledger.committed["publish.outcome"].inline  # type: ignore[attr-defined]
    assert (outcome["via"], outcome["result"], owner.calls) == ("reconcile", None, 0)


def test_an_effect_result_just_under_the_bound_is_returned_and_kept() -> None:
    owner, first = Owner(nested(DEPTH - 1)), steps(1)
    assert ledger(first).effect("publish", key="publish", call=owner.call) == nested(DEPTH - 1)
    successor = steps(2, dict(first.ledger.committed))  # type: ignore[attr-defined]
    assert ledger(successor).effect("publish", key="publish",
                                    call=owner.call) == nested(DEPTH - 1)
    assert owner.calls == 1


def test_the_sidecar_answers_each_depth_with_a_commit_or_a_400() -> None:
    sidecar, worker = make()
    with serving(sidecar) as (ask, _):
        for depth in (DEPTH - 1, DEPTH):
            body = json.dumps(nested(depth)).encode()
            assert ask("PUT", f"/v1/steps/at-{depth}", body) == (
                201, {"result": nested(depth)})
        over = [json.dumps(nested(depth)).encode() for depth in (DEPTH + 1, 200, 256)]
        for body in [*over, b"[" * 1000 + b"]" * 1000]:
            assert len(body) <= bounds.RECORD_BYTES
            status, answer = ask("PUT", "/v1/steps/deep", body)
            assert status == 400 and f"at most {DEPTH} levels" in answer["message"], answer
        assert set(worker.memory.committed) == {f"at-{DEPTH - 1}", f"at-{DEPTH}"}
        status, first = ask("POST", "/v1/effects/publish", b'{"name": "publish"}')
        assert (status, first["do"]) == (200, "call")
        deep = json.dumps({"result": nested(DEPTH)}).encode()  # the outcome wraps it: 65
        status, answer = ask("POST", "/v1/effects/publish/reply", deep)
        assert status == 400 and f"at most {DEPTH} levels" in answer["message"], answer
        fits = json.dumps({"result": nested(DEPTH - 1)}).encode()  # the instruction stood
        assert ask("POST", "/v1/effects/publish/reply", fits) == (
            200, {"do": "done", "result": nested(DEPTH - 1)})
