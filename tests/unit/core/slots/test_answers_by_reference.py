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
from agentrun.api.runs import AgentRun, JournalPin
from agentrun.api.slots import Predicate, QuestionState
from agentrun.core.attempts import attemptobjects, questionrecords
from agentrun.core.base.actions import Create, WriteStatus
from agentrun.core.slots import inputs, steps
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect
from tests.unit.core.slots.test_questions import asked_status, fenced_world

NOTE = "n" * 3000
VALUE = json.dumps({"approved": True, "note": NOTE})
SHA = hashlib.sha256(VALUE.encode()).hexdigest()
CONFIGMAP = "agentrun-answer-r-1"  # the plugin's, for the command's request id


def journaled_run() -> AgentRun:
    """The fake run, pinned with a journal (an answer by reference needs one)."""
    run = f.agent_run()
    assert run.status.pinned is not None
    pins = run.status.pinned.model_copy(update={"journal": JournalPin(
        endpoint="http://store:8333", bucket="journals", prefix="p/ns/uid")})
    return run.model_copy(update={"status": run.status.model_copy(update={"pinned": pins})})


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


def decided(annotations: dict[str, str], data: dict[str, str] | None, *,
            journal: bool = True) -> Any:
    world = fenced_world(asked_status(), annotations=annotations,
                         referenced={CONFIGMAP: data},
                         run=journaled_run() if journal else f.agent_run())
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
    lease = expect(steps.next_step(fenced_world(status, run=journaled_run())), Create)
    key = f"{records.PREFIX}plan{names.ANSWERED_SUFFIX}"
    record = records.decode(annotation=key, value=lease.body["metadata"]["annotations"][key],
                            attempt=2)
    assert isinstance(record.inline, dict) and "value" not in record.inline
    assert record.inline["valueFrom"] == {
        "configMap": CONFIGMAP, "sha256": SHA,
        "path": f"{names.ANSWERS_MOUNT_ROOT}/plan/{names.ANSWERS_FILE}"}


def test_the_pod_mounts_the_answer() -> None:
    status = decided(command(), {"value": VALUE})
    world = fenced_world(status, run=journaled_run())
    assert world.run is not None and world.run.status.pinned is not None
    slot = world.slot.model_copy(update={"status": status})
    body = attemptobjects.pod_body(slot=slot, pins=world.run.status.pinned,
                                   launch_spec=f.CPU_SPEC.spec, pinned=f.PINNED, attempt=2,
                                   owner_actor="alice", tenant=f.TENANT)
    volume = next(v for v in body["spec"]["volumes"] if v["name"] == "agentrun-a-plan")
    assert volume["configMap"] == {"name": CONFIGMAP, "optional": True, "items": [
        {"key": "value", "path": names.ANSWERS_FILE}]}
    mounts = body["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "agentrun-a-plan", "readOnly": True,
            "mountPath": f"{names.ANSWERS_MOUNT_ROOT}/plan"} in mounts


@pytest.mark.parametrize(("annotations", "data", "predicate", "words"), [
    (command(), None, Predicate.MALFORMED, "does not hold"),
    (command(), {"other": VALUE}, Predicate.MALFORMED, "does not hold"),
    (command(), {"value": VALUE + " "}, Predicate.MALFORMED, "does not hold"),
    (command(value_from=f"{CONFIGMAP}/value@sha256:" + hashlib.sha256(
        ('"' + "v" * bounds.ANSWER_FILE_BYTES + '"').encode()).hexdigest()),
     {"value": '"' + "v" * bounds.ANSWER_FILE_BYTES + '"'}, Predicate.MALFORMED,
     "is over 65536 bytes"),
    (command(value="true"), {"value": VALUE}, Predicate.MALFORMED, "exactly one of the two"),
    (command(value_from=f"{CONFIGMAP}/value@sha256:" + hashlib.sha256(b'{"approved": 1}')
             .hexdigest()), {"value": '{"approved": 1}'}, Predicate.ANSWER_INVALID,
     "is not of type 'boolean'"),
    (command(value_from=f"agentrun-config-x/value@sha256:{SHA}"), {"value": VALUE},
     Predicate.MALFORMED, "must name this command's own ConfigMap"),
    (command(value_from=f"{CONFIGMAP}/value@sha256:{SHA[:10]}"), {"value": VALUE},
     Predicate.MALFORMED, "does not hold"),
], ids=["missing", "no-key", "other-bytes", "too-large", "both-ways", "schema", "another-cm",
        "short-digest"])
def test_a_bad_reference_is_refused_and_changes_nothing(
        annotations: dict[str, str], data: dict[str, str] | None, predicate: Predicate,
        words: str) -> None:
    before = asked_status()
    status = decided(annotations, data)
    entry = status.commands[-1]
    assert (entry.outcome, entry.predicate) == ("Rejected", predicate)
    assert words in entry.message
    assert status.questions == before.questions


def test_a_wrong_key_is_said_before_the_reference_is_read() -> None:
    """The question's checks come first, as for any answer: the missing ConfigMap is not
    the news for an answer to a key nobody asked."""
    annotations = {**command(), names.ANSWER_KEY: "other"}
    entry = decided(annotations, None).commands[-1]
    assert entry.predicate is Predicate.NO_PENDING_QUESTION


def test_a_run_without_a_journal_takes_no_answer_by_reference() -> None:
    entry = decided(command(), {"value": VALUE}, journal=False).commands[-1]
    assert (entry.outcome, entry.predicate) == ("Rejected", Predicate.MALFORMED)
    assert "has no journal" in entry.message


def test_an_answer_by_reference_is_kept_over_older_answers_when_room_is_made() -> None:
    """Room is made by dropping what carries no answer first: one by reference carries one."""
    answered = decided(command(), {"value": VALUE})
    big = answered.questions[0]
    others = [big.model_copy(update={"key": f"q{n}", "value_from": None, "value": "true",
                                     "attempt": 1}) for n in range(3)]
    full = answered.model_copy(update={"questions": [*others[:1], big, *others[1:]]})
    new = big.model_copy(update={"key": "next", "state": QuestionState.PENDING,
                                 "value_from": None, "attempt": 2})
    kept = questionrecords.observed(full, asked=[new]).questions
    assert big in kept and others[0] not in kept
