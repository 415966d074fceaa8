"""Reassign: reopen a RetryWait slot, optionally on another worker class.

The design, with its reasons: docs/design/commands-and-trust.md.

Accepted only if every predicate holds; the first that fails, in this order, is the one
reported (the ledger's ``predicate``):

1. ``WrongTenant``: the command names a tenant other than the namespace's (checked for
   every kind by :func:`agentrun.core.commands.guards.decide`);
2. ``WrongRun``: the command's run is not the slot's run (a missing run is wrong too);
3. ``NotRetryWait``: the slot is not in RetryWait;
4. ``Held``: the slot is held;
5. ``PriorNotTerminal``: the prior attempt's pod or lease is not terminal;
6. ``BlankReason``: the reason is empty, blank, or longer than 1 KiB;
7. ``NotOwner``: the prior attempt records an owner actor, the command's actor differs,
   and the actor has no ``override``;
8. ``AttemptLimitReached``: the slot has used ``bounds.MAX_ATTEMPT_NUMBER`` attempts;
9. ``UnknownWorkerClass`` / ``NoCompatibleLaunchSpec`` (on apply): no LaunchSpec can serve
   the requested worker class for this run and node.
"""

from __future__ import annotations

from agentrun.api import names
from agentrun.api.slots import CommandKind, Predicate, SlotState
from agentrun.core.commands import fields, ledger
from agentrun.core.commands.ledger import Context, Decision, Failure
from agentrun.core.commands.spec import CommandSpec
from agentrun.core.launchspecs import launchpins, selection
from agentrun.core.machine import transitions


def check(context: Context) -> Failure | None:
    """The first failed predicate from WrongRun to the attempt limit (classes on apply)."""
    command, slot, prior = context.command, context.slot, context.prior
    status = slot.status
    name = slot.metadata.name
    wrong = ledger.wrong_run(command, slot=slot, annotation="agentrun.dev/reassign-run")
    if wrong is not None:
        return wrong
    if status.state is not SlotState.RETRY_WAIT:
        return (Predicate.NOT_RETRY_WAIT,
                f"slot {name!r} is {status.state}, not RetryWait: only a slot whose last "
                "attempt ended can be reassigned")
    if transitions.is_held(status):
        return (Predicate.HELD,
                f"slot {name!r} is held; release it (agentrun.dev/release-id) first")
    live = ledger.prior_live(status, prior=prior)
    if live is not None:
        return live
    if ledger.is_blank(command.reason):
        return (Predicate.BLANK_REASON,
                "the reason (agentrun.dev/reassign-reason) must be non-blank and at most "
                f"{names.MAX_REASON_BYTES} bytes")
    refused = ledger.owner_of(status, status.prior_worker).refusal(
        command, whose="the prior attempt", what="reassign it")
    if refused is not None:
        return refused
    return ledger.attempt_limit(status, name=name)


def apply(context: Context) -> Decision:
    """Choose a LaunchSpec for the class (rejected when none serves), pin it, reopen."""
    command, slot, now = context.command, context.slot, context.now
    status = slot.status
    worker_class = command.worker_class or status.worker_class or slot.spec.worker_class
    chosen = selection.select(specs=context.launch_specs, namespace=slot.metadata.namespace,
                              run=slot.spec.run, node=slot.spec.node, worker_class=worker_class)
    if isinstance(chosen, selection.NoChoice):
        return ledger.reject(command=command, status=status, predicate=chosen.predicate,
                             message=chosen.message, now=now)
    pinned = launchpins.pin(run=slot.spec.run, choice=chosen)
    message = (f"reassigned by {command.actor} to worker class {worker_class!r} "
               f"({chosen.reason}); reason: {command.reason}; the next claim creates "
               f"attempt {status.attempt_count + 1}")
    new, event = ledger.accept(command=command, status=status, message=message,
                               reason="Reassigned", now=now)
    new = ledger.overridden(new, command=command, owner=ledger.owner_of(status,
                                                                        status.prior_worker))
    new = transitions.reopen(new, worker_class=worker_class, launch_spec=pinned,
                             owner_actor=command.actor, message=message, now=now)
    return Decision(accepted=True, status=new, event=event, choice=chosen)


SPEC = CommandSpec(
    kind=CommandKind.REASSIGN, word="reassign", check=check, apply=apply, shown=1,
    selects=True, opens=True,
    help="reopen a RetryWait slot, optionally on another class",
    takes=(fields.REASON, fields.WORKER_CLASS, fields.RUN, fields.TENANT),
    flag_order=("worker_class", "reason", "tenant"), owner="prior",
    state=("variables.state == 'RetryWait' && !variables.held",
           "only a RetryWait slot, not held, whose last attempt ended can be reassigned"),
    examples=("kubectl agentrun reassign study-research-1a2b3c4d --class gpu \\",
              '    --reason "the cpu worker ran out of memory twice"'))
