"""An answer larger than an annotation's field holds, by reference, through the slot's step.

Covers: a pending answer naming ``value-from`` asks for that one ConfigMap to be read (and
only while undecided); read and matching its digest, the answer is checked against the
question's schema and accepted, the status keeps the reference (not the value), and the
claim's Lease names the file while the Pod mounts the ConfigMap there; a ConfigMap that is
missing, lacks the key, holds other bytes than the digest, or more than 64 KiB, and an
answer given both ways, are ``Malformed`` with nothing else changed; a schema violation is
``AnswerInvalid``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from agentrun.api import bounds, names, records
from agentrun.api.slots import Predicate, QuestionState
from agentrun.core.attempts import attemptobjects
from agentrun.core.base.actions import Create, WriteStatus
from agentrun.core.slots import inputs, steps
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect
from tests.unit.core.slots.test_questions import asked_status, fenced_world

NOTE = "n" * 3000
VALUE = json.dumps({"approved": True, "note": NOTE})
SHA = hashlib.sha256(VALUE.encode()).hexdigest()
CONFIGMAP = "agentrun-answer-0123456789abcdef0123456789abcdef"


def command(*, value_from: str | None = f"{CONFIGMAP}/value@sha256:{SHA}",
            value: str | None = None) -> dict[str, str]:
    found = {names.ANSWER_ID: "r-1", names.ANSWER_KEY: "plan",
             names.ANSWER_REASON: "the note says why", names.ANSWER_RUN: f.RUN,
             names.ANSWER_ACTOR: "alice", names.ANSWER_EPOCH: f.IN_FORCE.epoch or ""}
    if value_from is not None:
        found[names.ANSWER_VALUE_FROM] = value_from
    if value is not None:
        found[names.ANSWER_VALUE] = value
    return found


def decided(annotations: dict[str, str], data: dict[str, str] | None) -> Any:
    world = fenced_world(asked_status(), annotations=annotations,
                         referenced={CONFIGMAP: data})
    return expect(steps.next_step(world), WriteStatus).status


def test_the_reference_is_read_once_while_the_command_is_undecided() -> None:
    slot = fenced_world(asked_status(), annotations=command()).slot
    assert inputs.reads_for(slot, max_active=False).referenced == CONFIGMAP
    plain = fenced_world(asked_status(), annotations=command(value_from=None, value="true"))
    assert inputs.reads_for(plain.slot, max_active=False).referenced is None


def test_an_answer_by_reference_is_kept_as_the_reference_and_mounted_for_the_next_pod() -> None:
    status = decided(command(), {"value": VALUE})
    assert status.commands[-1].outcome == "Accepted", status.commands[-1].message
    entry = status.questions[0]
    assert (entry.state, entry.value, entry.value_from) == (
        QuestionState.ANSWERED, None, f"{CONFIGMAP}/value@sha256:{SHA}")
    lease = expect(steps.next_step(fenced_world(status)), Create)
    key = f"{records.PREFIX}plan{names.ANSWERED_SUFFIX}"
    record = records.decode(annotation=key, value=lease.body["metadata"]["annotations"][key],
                            attempt=2)
    assert isinstance(record.inline, dict) and "value" not in record.inline
    assert record.inline["valueFrom"] == {
        "configMap": CONFIGMAP, "sha256": SHA,
        "path": f"{names.ANSWERS_MOUNT_ROOT}/plan/{names.ANSWERS_FILE}"}


def test_the_pod_mounts_the_answer() -> None:
    status = decided(command(), {"value": VALUE})
    world = fenced_world(status)
    assert world.run is not None and world.run.status.pinned is not None
    slot = world.slot.model_copy(update={"status": status})
    body = attemptobjects.pod_body(slot=slot, pins=world.run.status.pinned,
                                   launch_spec=f.CPU_SPEC.spec, pinned=f.PINNED, attempt=2,
                                   owner_actor="alice", tenant=f.TENANT)
    volume = next(v for v in body["spec"]["volumes"] if v["name"] == "agentrun-a-plan")
    assert volume["configMap"] == {"name": CONFIGMAP, "items": [
        {"key": "value", "path": names.ANSWERS_FILE}]}
    mounts = body["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "agentrun-a-plan", "readOnly": True,
            "mountPath": f"{names.ANSWERS_MOUNT_ROOT}/plan"} in mounts


@pytest.mark.parametrize(("annotations", "data", "predicate", "words"), [
    (command(), None, Predicate.MALFORMED, "is not in the slot's namespace"),
    (command(), {"other": VALUE}, Predicate.MALFORMED, "is not in the slot's namespace"),
    (command(), {"value": VALUE + " "}, Predicate.MALFORMED, "holds other bytes"),
    (command(value_from=f"{CONFIGMAP}/value@sha256:" + hashlib.sha256(
        ('"' + "v" * bounds.ANSWER_FILE_BYTES + '"').encode()).hexdigest()),
     {"value": '"' + "v" * bounds.ANSWER_FILE_BYTES + '"'}, Predicate.MALFORMED, "at most"),
    (command(value="true"), {"value": VALUE}, Predicate.MALFORMED, "exactly one of the two"),
    (command(value_from=f"{CONFIGMAP}/value@sha256:" + hashlib.sha256(b'{"approved": 1}')
             .hexdigest()), {"value": '{"approved": 1}'}, Predicate.ANSWER_INVALID,
     "is not of type 'boolean'"),
], ids=["missing", "no-key", "other-bytes", "too-large", "both-ways", "schema"])
def test_a_bad_reference_is_refused_and_changes_nothing(
        annotations: dict[str, str], data: dict[str, str] | None, predicate: Predicate,
        words: str) -> None:
    before = asked_status()
    status = decided(annotations, data)
    entry = status.commands[-1]
    assert (entry.outcome, entry.predicate) == ("Rejected", predicate)
    assert words in entry.message
    assert status.questions == before.questions
