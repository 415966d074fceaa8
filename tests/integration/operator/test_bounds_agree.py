"""Admission and the operator agree on every command bound.

Both read ``agentrun.api.bounds``: the validating policy with CEL (``size()``,
``bytes().size()``, ``matches()``), the operator's parser (``parsing.pending``) in
Python. With the shipped validating policies installed (``serial``), on a RetryWait slot
that accepts every kind of command from its owner (held by her before the release
commands: only a held slot may be released), for each command kind and each bounded
annotation: a value at its bound (the longest id, a reason of exactly 1024 bytes in
two-byte characters, a 63-character class) is accepted by a server-side dry run and not
malformed to the operator; a value just past it, or off its pattern, is refused by
admission with a message naming that annotation, and is malformed to the operator.
"""

from __future__ import annotations

import pytest

from agentrun.api import bounds
from agentrun.api.slots import CommandKind
from agentrun.core.commands import parsing
from tests.support.actors.operators import OperatorProcess
from tests.support.plays.scenarios import Scenario, request_id

pytestmark = pytest.mark.serial

GOOD = {"reason": "the worker died", "worker_class": "cpu", "run": "study",
        "effect_key": "publish", "outcome": "applied", "result": '{"url": "r/1"}',
        "question_key": "plan", "value": '{"publish": true}', "digest": "0" * 64,
        "approval_key": "publish", "payload_digest": "a" * 64,
        "value_from": "agentrun-answer-1/value@sha256:" + "b" * 64, "from_step": "draft",
        "resend": "publish", "resend_reason": "the blog lost the post"}
EITHER = ("value", "value_from")  # an answer is given one way or the other, never both
AT_BOUND = {
    "id": ["r" * bounds.REQUEST_ID_CHARS, "a.b_c:d@e/f+g=h-1", "7"],
    "reason": ["x" * bounds.REASON_BYTES, "é" * (bounds.REASON_BYTES // 2)],
    "worker_class": ["c" * bounds.WORKER_CLASS_CHARS, "gpu.large-2"],
    "effect_key": ["k" * bounds.STEP_KEY_CHARS, "a-1"],
    "outcome": ["not-applied"],
    "result": ["r" * bounds.RESOLVE_RESULT_BYTES, "é" * (bounds.RESOLVE_RESULT_BYTES // 2)],
    "question_key": ["k" * bounds.STEP_KEY_CHARS, "a-1"],
    "value": ['"' + "v" * (bounds.ANSWER_VALUE_BYTES - 2) + '"',
              '"' + "é" * ((bounds.ANSWER_VALUE_BYTES - 2) // 2) + '"'],
    "digest": ["a" * bounds.DIGEST_CHARS, "0"],
    "approval_key": ["k" * bounds.STEP_KEY_CHARS, "a-1"],
    "payload_digest": ["a" * bounds.DIGEST_CHARS, "0"],
    "value_from": [("c" * 200 + "/" + "k" * 100 + "@sha256:").ljust(bounds.VALUE_FROM_CHARS,
                                                                   "0"), "a/b@sha256:0"],
    "from_step": ["k" * bounds.STEP_KEY_CHARS, "a-1"],
    "resend": ["k" * bounds.STEP_KEY_CHARS, "a-1"],
    "resend_reason": ["x" * bounds.REASON_BYTES, "é" * (bounds.REASON_BYTES // 2)],
}
PAST_BOUND = {
    "id": ["r" * (bounds.REQUEST_ID_CHARS + 1), "no spaces!", "-leading", "trailing.", "  "],
    "reason": ["x" * (bounds.REASON_BYTES + 1), "é" * (bounds.REASON_BYTES // 2 + 1)],
    "worker_class": ["c" * (bounds.WORKER_CLASS_CHARS + 1), "GPU!", "cpu-", "a_b"],
    "run": ["r" * (bounds.RUN_CHARS + 1), "Study", "study.", ""],
    "tenant": ["t" * (bounds.TENANT_CHARS + 1), "a tenant", "-x"],
    "effect_key": ["k" * (bounds.STEP_KEY_CHARS + 1), "Publish", "a.b", "-x", ""],
    "outcome": ["maybe", "Applied", ""],
    "result": ["r" * (bounds.RESOLVE_RESULT_BYTES + 1),
               "é" * (bounds.RESOLVE_RESULT_BYTES // 2 + 1)],
    "question_key": ["k" * (bounds.STEP_KEY_CHARS + 1), "Plan", "a.b", "-x", ""],
    "value": ['"' + "v" * (bounds.ANSWER_VALUE_BYTES - 1) + '"',
              '"' + "é" * ((bounds.ANSWER_VALUE_BYTES - 2) // 2 + 1) + '"'],
    "digest": ["a" * (bounds.DIGEST_CHARS + 1), "ABC", "g1", ""],
    "approval_key": ["k" * (bounds.STEP_KEY_CHARS + 1), "Publish", "a.b", "-x", ""],
    "payload_digest": ["a" * (bounds.DIGEST_CHARS + 1), "ABC", "g1", ""],
    "value_from": ["a/b@sha256:".ljust(bounds.VALUE_FROM_CHARS + 1, "0"), "A/b@sha256:00",
                   "cm/value", "cm/v@md5:00", "cm@sha256:00", ""],
    "from_step": ["k" * (bounds.STEP_KEY_CHARS + 1), "Draft", "a.b", "-x", ""],
    "resend": ["k" * (bounds.STEP_KEY_CHARS + 1), "Publish", "a.b", "-x", ""],
    "resend_reason": ["x" * (bounds.REASON_BYTES + 1), "é" * (bounds.REASON_BYTES // 2 + 1)],
}


def command(shape: parsing.Shape, *, field: str | None = None, value: str = "",
            tenant: str) -> dict[str, str]:
    """A good command of ``shape``, with ``field`` (or the request id, "id") set to ``value``."""
    values = {**GOOD, "tenant": tenant}
    annotations = {shape.id: value if field == "id" else "good-id"}
    for name, key in shape.fields.items():
        if name in EITHER and name != (field if field in EITHER else EITHER[0]):
            continue
        annotations[key] = value if name == field else values[name]
    return annotations


def dry_run(scenario: Scenario, slot: str, annotations: dict[str, str]) -> tuple[bool, str]:
    pairs = [f"{key}={value}" for key, value in annotations.items()]
    result = scenario.cluster.kubectl(
        "-n", scenario.namespace, "annotate", "--overwrite", "--dry-run=server",
        f"slots.agentrun.dev/{slot}", *pairs, user="alice")
    return result.returncode == 0, result.stderr


def operator_problem(shape: parsing.Shape, annotations: dict[str, str]) -> str | None:
    pending = parsing.pending({**annotations, shape.actor: "alice", shape.epoch: "e"})
    assert pending is not None and pending.command.kind is shape.kind
    return pending.malformed


def test_a_value_admission_accepts_is_one_the_operator_parses_and_vice_versa(
        scenario: Scenario, operator: OperatorProcess, validating: None) -> None:
    slot = scenario.owned_retry_wait(owner="alice")
    tenant = scenario.namespace  # the namespace's tenant label
    checked = 0
    hold: str | None = None
    # A release needs a held slot (and a held slot refuses a reassignment or a claim):
    # the release shapes come last, after alice holds the slot.
    for shape in sorted(parsing.SHAPES, key=lambda s: s.kind is CommandKind.RELEASE):
        if shape.kind is CommandKind.RELEASE and hold is None:
            hold = request_id()
            assert scenario.annotate(slot, user="alice", hold_id=hold,
                                     hold_reason="bounds of release").returncode == 0
            assert scenario.wait_ledger(slot, hold)["outcome"] == "Accepted"
        fields = ["id", *shape.fields]
        good = command(shape, tenant=tenant)
        accepted, error = dry_run(scenario, slot, good)
        assert accepted, (shape.kind, error)  # the control: only the bad value differs
        for field in fields:
            for value in AT_BOUND.get(field, []):
                annotations = command(shape, field=field, value=value, tenant=tenant)
                accepted, error = dry_run(scenario, slot, annotations)
                assert accepted, (shape.kind, field, value[:20], error)
                assert operator_problem(shape, annotations) is None, (shape.kind, field)
                checked += 1
            key = shape.id if field == "id" else shape.fields[field]
            for value in PAST_BOUND[field]:
                annotations = command(shape, field=field, value=value, tenant=tenant)
                accepted, error = dry_run(scenario, slot, annotations)
                assert not accepted, (shape.kind, field, value[:20])
                assert "denied request" in error and (
                    f"{key} must" in error or f"{key} is required" in error), (field, error)
                assert operator_problem(shape, annotations) is not None, (shape.kind, field,
                                                                          value[:20])
                checked += 1
    assert checked > 60
    written = scenario.slot(slot)["metadata"].get("annotations") or {}
    assert not set(written) & parsing.ALL_KEYS  # the dry runs wrote nothing
    assert [c["requestId"] for c in scenario.slot(slot)["status"]["commands"]][-1] == hold
