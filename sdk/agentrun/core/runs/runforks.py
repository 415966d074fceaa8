"""Forking a run: a new run that starts from another's pinned configuration and journal.

A *fork* is a run whose ``spec.fork`` names a *source* run of its own namespace (so of its
tenant) and, optionally, a step ``at`` = ``<node>:<step>``. The operator:

1. pins the source's snapshots, by digest (``resolution.from_source``): what the source
   ran, whatever became of the revisions it was pinned from;
2. copies, before any slot exists, what the source's slots committed into the fork's own
   journal, as each slot's *attempt 0*: a Lease ``<slot>-0`` written by the operator (no
   holder, so sealed from the start) whose head names nodes holding the records. The
   ``at`` node gets its prefix less the step and everything committed after it, effects'
   records too; the nodes after it in the workflow nothing (they run from their start);
   every other node its whole prefix. A copy, not a reference: the fork survives the
   source's deletion and its journal's retention;
3. records its provenance in ``status.fork`` and the condition ``Forked``.

The fork is a new run with a new uid, so its effects get new idempotency keys; an effect
the source applied before the fork's step is inherited with its outcome, which the fork's
workers reuse.

What is checked before copying, in this order: the source is there (the same uid when
the fork names one), pinned with a journal and, if it is a fork itself, copied; the ``at``
node is in its workflow; every copied node's slot is there, and none can still be written
(Claiming or Active: wait, or hold it) or waits for a person (an unresolved effect, a
question). The rest is checked while copying (``controller.forkprefixes``), which reads
the journal: the step committed, no effect sent without its outcome recorded, the sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from agentrun.api import names
from agentrun.api.configs import WorkflowDocument
from agentrun.api.runs import AgentRun, AgentRunStatus, ForkStatus
from agentrun.api.slots import Slot, SlotState
from agentrun.core.attempts import effectrecords, questionrecords
from agentrun.core.base import actions, events, naming, owners
from agentrun.core.runs import rollup
from agentrun.core.runs.resolution import FORK_SOURCE_UNUSABLE, Problem

FORKED: Final = "Forked"  # the run's condition, and its Event once copied
# Reasons of Forked False (docs/design/names.md).
SLOT_LIVE: Final = "ForkSlotLive"
SOURCE_NOT_READY: Final = "ForkSourceNotReady"
TOO_LARGE: Final = "ForkTooLarge"
NAME_SQUATTED: Final = "NameSquatted"
COPYING: Final = "ForkCopying"  # cut short by its deadline: continued at once
# Said once and not looked at again (delete the fork): the source will not change that.
SPLIT_EFFECT: Final = "ForkSplitsEffect"  # the step between an effect's intent and outcome
CANNOT_COPY: Final = "ForkCannotCopy"  # another store, or what a record names is not its own
FINAL = frozenset({"StepNotCommitted", TOO_LARGE, SPLIT_EFFECT, CANNOT_COPY})
WAITING: Final = "ForkWaitsForPerson"
STEP_NOT_COMMITTED: Final = "StepNotCommitted"
COPY_FAILED: Final = "ForkCopyFailed"
RECHECK = timedelta(seconds=15)  # a live slot ends, a store comes back: not a run event
LIVE = frozenset({SlotState.CLAIMING, SlotState.ACTIVE})


def parse_at(at: str | None) -> tuple[str, str] | None:
    """``<node>:<step>`` as (node, step); the model's pattern has checked its shape."""
    if at is None:
        return None
    node, step = at.split(":", 1)
    return node, step


def source_problem(*, run: AgentRun, source: AgentRun | None) -> Problem | None:
    """Why ``source`` cannot be forked by ``run`` (see the module), before pinning."""
    fork = run.spec.fork
    assert fork is not None
    namespace = run.metadata.namespace
    if source is None or (fork.uid is not None and source.metadata.uid != fork.uid):
        return Problem(reason=FORK_SOURCE_UNUSABLE, message=(
            f"run {fork.run}{'' if fork.uid is None else f' (uid {fork.uid})'} is not in "
            f"namespace {namespace}: a fork copies a run of its own namespace; delete this "
            "run and fork one that exists"))
    if source.status.pinned is None:
        return Problem(reason=FORK_SOURCE_UNUSABLE, message=(
            f"run {fork.run} is not pinned yet: a fork copies what a run pinned; wait for "
            "it, or fork another"))
    if source.status.pinned.journal is None:
        return Problem(reason=FORK_SOURCE_UNUSABLE, message=(
            f"run {fork.run} has no journal (its steps are on its attempts' Leases): only a "
            "run with a journal can be forked"))
    deleted = rollup.journal_deleted(source.status)
    if deleted is not None:
        return Problem(reason=FORK_SOURCE_UNUSABLE, message=(
            f"run {fork.run}'s journal was deleted ({deleted}): nothing to copy"))
    return None


def at_problem(*, run: AgentRun, workflow: WorkflowDocument) -> Problem | None:
    """Why ``spec.fork.at`` names no node of the (source's, now the fork's) workflow."""
    assert run.spec.fork is not None
    at = parse_at(run.spec.fork.at)
    if at is None or at[0] in {node.name for node in workflow.nodes}:
        return None
    known = ", ".join(node.name for node in workflow.nodes)
    return Problem(reason=STEP_NOT_COMMITTED, message=(
        f"spec.fork.at names node {at[0]}, which run {run.spec.fork.run}'s workflow does "
        f"not have (its nodes: {known})"))


def after(workflow: WorkflowDocument, node: str) -> set[str]:
    """The nodes that depend on ``node``, directly or through others."""
    found: set[str] = set()
    grew = True
    while grew:
        grew = False
        for each in workflow.nodes:
            if each.name not in found and (node in each.depends_on
                                           or found.intersection(each.depends_on)):
                found.add(each.name)
                grew = True
    return found


def lease_body(*, run: AgentRun, node: str, slot: str, tenant: str | None,
               source: AgentRun) -> dict[str, Any]:
    """The fork's attempt-0 Lease for ``slot``: no holder (sealed), owned by the fork."""
    assert run.spec.fork is not None
    at = run.spec.fork.at
    labels = naming.with_tenant({names.RUN_LABEL: run.metadata.name, names.NODE_LABEL: node,
                                 names.SLOT_LABEL: slot, names.ATTEMPT_LABEL: "0"},
                                tenant=tenant)
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": f"{slot}-0", "namespace": run.metadata.namespace,
                         "labels": labels,
                         "annotations": {names.FORKED_FROM_ANNOTATION: (
                             f"{source.metadata.name} {source.metadata.uid}"
                             + ("" if at is None else f" at {at}"))},
                         "ownerReferences": [owners.controller(kind="AgentRun",
                                                               metadata=run.metadata)]},
            "spec": {}}


def _slot_problem(*, source: AgentRun, node: str, found: Slot | None,
                  step: str | None, inherited: set[str]) -> Problem | None:
    """Why ``node``'s source slot cannot be copied now (checked only while the fork has not
    committed its copy of it: a slot copied at an earlier look stands as it was)."""
    if found is None:
        return Problem(reason=SOURCE_NOT_READY, message=(
            f"run {source.metadata.name}'s slot of node {node} is not there yet (or not seen "
            "yet): the fork copies it once it is"))
    status = found.status
    if status.attempt_count == 0 and node not in inherited and step is not None:
        return Problem(reason=STEP_NOT_COMMITTED, message=(
            f"node {node} of run {source.metadata.name} has not run: step {step} is not "
            "committed; delete this run and fork at a step the source committed"))
    if status.state in LIVE:
        return Problem(reason=SLOT_LIVE, message=(
            f"slot {found.metadata.name} (node {node}) of run {source.metadata.name} is "
            f"{status.state}: its journal may still grow; wait for its attempt to end, or "
            "hold the slot, then the fork copies it"))
    # The at node's open effect is before its step (a split, which the copier says) or
    # after it (cut); its waiting question is kept or cut with its step, never waited on.
    if step is None and (effectrecords.open_effects(status) or questionrecords.waiting(status)):
        return Problem(reason=WAITING, message=(
            f"slot {found.metadata.name} (node {node}) of run {source.metadata.name} waits "
            "for a person (an unresolved effect or a question): answer it first, then the "
            "fork copies it"))
    return None


def plan(*, run: AgentRun, source: AgentRun, workflow: WorkflowDocument,
         source_slots: Sequence[Slot], tenant: str | None) -> actions.ForkJournal | Problem:
    """What to copy, or why not now: see the module for the checks and their order. A
    slot's own problem rides on its ``ForkSlot``: the copier raises it only for a slot
    it has not committed yet."""
    assert run.spec.fork is not None and source.status.pinned is not None
    assert run.status.pinned is not None
    source_pin, pin = source.status.pinned.journal, run.status.pinned.journal
    if source_pin is None or pin is None:
        return Problem(reason=FORK_SOURCE_UNUSABLE, message=(
            "the source or this run has no journal: a fork copies one journal into another "
            "(is the operator configured with a journal store?)"))
    if source.spec.fork is not None and source.status.fork is None:
        return Problem(reason=SOURCE_NOT_READY, message=(
            f"run {source.metadata.name} is a fork whose own copy is not made yet: the fork "
            "copies it once it is"))
    at = parse_at(run.spec.fork.at)
    skipped = set() if at is None else after(workflow, at[0])
    own = rollup.own_slots(run=source, slots=source_slots)
    inherited = set() if source.status.fork is None else {
        each.node for each in source.status.fork.inherited if each.records}
    slots: list[actions.ForkSlot] = []
    first = [] if at is None else [n for n in workflow.nodes if n.name == at[0]]
    for node in [*first, *(n for n in workflow.nodes if n not in first)]:  # at's first
        if node.name in skipped:
            continue
        found = own.get(node.name)
        step = at[1] if at is not None and at[0] == node.name else None
        problem = _slot_problem(source=source, node=node.name, found=found, step=step,
                                inherited=inherited)
        if found is not None and problem is None and (
                found.status.attempt_count == 0 and node.name not in inherited):
            continue  # nothing to inherit: it runs from its start
        status = found.status if found is not None else None
        name = naming.slot_name(run=run.metadata.name, node=node.name)
        attempts = 0 if status is None else status.attempt_count
        slots.append(actions.ForkSlot(
            node=node.name, slot=name, step=step, attempts=attempts,
            source_slot=naming.slot_name(run=source.metadata.name, node=node.name)
            if found is None else found.metadata.name,
            cuts=() if status is None else tuple(status.cuts),
            resends=() if status is None else tuple(status.resends),
            owners=("" if found is None else found.metadata.uid or "",
                    source.metadata.uid or ""),
            answers=() if status is None else tuple(questionrecords.answer_annotations(
                status, attempt=attempts + 1).values()),  # as its next attempt's Lease
            problem=None if problem is None else (problem.reason, problem.message),
            lease=lease_body(run=run, node=node.name, slot=name, tenant=tenant,
                             source=source)))
    return actions.ForkJournal(source=source_pin, journal=pin,
                               namespace=run.metadata.namespace or "",
                               source_run=source.metadata.name,
                               source_uid=source.metadata.uid or "", slots=tuple(slots))


def copied_status(*, run: AgentRun, copied: ForkStatus | Problem,
                  now: datetime) -> tuple[AgentRunStatus, events.Event, datetime | None]:
    """The status that says how the copy went, its Event, and when to look again:
    ``status.fork`` and Forked True once done (then at once: lay out the slots), else
    Forked False with why: again in :data:`RECHECK`, at once for a copy cut short by its
    deadline, never by itself for a reason the source will not change (:data:`FINAL`)."""
    fork = run.spec.fork
    assert fork is not None
    if isinstance(copied, Problem):
        status = run.status.model_copy(update={"conditions": rollup.with_condition(
            run, type_=FORKED, status="False", reason=copied.reason, message=copied.message,
            now=now)})
        until = (now if copied.reason == COPYING else None if copied.reason in FINAL
                 else now + RECHECK)
        return status, events.Event(type="Warning" if copied.reason != COPYING else "Normal",
                                    reason=copied.reason, message=copied.message), until
    where = "" if fork.at is None else f" at {fork.at}"
    total = sum(each.records for each in copied.inherited)
    message = (f"forked from run {copied.run} (uid {copied.uid}){where} by "
               f"{copied.actor or 'an unverified creator'}: {fork.reason}; {total} records "
               f"of {len(copied.inherited)} nodes copied into this run's journal")
    status = run.status.model_copy(update={"fork": copied, "conditions": rollup.with_condition(
        run, type_=FORKED, status="True", reason="Copied", message=message, now=now)})
    return status, events.Event(type="Normal", reason=FORKED, message=message), now
