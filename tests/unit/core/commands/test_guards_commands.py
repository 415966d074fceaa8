"""Hold, release, claim and give up decided by the guards, and the ledger's bound."""

from __future__ import annotations

from agentrun.api import bounds
from agentrun.api.slots import COMMANDS_KEPT, CommandKind, Outcome, Predicate, SlotState, SlotStatus
from agentrun.core.commands import guards
from agentrun.core.machine import transitions
from tests.unit.core import corefakes as f


def command(kind: CommandKind, rid: str = "c1", **kw: object) -> guards.Command:
    return guards.Command(kind=kind, request_id=rid, actor=kw.pop("actor", "alice"), **kw)  # type: ignore[arg-type]


def decide(status: SlotStatus, cmd: guards.Command) -> guards.Decision:
    return guards.decide(command=cmd, slot=f.slot(status), tenant=f.TENANT, prior=None,
                         launch_specs=[], now=f.T0)


def test_hold_and_release_commands() -> None:
    status = f.retry_wait(retry_at=f.T0)
    assert decide(status, command(CommandKind.HOLD, reason=" ")).predicate is Predicate.BLANK_REASON
    held = decide(status, command(CommandKind.HOLD, reason="investigate")).status
    assert transitions.is_held(held)
    assert not transitions.is_claimable(held, now=f.T0, claim_policy="Automatic")
    released = decide(held, command(CommandKind.RELEASE, "c2")).status
    assert not transitions.is_held(released)
    assert transitions.is_claimable(released, now=f.T0, claim_policy="Automatic")
    assert [c.request_id for c in released.commands] == ["c1", "c2"]


def test_manual_claim_command() -> None:
    ready = SlotStatus(state=SlotState.READY, worker_class="cpu", launch_spec=f.PINNED)
    assert not transitions.is_claimable(ready, now=f.T0, claim_policy="Manual")
    decision = decide(ready, command(CommandKind.CLAIM, actor="carol"))
    assert decision.accepted and decision.status.next_owner_actor == "carol"
    active = transitions.finish_claim(
        transitions.start_claim(decision.status, slot=f.SLOT, now=f.T0), now=f.T0)
    assert active.attempts[-1].owner_actor == "carol"
    again = decide(active, command(CommandKind.CLAIM, "c2"))
    assert again.predicate is Predicate.NOT_CLAIMABLE


def test_give_up_command() -> None:
    active = transitions.finish_claim(transitions.start_claim(
        f.retry_wait(owner="bob", retry_at=f.T0), slot=f.SLOT, now=f.T0), now=f.T0)
    # The live attempt was claimed with no owner (a run without a verified creator): no one
    # owns it, so only override may end it.
    stranger = decide(active, command(CommandKind.GIVE_UP, reason="stop"))
    assert stranger.predicate is Predicate.NOT_OWNER
    assert "owned by no one" in stranger.status.commands[-1].message
    decision = decide(active, command(CommandKind.GIVE_UP, reason="stop", override=True))
    assert decision.accepted
    assert decision.status.state is SlotState.FAILED
    assert decision.status.attempts[-1].outcome is Outcome.GAVE_UP
    assert decision.status.prior_worker == f"{f.SLOT}-2" and decision.status.active_worker is None
    done = decide(decision.status, command(CommandKind.GIVE_UP, "c2", reason="again"))
    assert done.predicate is Predicate.NOT_RETRY_WAIT
    assert decide(active, command(CommandKind.GIVE_UP, "c3", reason="")).predicate is (
        Predicate.BLANK_REASON)
    wrong = decide(active, command(CommandKind.HOLD, "c4", reason="x", tenant="globex"))
    assert wrong.predicate is Predicate.WRONG_TENANT


def test_give_up_is_owner_checked() -> None:
    owned = f.retry_wait(owner="bob")
    assert decide(owned, command(CommandKind.GIVE_UP, reason="x")).predicate is Predicate.NOT_OWNER
    assert decide(owned, command(CommandKind.GIVE_UP, reason="x", actor="bob")).accepted


def test_ledger_keeps_the_last_commands() -> None:
    status = f.retry_wait()
    for i in range(COMMANDS_KEPT + 5):
        status = decide(status, command(CommandKind.HOLD, f"h{i}", reason="r")).status
    assert len(status.commands) == COMMANDS_KEPT
    assert status.commands[0].request_id == "h5"


def test_a_give_up_by_override_of_another_persons_attempt_is_marked_in_the_ledger() -> None:
    owned = transitions.finish_claim(transitions.start_claim(
        f.retry_wait(owner="bob", retry_at=f.T0), slot=f.SLOT, now=f.T0), now=f.T0)
    owned = owned.model_copy(update={"attempts": [
        *owned.attempts[:-1], owned.attempts[-1].model_copy(update={"owner_actor": "bob"})]})
    by_admin = decide(owned, command(CommandKind.GIVE_UP, reason="stuck", override=True))
    assert by_admin.accepted and by_admin.status.commands[-1].override is True
    by_owner = decide(owned, command(CommandKind.GIVE_UP, reason="stuck", actor="bob"))
    assert by_owner.accepted and not by_owner.status.commands[-1].override


def test_the_attempt_limit_says_how_to_go_on() -> None:
    spent = SlotStatus(state=SlotState.READY, worker_class="cpu", launch_spec=f.PINNED,
                       attempt_count=bounds.MAX_ATTEMPT_NUMBER)
    decision = decide(spent, command(CommandKind.CLAIM))
    assert decision.predicate is Predicate.ATTEMPT_LIMIT
    assert decision.event is not None and decision.event.message.endswith(
        f"has used all {bounds.MAX_ATTEMPT_NUMBER} attempt numbers a slot may have; give it up "
        "(agentrun.dev/give-up-*) and start a new run")
