"""Every command there is, in the order pending ones are decided: the one list to extend.

A command is one module (:mod:`.kinds.reassign`, :mod:`.kinds.claim`, ...) whose ``SPEC``
(:class:`~agentrun.core.commands.spec.CommandSpec`) declares its kind, the resource it is
sent to, its annotations and their bounds, its Python check and apply, and its admission
fragments. Everything that used to compare kinds iterates :data:`COMMANDS` instead: the
guard (:func:`.guards.decide`), the pending-command parser (:mod:`.parsing`), the
generated admission and stamping policies (:mod:`agentrun.core.policies`), the plugin's
requests and help (:mod:`agentrun.plugin`) and the bad-input matrix in the tests. A new
command is its module, one line here, and its tests (plus its
:class:`~agentrun.api.slots.CommandKind` member: the ledger's ``kind`` is part of the API,
below the core).

The order matters twice: a slot with several pending commands has the first one decided
first, and the generated policies list the commands' checks and stampings in this order
(the shipped manifests are compared byte for byte).

Values too large for an annotation (a design decision, docs/design/command-registry.md).
Every command value today fits an annotation: the largest is resolve-effect's result,
:data:`agentrun.api.bounds.RESOLVE_RESULT_BYTES`, and a Slot's annotations together are
bounded by the API server (256 KiB). Commands to come may need more: such a value never
travels in an annotation. The command's annotation
carries a *reference*, bounded like any field (a ConfigMap's name in the same namespace
and the key in it, plus the ``sha256`` digest of the value the person meant), and the
operator reads the ConfigMap once, when it decides the command: a referenced object that
is missing, larger than the field's declared byte bound, or whose bytes do not match the
digest is ``Malformed``, never guessed, and a later edit of the ConfigMap cannot change a
decided command. What the operator keeps of it (in the ledger or the object's status) is
clipped to its own bound, as every field is. Admission checks the reference's shape (name
and digest patterns); it cannot read the ConfigMap, so the size and digest checks are the
operator's. Such a field declares its reference form and byte bound in its
:class:`~agentrun.core.commands.spec.Field`, so the parser, the plugin (which writes the
ConfigMap first, then the command) and the bad-input matrix learn it from the registry.
"""

from __future__ import annotations

from collections.abc import Mapping

from agentrun.api.slots import CommandKind
from agentrun.core.commands.kinds import (
    answer,
    approve,
    claim,
    deny,
    giveup,
    hold,
    reassign,
    release,
    rerun,
    resolveeffect,
)
from agentrun.core.commands.spec import BUDGET, CommandSpec, Field, RunCommandKeys

COMMANDS: tuple[CommandSpec, ...] = (
    reassign.SPEC,
    resolveeffect.SPEC,
    answer.SPEC,
    approve.SPEC,
    deny.SPEC,
    rerun.SPEC,
    claim.SPEC,
    hold.SPEC,
    release.SPEC,
    giveup.SPEC,
)
# Commands sent to a run (``core.runs.runcommands``: the budget raise): their annotations,
# derived from their word as a slot command's are, stamped by the same policy.
RUN_COMMANDS: tuple[RunCommandKeys, ...] = (BUDGET,)
BY_KIND: Mapping[CommandKind, CommandSpec] = {spec.kind: spec for spec in COMMANDS}
BY_WORD: Mapping[str, CommandSpec] = {spec.word: spec for spec in COMMANDS}
# Every field any command takes, by name (first declaration wins: a field is shared whole).
FIELDS: Mapping[str, Field] = {f.name: f for spec in reversed(COMMANDS) for f in spec.takes}
