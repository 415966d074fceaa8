"""Rerun: redo a slot's work on purpose, from a committed step (or its start).

The design, with its reasons: docs/design/reruns.md.

Accepted only if every predicate holds; the first that fails, in this order, is the one
reported (the ledger's ``predicate``), after ``WrongTenant`` (every kind's):

1. ``WrongRun``: the command's run is not the slot's run;
2. ``NotRerunnable``: the slot is not RetryWait, Succeeded or Failed (an attempt may be
   under way: Pending, Ready, Claiming and Active slots are not rerun), or the run's
   ``activeDeadlineSeconds`` has passed (it would be failed again at once);
3. ``Held``: the slot is held;
4. ``PriorNotTerminal``: the prior attempt's pod or lease is not terminal (exactly as for
   a reassignment: no attempt can be live);
5. ``EffectUnresolved``: a RetryWait slot's effect waits for its owner's answer (resolve
   it first; a finished slot cannot be resolved, so its rerun is accepted and the reopened
   slot's claim waits for the answer, as every claim does);
6. ``QuestionPending``: a question or an approval waits for a person;
7. ``BlankReason``: the reason is empty, blank, or longer than 1 KiB;
8. ``NotOwner``: the prior attempt records an owner actor, the command's actor differs,
   and the actor has no ``override``;
9. ``JournalGone``: the run's journal was deleted, or its retention is deleting it (a
   rerun would start from less than was committed, effects' outcomes included);
   ``StepNotCommitted``: ``from-step`` names a step the slot's recoverable prefix does
   not hold (never committed, or already taken out by an earlier rerun), or the journal
   cannot say (the run has none, it was deleted, its store does not answer);
10. ``RerunLimitReached``: the slot would keep more cuts than
    :data:`agentrun.api.cuts.MAX_CUTS`;
11. with ``resend`` (an applied effect sent again, on purpose): ``BlankReason`` when its own
    reason (``resend-reason``) is missing; ``NoAppliedEffect`` when the prefix holds no
    outcome of it (since it was last sent again); ``RerunLimitReached`` past
    :data:`agentrun.api.cuts.MAX_RESENDS` such effects;
12. ``AttemptLimitReached``: the slot has used every attempt number it may have.

Accepted, the slot is *reopened* (no Pod or Lease until the claim, which the slot's owner
or the automatic policy makes, as after a reassignment) with a new cut: the next
attempt's prefix stops before the step's first commit still standing, in the journal's
commit order (``status.cuts``, carried on its Lease). Its dependents run again after it
(``core.slots.rerunsteps``).
"""

from __future__ import annotations

from agentrun.api import bounds, cuts, names
from agentrun.api.slots import CommandKind, Predicate, QuestionState, SlotState, SlotStatus
from agentrun.core.attempts import effectrecords
from agentrun.core.commands import fields, ledger
from agentrun.core.commands.ledger import Command, Context, Decision, Failure
from agentrun.core.commands.spec import CommandSpec, Field
from agentrun.core.machine import transitions

RERUNNABLE = (SlotState.RETRY_WAIT, SlotState.SUCCEEDED, SlotState.FAILED)
RESEND_SHOWN = 160  # characters of the re-send's reason the ledger's message shows


def check(context: Context) -> Failure | None:
    command, slot, prior = context.command, context.slot, context.prior
    status, name = slot.status, slot.metadata.name
    wrong = ledger.wrong_run(command, slot=slot, annotation=SPEC.fields["run"])
    if wrong is not None:
        return wrong
    if status.state not in RERUNNABLE:
        return (Predicate.NOT_RERUNNABLE,
                f"slot {name!r} is {status.state}: only a RetryWait, Succeeded or Failed "
                "slot is rerun (no attempt of it may be under way)")
    if context.deadline_passed:
        return (Predicate.NOT_RERUNNABLE, "the run's activeDeadlineSeconds has passed: "
                "nothing in it runs again; start a new run")
    if transitions.is_held(status):
        return (Predicate.HELD, f"slot {name!r} is held; release it first")
    live = ledger.prior_live(status, prior=prior)
    if live is not None:
        return live
    opened = effectrecords.open_effects(status)
    if opened and status.state is SlotState.RETRY_WAIT:  # (finished: the claim waits for it)
        return (Predicate.EFFECT_UNRESOLVED,
                f"effect {opened[0].key} waits for its owner's answer: record it "
                "(kubectl agentrun resolve-effect) before the slot is rerun")
    asked = [q.key for q in status.questions if q.state is QuestionState.PENDING]
    if asked:
        return (Predicate.QUESTION_PENDING,
                f"{asked[0]} waits for a person (answer, approve or deny it, or give the "
                "slot up) before the slot is rerun")
    if ledger.is_blank(command.reason):
        return ledger.blank_reason()
    refused = ledger.owner_of(status, status.prior_worker).refusal(
        command, whose="the prior attempt", what="rerun the slot")
    if refused is not None:
        return refused
    if context.journal_gone is not None:
        return (Predicate.JOURNAL_GONE, f"the run's journal {context.journal_gone}: the "
                "work it kept, applied effects included, cannot be read back to rerun from")
    made = cut_of(context)
    if isinstance(made, tuple):
        return made
    if len(made) > cuts.MAX_CUTS:
        return (Predicate.RERUN_LIMIT,
                f"slot {name!r} keeps at most {cuts.MAX_CUTS} separate cuts of its prefix; fork "
                "the run to redo its work again")
    resends = resends_of(context)
    if isinstance(resends, tuple):
        return resends
    return ledger.attempt_limit(status, name=name)


def cut_of(context: Context) -> list[str] | Failure:
    """The slot's cuts with this rerun's added (merged), or why it cannot be cut."""
    command, status = context.command, context.slot.status
    standing = cuts.parse_all(status.cuts)
    start = cuts.START
    if command.from_step is not None:
        found = read(context, command.from_step)
        if isinstance(found, str):
            return (Predicate.STEP_NOT_COMMITTED, f"step {command.from_step!r} cannot be "
                    f"found: {found}")
        first = cuts.earliest(found, cuts=standing)
        if first is None:
            return (Predicate.STEP_NOT_COMMITTED, (
                f"step {command.from_step!r} is not in the slot's recoverable prefix "
                + ("(an earlier rerun took it out)" if found else "(it was never committed)")
                + ": kubectl agentrun history shows the committed steps"))
        start = first
    if status.attempt_count == 0:
        return list(status.cuts)  # nothing committed yet: nothing to take out
    made = cuts.merged((*standing, cuts.Cut(start=start, through=status.attempt_count)))
    return [c.text() for c in made]


def read(context: Context, key: str) -> tuple[cuts.Position, ...] | str:
    """Where ``key`` was committed, or why the journal could not say."""
    found = context.commits
    if isinstance(found, str):
        return found
    if found is None or key not in found:
        return "the journal was not read"
    return found[key]


def resends_of(context: Context) -> list[str] | Failure:
    """The slot's re-sends with this rerun's added (``--resend``), or why not."""
    command, status = context.command, context.slot.status
    if command.resend is None:
        return list(status.resends)
    if ledger.is_blank(command.resend_reason):
        return (Predicate.BLANK_REASON, f"sending effect {command.resend} again needs its own "
                f"reason ({SPEC.fields['resend_reason']}): non-blank, at most "
                f"{bounds.REASON_BYTES} bytes")
    standing = [cuts.Resend.parse(r) for r in status.resends]
    previous = next((r for r in standing if r.key == command.resend), None)
    found = read(context, f"{command.resend}.outcome")
    outcomes = () if isinstance(found, str) else tuple(
        p for p in found if previous is None or p[0] > previous.through)
    if isinstance(found, str):
        return (Predicate.NO_APPLIED_EFFECT, f"cannot tell whether effect {command.resend!r} "
                f"was applied ({found}); nothing is sent again without knowing")
    if not outcomes:
        since = " since it was last sent again" if previous else ""
        return (Predicate.NO_APPLIED_EFFECT, f"effect {command.resend!r} has no outcome in "
                f"this slot's prefix{since}: there is nothing to send again")
    if status.attempt_count >= bounds.MAX_ATTEMPT_NUMBER:  # the attempt limit says it
        return list(status.resends)
    again = cuts.Resend(key=command.resend, through=status.attempt_count,
                        generation=(previous.generation if previous else 1) + 1)
    kept = [r.text() for r in standing if r.key != command.resend]
    if len(kept) + 1 > cuts.MAX_RESENDS:
        return (Predicate.RERUN_LIMIT, f"slot {context.slot.metadata.name!r} keeps at most "
                f"{cuts.MAX_RESENDS} effects sent again; fork the run instead")
    return [*kept, again.text()]


def apply(context: Context) -> Decision:
    command, slot, now = context.command, context.slot, context.now
    status = slot.status
    made, resends = cut_of(context), resends_of(context)
    assert not isinstance(made, tuple) and not isinstance(resends, tuple)
    where = (f"from step {command.from_step}" if command.from_step is not None
             else "from its start")
    # The effect sent again comes first: the ledger keeps 512 characters of the message.
    again = (f", sending effect {command.resend} again as a new effect (generation "
             f"{cuts.Resend.parse(resends[-1]).generation}, a new idempotency key; why: "
             f"{bounds.clip(command.resend_reason or '', limit=RESEND_SHOWN)})"
             if command.resend is not None else "")
    message = (f"rerun {where}{again} by {command.actor}: {command.reason}; the next claim "
               f"creates attempt {status.attempt_count + 1}; earlier records stay in the "
               "history" + ("" if command.resend is not None
                            else "; applied effects are not sent again"))
    new, event = ledger.accept(command=command, status=status, message=message,
                               reason=transitions.RERUN, now=now)
    owner = ledger.owner_of(status, status.prior_worker)
    new = ledger.overridden(new, command=command, owner=owner)
    return Decision(accepted=True, event=event, status=transitions.rerun(
        new, cuts=made, resends=resends, owner_actor=command.actor, message=message, now=now,
        has_dependencies=bool(slot.spec.depends_on)))


FROM_STEP = Field(
    name="from_step", suffix="from-step", label="--from-step", flag="--from-step",
    metavar="KEY", help="the committed step to redo from (default: the slot's start)",
    bound=fields.STEP_KEY_BOUND,
    admission=fields.static(required=False, valid=fields.STEP_KEY_VALID,
                     message="{key} must be a step's key as kubectl agentrun history shows it "
                             "(lower-case letters, digits and '-', at most "
                             f"{bounds.STEP_KEY_CHARS})"))

RESEND = Field(
    name="resend", suffix="resend", label="--resend", flag="--resend", metavar="EFFECT",
    help="send this applied effect again, as a new effect (a new idempotency key, approved "
         "again); needs --resend-reason",
    bound=fields.STEP_KEY_BOUND,
    admission=fields.static(required=False, valid=fields.STEP_KEY_VALID,
                            message="{key} must be an effect's key as status and the "
                                    "history show it (lower-case letters, digits and '-', at "
                                    f"most {bounds.STEP_KEY_CHARS})"))
RESEND_REASON = Field(
    name="resend_reason", suffix="resend-reason", label="--resend-reason",
    flag="--resend-reason", help="why the effect is sent again (recorded)",
    bound=fields.REASON.bound,
    admission=fields.static(required=False, valid=f"bytes({{value}}).size() <= "
                            f"{bounds.REASON_BYTES} && {{value}}.trim().size() > 0",
                            message=f"{{key}} must say why the effect is sent again: "
                                    f"non-blank, at most {bounds.REASON_BYTES} bytes"))


def _journal_keys(command: Command, status: SlotStatus) -> tuple[str, ...]:
    """What deciding it reads in the journal: nothing when a cheap check refuses it first
    (a slot not rerunnable or held, an actor who does not own it): a long journal is not
    walked for a command that is refused anyway."""
    if status.state not in RERUNNABLE or transitions.is_held(status) or ledger.owner_of(
            status, status.prior_worker).refusal(command, whose="", what="") is not None:
        return ()
    return (*((command.from_step,) if command.from_step else ()),
            *((f"{command.resend}.outcome",) if command.resend else ()))


SPEC = CommandSpec(
    kind=CommandKind.RERUN, word="rerun", check=check, apply=apply, shown=10, opens=True,
    help="redo the slot's work from a committed step (or its start); its dependents follow",
    takes=(FROM_STEP, fields.REASON, fields.RUN, fields.TENANT, RESEND, RESEND_REASON),
    owner="prior", journal_keys=_journal_keys,
    admission=((f"('{names.GROUP}/rerun-resend' in variables.new) == "
                f"('{names.GROUP}/rerun-resend-reason' in variables.new)",
                "an effect is sent again (rerun-resend) only with its own reason "
                "(rerun-resend-reason), and a reason only with the effect"),),
    state=("variables.state in ['RetryWait', 'Succeeded', 'Failed'] && !variables.held",
           "only a RetryWait, Succeeded or Failed slot, not held, can be rerun"),
    examples=("kubectl agentrun rerun study-draft-1a2b3c4d --from-step outline \\",
              '    --reason "the outline missed the second source"'))
