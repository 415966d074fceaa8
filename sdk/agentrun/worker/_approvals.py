"""Approvals at the sender: an effect is sent only once people approved its exact payload.

    worker.effect("publish", key="publish", payload=report, approvers=2,
                  call=lambda idem, token: blog.publish(report, key=idem, token=token))

An effect *requires approval* when the worker says so (``approvers=N``) or the LaunchSpec
does (``spec.approvals``, given to the pod as ``AGENTRUN_APPROVALS``): a floor the worker
cannot lower, only raise. Then, before its intent, :meth:`Approvals.require`:

- finds the people's decision on this attempt's Lease (``<key>.approved``, written by the
  operator from the approve and deny commands) *for this very payload*: its *digest*, the
  sha256 of the payload's canonical JSON (:func:`payload_digest`: sorted keys, no spaces,
  UTF-8). Approved: the effect goes on (its intent records the digest and how many
  approved). Denied: :class:`EffectDenied`, and it is never sent;
- else asks: it commits the payload itself as ``<key>.payload`` (to the journal, where an
  approver reads the exact bytes, ``kubectl agentrun history <slot> --record
  <key>.payload``, and checks the digest), then the request ``<key>.approval`` on the
  attempt's own Lease (the effect, its owner, the digest, a bounded view of the payload
  with the ``redact``-ed top-level fields hidden, and the approvers needed), and raises
  :class:`ApprovalRequested`: a :class:`~agentrun.worker._questions.QuestionAsked`, which
  should end the attempt. No pod waits while people decide.

A successor that computes other arguments has another digest: the earlier decision does
not count for it, and it asks again. What the SDK enforces is the sender's side; the
effect's owner can check (key, digest, approval) itself from what it receives.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentrun.api import bounds, names
from agentrun.worker import _prefix as prefix
from agentrun.worker import _records as records
from agentrun.worker._questions import QuestionAsked

JSON = records.JSON
PAYLOAD = names.PAYLOAD_SUFFIX  # the record that keeps the exact payload, for approvers
REDACTED = "<redacted>"
VIEW_BYTES = bounds.QUESTION_BYTES - 2 * bounds.EFFECT_NAME_CHARS - 16  # fits the entry


class ApprovalRequested(QuestionAsked):
    """The effect waits for people's approval of its payload: end the attempt; the next
    attempt's effect call goes on once they approved (``digest``: what they approve)."""


class EffectDenied(Exception):
    """People denied the effect's payload (``digest``): it is never sent."""

    def __init__(self, message: str, *, key: str, digest: str) -> None:
        super().__init__(message)
        self.key = key
        self.digest = digest


class ApprovalError(ValueError):
    """An effect that requires approval called without what approval needs."""


def payload_digest(payload: JSON) -> str:
    """The sha256 (hex) of ``payload``'s canonical JSON: what an approval is bound to."""
    return hashlib.sha256(records.canonical(payload)).hexdigest()


def floors(text: str | None) -> dict[str, int]:
    """The LaunchSpec's floors from ``AGENTRUN_APPROVALS`` (``{effect: approvers}``)."""
    if not text:
        return {}
    try:
        found = json.loads(text)
    except ValueError as error:
        raise ApprovalError(f"${names.ENV_APPROVALS} is not JSON: {error}") from None
    if not isinstance(found, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
            and 1 <= v <= bounds.MAX_APPROVERS for k, v in found.items()):
        raise ApprovalError(f"${names.ENV_APPROVALS} must map effect names to 1.."
                            f"{bounds.MAX_APPROVERS} approvers")
    return found


def required(*, name: str, approvers: int, floor: Mapping[str, int]) -> int:
    """How many distinct people must approve effect ``name``: the worker's ``approvers``,
    never fewer than the LaunchSpec's floor."""
    if isinstance(approvers, bool) or not isinstance(approvers, int) or not (
            0 <= approvers <= bounds.MAX_APPROVERS):
        raise ApprovalError(f"effect {name}: approvers must be 0 to {bounds.MAX_APPROVERS}, "
                            f"not {approvers!r}")
    return max(approvers, floor.get(name, 0))


def view(payload: JSON, *, redact: Sequence[str]) -> str:
    """What the slot shows of ``payload``: its canonical JSON with the ``redact``-ed
    top-level fields hidden, clipped to what a slot's entry holds."""
    shown = {k: REDACTED if k in redact else v for k, v in payload.items()} if isinstance(
        payload, dict) else payload
    return bounds.clip_bytes(records.canonical(shown).decode(), limit=VIEW_BYTES)


@dataclass(kw_only=True)
class Approvals:
    """The approvals of one attempt over its ``steps``."""

    steps: prefix.Steps

    def require(self, *, key: str, name: str, owner: str, payload: JSON, approvers: int,
                redact: Sequence[str] = ()) -> dict[str, JSON]:
        """What the intent records of the approval (``payloadDigest``, ``approvals``: how
        many approved, ``required``: how many this call needs), once approved by at least
        ``approvers`` people; else :class:`ApprovalRequested` (asked now) or
        :class:`EffectDenied` (see the module docstring). A decision that counted fewer
        approvers than this call needs (a floor raised since) does not count."""
        digest = payload_digest(payload)
        records.storable(key=f"{key}{PAYLOAD}", payload=payload, store=self.steps.store)
        attempt = self.steps.prefix.attempt
        with self.steps.lock:  # looked up and committed as one (the sidecar's threads share)
            done, found = self.steps.committed(f"{key}{names.APPROVED_SUFFIX}")
            value = found.get("value") if isinstance(found, dict) else None
            if done and isinstance(found, dict) and found.get("digest") == digest and (
                    isinstance(value, dict)):
                count = value.get("approvals")
                if value.get("decision") == "approved" and isinstance(count, int) and (
                        count >= approvers):
                    return {"payloadDigest": digest, "approvals": count, "required": approvers}
                if value.get("decision") == "denied":
                    raise EffectDenied(f"effect {name} ({key}): its payload {digest} was "
                                       f"denied by {found.get('actor') or '?'}; it is not "
                                       "sent", key=key, digest=digest)
            told = (f"effect {name} ({key}) waits for {approvers} approver(s) of payload "
                    f"{digest}; this attempt ends (kubectl agentrun approve)")
            asked = self.steps.prefix.get(f"{key}{names.APPROVAL_SUFFIX}")
            if asked is not None and asked.attempt == attempt:
                raise ApprovalRequested(told, key=key, digest=digest)
            if self.steps.prefix.get(f"{key}{PAYLOAD}") is not None:
                self.steps.repeated.append(f"{key}{PAYLOAD}")  # another payload, asked again
            self.steps.commit(records.make(key=f"{key}{PAYLOAD}", kind=records.Kind.STEP_RESULT,
                                           attempt=attempt, payload=payload,
                                           store=self.steps.store))
            self.steps.commit(records.make(
                key=f"{key}{names.APPROVAL_SUFFIX}", kind=records.Kind.DECISION,
                attempt=attempt, payload={"effect": name, "owner": owner, "digest": digest,
                                          "view": view(payload, redact=redact),
                                          "approvers": approvers}))
        raise ApprovalRequested(told, key=key, digest=digest)
