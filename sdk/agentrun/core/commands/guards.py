"""The guard: every command decided by its kind's spec.

The design, with its reasons: docs/design/commands-and-trust.md and
docs/design/command-registry.md.

A *command* is a set of annotations a person put on a Slot, with the *actor* stamped by
admission from the authenticated user (never from the person's text) and ``override``
meaning that actor holds the RBAC verb ``override`` on ``slots`` (stamped too, decided by
the API server's authorizer with the requester's groups). The *ledger*
(``status.commands``) records every decision by request id; a request id already there
is a no-op (``Duplicate``), so a crash between the status write and the annotation
removal can never apply a command twice or flip a rejection into an acceptance.

:func:`decide` answers what is the same for every kind (a duplicate; then ``WrongTenant``,
when the command names a tenant other than the namespace's) and leaves the rest to the
kind's spec in :data:`agentrun.core.commands.registry.COMMANDS`: its ``check`` (the first
failed predicate, in the order its module documents) and, when none fails, its ``apply``.

The decision is data: the exact new status, one Event, and (when accepted) the chosen
LaunchSpec to snapshot. A decision never creates an attempt.

The ledger's vocabulary (:class:`Command`, :class:`Decision`, :func:`reject`, ...) lives in
:mod:`.ledger`, below the per-command modules; it is named here too, where the slot's
steps and the tests have always found it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from agentrun.api.launchspecs import LaunchSpec
from agentrun.api.slots import Predicate, Slot
from agentrun.core.commands import ledger, registry
from agentrun.core.commands.ledger import Command as Command
from agentrun.core.commands.ledger import Decision as Decision
from agentrun.core.commands.ledger import Prior as Prior
from agentrun.core.commands.ledger import attempt_limit as attempt_limit
from agentrun.core.commands.ledger import claim_accepted as claim_accepted
from agentrun.core.commands.ledger import is_blank as is_blank
from agentrun.core.commands.ledger import reject as reject
from agentrun.core.commands.ledger import seen as seen


def decide(
    *, command: Command, slot: Slot, tenant: str | None, prior: Prior | None,
    launch_specs: Iterable[LaunchSpec], now: datetime, creator: str | None = None,
    referenced: Mapping[str, Mapping[str, str] | None] | None = None,
    journaled: bool = True,
    commits: Mapping[str, tuple[tuple[int, int, int], ...]] | str | None = None,
    journal_gone: str | None = None, deadline_passed: bool = False,
) -> Decision:
    """Decide any command by its kind's spec (see the module docstring).

    ``prior`` may be None only when the slot has no prior worker; ``creator``: the run's
    verified creator (an approval's separation of duties), None when it has none;
    ``referenced``: the ConfigMaps the command names by reference, read (name -> data);
    ``journaled``: the run has a journal; ``commits``: where the records a rerun names
    were committed, by key (or why that could not be read); ``journal_gone``: why the
    run's journal cannot be read back at all; ``deadline_passed``: the run's
    ``activeDeadlineSeconds`` has passed (nothing in it runs again).
    """
    status = slot.status
    if seen(status, command.request_id) is not None:
        return Decision(accepted=False, duplicate=True, predicate=Predicate.DUPLICATE,
                        status=status)
    context = ledger.Context(command=command, slot=slot, prior=prior,
                             launch_specs=launch_specs, now=now, creator=creator,
                             referenced=referenced or {}, journaled=journaled,
                             commits=commits, journal_gone=journal_gone,
                             deadline_passed=deadline_passed)
    spec = registry.BY_KIND[command.kind]
    failed = ledger.tenancy(command, slot=slot, tenant=tenant) or spec.check(context)
    if failed:
        return reject(command=command, status=status, predicate=failed[0], message=failed[1],
                      now=now)
    return spec.apply(context)
