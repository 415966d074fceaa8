"""Whether a command's stamped actor can be believed: stamping *epochs*.

The argument for it: docs/design/commands-and-trust.md.

Admission stamps a command's actor only while the MutatingAdmissionPolicy
``agentrun-stamp-actors`` and its binding are in force as shipped. Neither the existence of
those objects now nor the time a command was written proves that they were in force when
it was written, so the operator keeps a record instead: the Secret
``agentrun-stamping`` in the operator's namespace holds a random 128-bit *epoch* and the uid and
generation of the policy and of the binding it was minted for. The binding passes that
Secret to the policy as its params (``parameterNotFoundAction: Deny``), and the policy
stamps ``<kind>-epoch`` with the epoch next to the actor.

A command is trusted only if (1) it carries a stamped actor and epoch, (2) its epoch is
the current one, and (3) quorum reads made *after* the command was read find the policy
and the binding as shipped with the uid and generation recorded with the epoch. Then
both existed, unchanged, from the minting to after the write: uids are never reused and
every spec change bumps the generation. An epoch is minted only when both have been
found as shipped, with the same identity, for :data:`ENFORCEMENT_DELAY_SECONDS`, so every
API server enforces them by then; any change makes the record stale until a new epoch is
minted, and commands stamped under the old one are refused (``StaleEpoch``).

Everything here is pure: the reads and the Secret write are :mod:`agentrun.kube`'s.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from agentrun.api import names
from agentrun.api.slots import Predicate
from agentrun.core.commands import parsing
from agentrun.core.policies import admission

Object = dict[str, Any]
ENFORCEMENT_DELAY_SECONDS = 5.0
EPOCH_BYTES = 16
POLICY_KEY, BINDING_KEY = "policy", "binding"
AGAIN = "; re-send it with a new request id"
INSTALL = "re-apply manifests/admission (make install)"


@dataclass(frozen=True, kw_only=True)
class Identity:
    """The uid and generation of the live policy and binding: what an epoch records."""

    policy: str  # "<uid>/<generation>"
    binding: str

    @classmethod
    def of(cls, *, policy: Object, binding: Object) -> Identity:
        def text(obj: Object) -> str:
            meta = obj.get("metadata") or {}
            return f"{meta.get('uid', '')}/{meta.get('generation', 0)}"
        return cls(policy=text(policy), binding=text(binding))


@dataclass(frozen=True, kw_only=True)
class Stamping:
    """What reads made after reading a command say about stamping now.

    ``epoch``: the current epoch, as the policy stamps it (the Secret's ``data.epoch``
    text), when the policy and binding are as shipped and as recorded with it; else None
    and ``problem`` says why in words a person can act on. ``identity``: the live policy and
    binding when both are as shipped (what a new epoch would record), else None.
    ``secret_version``: the Secret's resourceVersion (None: no Secret), the precondition
    of the next minting.
    """

    epoch: str | None
    problem: str | None
    identity: Identity | None = None
    secret_version: str | None = None

    @property
    def mint_needed(self) -> bool:
        """Policy and binding are as shipped but the Secret records no epoch for them."""
        return self.epoch is None and self.identity is not None


def _decoded(secret: Object, key: str) -> str | None:
    raw = (secret.get("data") or {}).get(key)
    if not isinstance(raw, str):
        return None
    try:
        return base64.b64decode(raw, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


def assess(*, policy: Object | None, binding: Object | None, secret: Object | None,
           namespace: str) -> Stamping:
    """Is stamping in force now, under which epoch? (quorum reads of the three objects;
    ``namespace``: the operator's, where the binding must find the Secret)."""
    kinds = (("MutatingAdmissionPolicy", policy, admission.stamp_policy_spec()),
             ("MutatingAdmissionPolicyBinding", binding,
              admission.stamp_binding_spec(namespace=namespace)))
    problems = []
    for kind, found, shipped in kinds:
        if found is None:
            problems.append(f"the {kind} {names.STAMP_POLICY} is missing; {INSTALL}")
        elif found.get("spec") != shipped:
            problems.append(f"the {kind} {names.STAMP_POLICY} is not as shipped (it was "
                            f"edited); {INSTALL}")
    if problems or policy is None or binding is None:
        return Stamping(epoch=None, problem="actors cannot be verified: " + "; ".join(problems))
    identity = Identity.of(policy=policy, binding=binding)
    where = f"{namespace}/{names.STAMPING_SECRET}"
    if secret is None:
        return Stamping(epoch=None, identity=identity, problem=(
            f"actors cannot be verified yet: the stamping epoch Secret {where} does not exist; "
            f"the running operator mints it {ENFORCEMENT_DELAY_SECONDS:g}s after it finds the "
            "policy and its binding as shipped"))
    version = (secret.get("metadata") or {}).get("resourceVersion")
    epoch = (secret.get("data") or {}).get(admission.EPOCH_KEY)
    recorded = Identity(policy=_decoded(secret, POLICY_KEY) or "",
                        binding=_decoded(secret, BINDING_KEY) or "")
    if not isinstance(epoch, str) or not epoch or recorded != identity:
        return Stamping(epoch=None, identity=identity, secret_version=version, problem=(
            f"actors cannot be verified yet: the policy or its binding changed since the "
            f"current stamping epoch was minted (recorded {recorded.policy} and "
            f"{recorded.binding}, found {identity.policy} and {identity.binding}); the "
            f"running operator mints a new epoch {ENFORCEMENT_DELAY_SECONDS:g}s after it "
            "finds them unchanged"))
    return Stamping(epoch=epoch, problem=None, identity=identity, secret_version=version)


def secret_body(*, epoch: bytes, identity: Identity, resource_version: str | None,
                namespace: str) -> Object:
    """The Secret recording a freshly minted ``epoch`` (random bytes) for ``identity``,
    in the operator's ``namespace``."""
    def encoded(text: str) -> str:
        return base64.b64encode(text.encode()).decode()
    metadata: Object = {"name": names.STAMPING_SECRET, "namespace": namespace,
                        "labels": {"app.kubernetes.io/name": "agentrun-operator"}}
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": metadata,
            "data": {admission.EPOCH_KEY: encoded(epoch.hex()),
                     POLICY_KEY: encoded(identity.policy),
                     BINDING_KEY: encoded(identity.binding)}}


@dataclass(frozen=True, kw_only=True)
class Refusal:
    predicate: Predicate
    reason: str  # the CommandsRefused condition's reason, when stamping is not in force
    message: str
    not_in_force: bool = False


def refusal(pending: parsing.Pending, stamping: Stamping | None) -> Refusal | None:
    """Why a command's stamped actor cannot be believed, or None when it can."""
    command = pending.command
    return refusal_of(what=f"{command.kind} {command.request_id}", stamped=pending.stamped,
                      epoch=pending.epoch, stamping=stamping)


def refusal_of(*, what: str, stamped: bool, epoch: str | None,
               stamping: Stamping | None) -> Refusal | None:
    """Why the stamped actor of the command ``what`` (stamped with ``epoch``, if at all)
    cannot be believed, or None when it can (a slot's command, or a run's)."""
    if stamping is None or stamping.epoch is None:
        problem = stamping.problem if stamping else "stamping was not checked"
        return Refusal(predicate=Predicate.COMMANDS_REFUSED, reason="StampingNotInForce",
                       message=f"{what} refused: {problem}{AGAIN} once it is in force",
                       not_in_force=True)
    if not stamped or epoch is None:
        return Refusal(predicate=Predicate.UNSTAMPED, reason="Unstamped", message=(
            f"{what} carries no actor and epoch stamped by admission (it was written while "
            f"stamping was not in force), so its actor is not verified{AGAIN}"))
    if epoch != stamping.epoch:
        return Refusal(predicate=Predicate.STALE_EPOCH, reason="StaleEpoch", message=(
            f"{what} was stamped under an earlier stamping epoch (the admission policy, its "
            f"binding or the epoch changed since it was written), so its actor is not "
            f"verified{AGAIN}"))
    return None
