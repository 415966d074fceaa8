"""``controller.stamping.Keeper``: when the operator mints an epoch (no cluster).

Covers: nothing is minted while stamping is in force, or while policy or binding is
missing or edited; a mint waits until the same identity has been seen for the whole
enforcement delay (a new identity restarts the wait); the Secret is written with the
identity and the resourceVersion read (the precondition), a fresh 128-bit epoch each
time; a conflict (another operator minted first) is not an error, nor is the fence's
refusal (the command run in a standby's pod: the leader mints), while any other refusal
is raised.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentrun.controller import stamping as keeping
from agentrun.core.policies import stamping
from agentrun.kube import writes

ONE = stamping.Identity(policy="p-1/1", binding="b-1/1")
TWO = stamping.Identity(policy="p-1/2", binding="b-1/1")


@dataclass
class Reader:
    found: stamping.Stamping
    operator_namespace: str = "agentrun-ops"  # where the Secret is minted (not the default)

    def stamping(self) -> stamping.Stamping:
        return self.found


@dataclass
class Writer:
    bodies: list[dict[str, Any]] = field(default_factory=list)
    conflict: bool = False
    refused: str | None = None  # a 403's message

    def stamping_secret(self, body: dict[str, Any]) -> None:
        if self.conflict:
            raise writes.Conflict("someone else minted")
        if self.refused is not None:
            raise writes.Rejected(403, self.refused)
        self.bodies.append(body)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def keeper(found: stamping.Stamping, writer: Writer, clock: Clock) -> keeping.Keeper:
    return keeping.Keeper(reader=Reader(found), writer=writer,  # type: ignore[arg-type]
                          logger=logging.getLogger("test"), clock=clock)


def needing(identity: stamping.Identity, version: str | None = "7") -> stamping.Stamping:
    return stamping.Stamping(epoch=None, problem="changed", identity=identity,
                             secret_version=version)


def test_nothing_is_minted_in_force_or_without_the_shipped_objects() -> None:
    writer, clock = Writer(), Clock()
    for found in (stamping.Stamping(epoch="ZQ==", problem=None, identity=ONE),
                  stamping.Stamping(epoch=None, problem="the policy is missing")):
        subject = keeper(found, writer, clock)
        for _ in range(3):
            subject.check()
            clock.now += 10
    assert writer.bodies == []


def test_a_mint_waits_for_the_same_identity_over_the_whole_delay() -> None:
    writer, clock = Writer(), Clock()
    subject = keeper(needing(ONE), writer, clock)
    subject.check()  # first sight: the wait starts
    clock.now += stamping.ENFORCEMENT_DELAY_SECONDS - 0.1
    subject.check()
    assert writer.bodies == []
    subject.reader = Reader(needing(TWO))  # type: ignore[assignment]
    clock.now += 1.0
    subject.check()  # another identity: the wait starts again
    clock.now += stamping.ENFORCEMENT_DELAY_SECONDS - 0.1
    subject.check()
    assert writer.bodies == []
    clock.now += 0.1
    subject.check()
    (body,) = writer.bodies
    assert body["metadata"]["resourceVersion"] == "7"
    recorded = {k: base64.b64decode(v).decode() for k, v in body["data"].items()}
    assert (recorded["policy"], recorded["binding"]) == ("p-1/2", "b-1/1")
    assert len(bytes.fromhex(recorded["epoch"])) == stamping.EPOCH_BYTES


def test_each_mint_is_a_fresh_epoch_and_a_conflict_is_no_error() -> None:
    writer, clock = Writer(), Clock()
    epochs = []
    for identity in (ONE, TWO):
        subject = keeper(needing(identity, version=None), writer, clock)
        subject.check()
        clock.now += stamping.ENFORCEMENT_DELAY_SECONDS
        subject.check()
        epochs.append(writer.bodies[-1]["data"]["epoch"])
        assert "resourceVersion" not in writer.bodies[-1]["metadata"]  # create, no Secret
        assert writer.bodies[-1]["metadata"]["namespace"] == "agentrun-ops"
    assert epochs[0] != epochs[1]
    busy = keeper(needing(ONE), Writer(conflict=True), clock)
    busy.check()
    clock.now += stamping.ENFORCEMENT_DELAY_SECONDS
    assert busy.check().epoch is None  # read again on the next pass


def test_a_fenced_pod_leaves_the_mint_to_the_leader_and_other_refusals_are_raised() -> None:
    clock = Clock()
    fenced = keeper(needing(ONE), Writer(refused="fenced: pod b is not the leader"), clock)
    fenced.check()
    clock.now += stamping.ENFORCEMENT_DELAY_SECONDS
    assert fenced.check().epoch is None  # waits: the leader mints
    forbidden = keeper(needing(ONE), Writer(refused="secrets is forbidden"), clock)
    forbidden.check()
    clock.now += stamping.ENFORCEMENT_DELAY_SECONDS
    with pytest.raises(writes.Rejected):
        forbidden.check()
