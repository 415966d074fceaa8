"""LangGraph's ``interrupt()`` as the slot's questions: the graph pauses, no pod waits.

:func:`invoke` runs a graph compiled with the journal's checkpointer to its end in this
attempt, whatever earlier attempts left: it starts the thread, resumes it where the last
committed superstep left it, or, when the graph is paused at ``interrupt(value)``, asks
the slot's question for each pending interrupt (``worker.ask``). Unanswered, ``ask``
raises :class:`~agentrun.worker.QuestionAsked`: the attempt ends (``Asked``), the slot
shows the question and keeps no pod. Once a person answers (``kubectl agentrun answer``),
the next attempt's :func:`invoke` finds the same interrupts, ``ask`` returns the answers,
and the graph resumes with ``Command(resume={interrupt id: answer})``.

The question's key is the interrupt's position, not its text: LangGraph derives an
interrupt's id from its task's namespace, which derives from the committed checkpoint
the task runs from, so every attempt that resumes from that checkpoint names it alike.
An interrupt's value is the question: a string, or ``{"question": ..., "schema": ...,
"deadline_seconds": ..., "on_expiry": ..., "default": ...}`` (``worker.ask``'s
arguments, with its bounds); ``interrupt(value, response_schema={...})`` gives the
schema too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, Interrupt

from agentrun.api import bounds
from agentrun.worker import _questions as questions
from agentrun.worker import _sdk as sdk
from agentrun.worker.langgraph import _usage as usages

KEY_PREFIX: Final = "interrupt-"
ASK_FIELDS: Final = frozenset({"question", "schema", "deadline_seconds", "on_expiry",
                               "default"})


def question_key(interrupt_id: str) -> str:
    """The question's key for an interrupt (a step key: 42 characters)."""
    return KEY_PREFIX + hashlib.sha256(interrupt_id.encode()).hexdigest()[:32]


def asked(interrupt: Interrupt) -> dict[str, Any]:
    """``worker.ask``'s arguments for ``interrupt``'s value, or :class:`QuestionError`."""
    value, schema = interrupt.value, interrupt.response_schema
    if isinstance(value, str):
        found: dict[str, Any] = {"question": value}
    elif isinstance(value, Mapping) and "question" in value and set(value) <= ASK_FIELDS:
        found = dict(value)
        if not isinstance(found.get("schema", {}), Mapping | None):
            raise questions.QuestionError("an interrupt's 'schema' is a JSON Schema (an "
                                          "object)")
    else:
        raise questions.QuestionError(
            "an interrupt's value is the question a person answers: a string, or an object "
            f"with 'question' and any of {sorted(ASK_FIELDS - {'question'})}; this one is "
            f"{type(value).__name__}")
    if schema is not None and "schema" not in found:
        if not isinstance(schema, Mapping):
            raise questions.QuestionError("an interrupt's response_schema is a JSON Schema "
                                          "(a dict) here: a person answers in JSON")
        found["schema"] = dict(schema)
    return found


def answers(worker: sdk.Worker, interrupts: Sequence[Interrupt]) -> dict[str, Any]:
    """The answer to each interrupt, by its id. Every unanswered one is asked (so a person
    sees them all at once), then the first :class:`QuestionAsked` is raised. Every
    interrupt is checked first (its value a question, and no more of them than a slot
    shows), so a :class:`QuestionError` commits nothing."""
    for interrupt in interrupts:  # each question within its bounds, as ask checks them
        given = asked(interrupt)
        questions.check(question=given["question"], schema=given.get("schema"),
                        deadline_seconds=given.get("deadline_seconds"),
                        on_expiry=given.get("on_expiry", "fail"),
                        default=given.get("default"))
    if len(interrupts) > bounds.QUESTIONS_KEPT:
        raise questions.QuestionError(
            f"{len(interrupts)} interrupts wait at once; a slot shows at most "
            f"{bounds.QUESTIONS_KEPT} questions: interrupt fewer tasks at a time")
    found: dict[str, Any] = {}
    pending: questions.QuestionAsked | None = None
    for interrupt in interrupts:
        try:
            found[interrupt.id] = worker.ask(question_key(interrupt.id), **asked(interrupt))
        except questions.QuestionAsked as asking:
            pending = pending or asking
    if pending is not None:
        raise pending
    return found


def invoke(graph: Any, inputs: Any, *, worker: sdk.Worker, config: RunnableConfig,
           durability: str = "sync", usage: bool = True, **kwargs: Any) -> Any:
    """Run ``graph`` (compiled with ``JournalSaver(worker)``) on ``config``'s thread to
    its end and return its final state's values: the first attempt starts it with
    ``inputs``; a successor resumes it; a graph paused at ``interrupt()`` is resumed with
    the slot's answers, or the attempt ends with ``QuestionAsked`` until a person answers.
    A thread already at its end (a checkpoint, nothing next) is returned as it is (its
    values, even empty), not run again.
    ``durability`` is LangGraph's, and only ``"sync"`` keeps a tool effect's key (every
    superstep durable before the next). A graph paused at a static breakpoint
    (``interrupt_before``/``interrupt_after``) is refused: its pause is a debugger's, not
    a question for a person. ``usage``: every model call's token usage is reported to
    ``worker`` (a :class:`~agentrun.worker.langgraph._usage.UsageCallback` added to the
    config's callbacks; its price must be in the run's price table)."""
    if durability != "sync":
        raise ValueError(f"durability {durability!r}: only 'sync' makes every superstep "
                         "durable before the next, which a tool effect's key needs")
    if (getattr(graph, "interrupt_before_nodes", None) or getattr(
            graph, "interrupt_after_nodes", None) or kwargs.get("interrupt_before")
            or kwargs.get("interrupt_after")):
        raise ValueError("a graph with static breakpoints (interrupt_before/after): a "
                         "successor would run straight past them; use interrupt() for a "
                         "person, and compile without them")
    if usage:
        config = usages.with_usage(config, worker)
    state = graph.get_state(config)
    if state.interrupts:
        given: Any = Command(resume=answers(worker, state.interrupts))
    elif state.next:
        given = None
    elif state.created_at is not None:  # a checkpoint, nothing next: at its end
        return state.values
    else:
        given = inputs
    while True:
        graph.invoke(given, config, durability=durability, **kwargs)
        state = graph.get_state(config)
        if state.interrupts:
            given = Command(resume=answers(worker, state.interrupts))
        elif state.next:
            raise RuntimeError(f"the graph paused before {list(state.next)} with no "
                               "interrupt (a static breakpoint): use interrupt() for a "
                               "person, and compile without interrupt_before/after")
        else:
            return state.values
