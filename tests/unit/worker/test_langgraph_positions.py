"""Where a LangGraph call is: the keys of tool effects and the questions of interrupts.

What is claimed (``agentrun.worker.langgraph._tools`` and ``._interrupts``): a tool
effect's key is its position (thread, task, tool, index), the same when a task runs again
from the same checkpoint (in a successor, or retried here) whatever its arguments, and
different for each call of a task; ``current()`` is the running call's key and token and
None outside it; two calls of one task at once are refused; outside a graph a call is
refused. An interrupt's question is its value (a string, or ``ask``'s arguments), its
``response_schema`` the schema; anything else is refused by name. The graphs here are
real LangGraph graphs over LangGraph's in-memory saver; the worker only records what
``worker.effect`` was given (the ledger itself is tested over real Leases).
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.types import Interrupt, RetryPolicy

from agentrun.worker import QuestionAsked, QuestionError
from agentrun.worker.langgraph import ConcurrentToolCall, Sent, current, durable_tool, effect
from agentrun.worker.langgraph import _interrupts as interrupts


class Recording:
    """Stands in for ``Worker.effect`` only: calls ``call`` with a key and token."""

    context = SimpleNamespace(run_uid="uid", slot="s", approvals={})

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.lock = threading.Lock()

    def effect(self, name: str, *, key: str, call: Callable[[str, int], Any],
               **_: Any) -> Any:
        with self.lock:
            self.keys.append(key)
        return call(f"idem-{key}", 3)


class State(TypedDict):
    steps: Annotated[list[Any], operator.add]


def graph(act: Callable[[State], dict[str, list[Any]]], *, retry: bool = False) -> Any:
    builder = StateGraph(State)
    builder.add_node("plan", lambda state: {"steps": ["plan"]})
    builder.add_node("act", act, retry_policy=RetryPolicy(max_attempts=2, initial_interval=0,
                                                          jitter=False) if retry else None)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "act")
    builder.add_edge("act", END)
    return builder.compile(checkpointer=InMemorySaver())


CONFIG = {"configurable": {"thread_id": "t"}}


def test_a_task_run_again_from_its_checkpoint_names_its_calls_alike_whatever_the_args(
        ) -> None:
    worker, runs, seen = Recording(), [0], []

    def act(state: State) -> dict[str, list[Any]]:
        runs[0] += 1
        for _ in range(2):  # two calls of the tool in one task: two positions
            effect("publish", worker=worker,  # type: ignore[arg-type]
                   call=lambda: seen.append(current()))
        effect("notify", worker=worker, call=lambda: None)  # type: ignore[arg-type]
        if runs[0] == 1:
            raise RuntimeError("died")
        return {"steps": [f"args differ: {runs[0]}"]}

    built = graph(act)
    with pytest.raises(RuntimeError, match="died"):
        built.invoke({"steps": []}, CONFIG, durability="sync")
    built.invoke(None, CONFIG, durability="sync")  # resumed at act, from its checkpoint
    first, again = worker.keys[:3], worker.keys[3:]
    assert first == again and len(set(first)) == 3
    assert all(k.startswith("tool-") and len(k) == 45 for k in first)
    assert seen[0] == Sent(idempotency_key=f"idem-{first[0]}", fencing_token=3,
                           scope="uid/s")
    assert seen[0].headers() == {"Idempotency-Key": f"idem-{first[0]}",  # type: ignore[union-attr]
                                 "Agentrun-Fencing-Token": "3",
                                 "Agentrun-Fencing-Scope": "uid/s"}
    assert current() is None  # only while the call runs


def test_a_retried_task_counts_from_zero_again() -> None:
    worker, tries = Recording(), [0]

    def act(state: State) -> dict[str, list[Any]]:
        tries[0] += 1
        effect("publish", worker=worker, call=lambda: None)  # type: ignore[arg-type]
        if tries[0] == 1:
            raise ConnectionError("retried by the policy")
        return {"steps": ["act"]}

    graph(act, retry=True).invoke({"steps": []}, CONFIG, durability="sync")
    assert tries[0] == 2 and len(worker.keys) == 2 and worker.keys[0] == worker.keys[1]


def test_two_calls_of_one_task_at_once_are_refused() -> None:
    worker, inside, release = Recording(), threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def slow() -> None:
        inside.set()
        assert release.wait(timeout=30)

    def act(state: State) -> dict[str, list[Any]]:
        from langgraph.config import get_config
        config = get_config()

        def second() -> None:
            from langchain_core.runnables.config import var_child_runnable_config
            var_child_runnable_config.set(config)
            assert inside.wait(timeout=30)
            try:
                effect("publish", worker=worker, call=lambda: None)  # type: ignore[arg-type]
            except ConcurrentToolCall as refused:
                errors.append(refused)
            finally:
                release.set()

        other = threading.Thread(target=second)
        other.start()
        effect("publish", worker=worker, call=slow)  # type: ignore[arg-type]
        other.join(timeout=30)
        return {"steps": ["act"]}

    graph(act).invoke({"steps": []}, CONFIG, durability="sync")
    assert len(errors) == 1 and "run them one at a time" in str(errors[0])
    assert len(worker.keys) == 1


def test_a_tool_effect_outside_a_graph_is_refused() -> None:
    with pytest.raises(RuntimeError):
        effect("publish", worker=Recording(), call=lambda: None)  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "schema", "asked"), [
    ("Publish?", None, {"question": "Publish?"}),
    ("Publish?", {"type": "boolean"}, {"question": "Publish?", "schema": {"type": "boolean"}}),
    ({"question": "Q", "deadline_seconds": 60, "on_expiry": "default", "default": 1}, None,
     {"question": "Q", "deadline_seconds": 60, "on_expiry": "default", "default": 1}),
    ({"question": "Q", "schema": {"type": "string"}}, {"type": "boolean"},
     {"question": "Q", "schema": {"type": "string"}}),  # the value's own schema wins
])
def test_an_interrupts_value_is_the_question(value: Any, schema: Any, asked: Any) -> None:
    assert interrupts.asked(Interrupt(value, "id", response_schema=schema)) == asked


@pytest.mark.parametrize(("value", "schema", "message"), [
    (42, None, "this one is int"),
    ({"text": "Q"}, None, "an object with 'question'"),
    ({"question": "Q", "why": 1}, None, "an object with 'question'"),
    ("Q", bool, "response_schema is a JSON Schema"),
])
def test_an_interrupt_that_is_no_question_is_refused(value: Any, schema: Any,
                                                     message: str) -> None:
    with pytest.raises(QuestionError, match=message):
        interrupts.asked(Interrupt(value, "id", response_schema=schema))


def test_an_interrupts_key_is_a_step_key_from_its_id() -> None:
    key = interrupts.question_key("a" * 32)
    assert key.startswith("interrupt-") and len(key) == 42
    assert key != interrupts.question_key("b" * 32)


class Messages(TypedDict):
    messages: Annotated[list[Any], add_messages]


def test_a_toolnodes_calls_are_keyed_by_their_place_in_the_message_whatever_their_order(
        ) -> None:
    worker, sent, runs = Recording(), [], [0]

    @tool
    def send_email(to: str) -> str:
        """Send an email (a side effect)."""
        sent.append((to, current().idempotency_key))  # type: ignore[union-attr]
        return f"sent to {to}"

    def model(state: Messages) -> dict[str, Any]:
        calls = [{"name": "send_email", "args": {"to": to}, "id": f"id-{to}"}
                 for to in ("a", "b", "c")]
        return {"messages": [AIMessage(content="", tool_calls=calls)]}

    tools = ToolNode([durable_tool(send_email, worker=worker)])  # type: ignore[arg-type]

    def act(state: Messages) -> dict[str, Any]:
        runs[0] += 1
        out = tools.invoke(state)
        if runs[0] == 1:
            raise RuntimeError("died after the tools ran")
        return out

    builder = StateGraph(Messages)
    builder.add_node("model", model)
    builder.add_node("act", act)
    builder.add_edge(START, "model")
    builder.add_edge("model", "act")
    builder.add_edge("act", END)
    built = builder.compile(checkpointer=InMemorySaver())
    with pytest.raises(RuntimeError, match="died"):
        built.invoke({"messages": []}, CONFIG, durability="sync")
    first = dict(sent)
    sent.clear()
    done = built.invoke(None, CONFIG, durability="sync")
    assert dict(sent) == first and len(set(first.values())) == 3  # same place, same key
    assert [m.content for m in done["messages"][-3:]] == ["sent to a", "sent to b",
                                                          "sent to c"]


def test_a_tool_effect_under_async_durability_is_refused() -> None:
    worker = Recording()

    def act(state: State) -> dict[str, list[Any]]:
        effect("publish", worker=worker, call=lambda: None)  # type: ignore[arg-type]
        return {"steps": ["act"]}

    with pytest.raises(RuntimeError, match="durability='sync'"):
        graph(act).invoke({"steps": []}, CONFIG, durability="async")
    with pytest.raises(RuntimeError, match="durability='sync'"):  # LangGraph's default
        graph(act).invoke({"steps": []}, {"configurable": {"thread_id": "default"}})
    assert worker.keys == []


def test_a_durable_tool_refuses_bad_arguments_and_unknown_calls_before_an_intent() -> None:
    worker = Recording()

    @tool
    def send_email(to: str) -> str:
        """Send an email (a side effect)."""
        return f"sent to {to}"

    wrapped = durable_tool(send_email, worker=worker)  # type: ignore[arg-type]

    def act(state: State) -> dict[str, list[Any]]:
        with pytest.raises(ValueError, match="to"):  # pydantic: a field missing
            wrapped.invoke({"recipient": "a"})
        with pytest.raises(RuntimeError, match="not found once"):
            wrapped.invoke({"type": "tool_call", "id": "nowhere", "name": "send_email",
                            "args": {"to": "a"}})
        return {"steps": ["act"]}

    graph(act).invoke({"steps": []}, CONFIG, durability="sync")
    assert worker.keys == []  # no intent: nothing the ledger would have to ask about


class Asking(Recording):
    """Stands in for ``Worker.ask`` too: records each question asked, answers none."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def ask(self, key: str, question: str, **_: Any) -> Any:
        self.asked.append(question)
        raise QuestionAsked("asked", key=key, digest="d")


def test_interrupts_out_of_bounds_commit_no_question() -> None:
    worker = Asking()
    fine, wrong = Interrupt("fine?", "i1"), Interrupt({"question": "x" * 600}, "i2")
    with pytest.raises(QuestionError, match="at most 512"):
        interrupts.answers(worker, [fine, wrong])  # type: ignore[arg-type]
    many = [Interrupt(f"q{i}?", f"i{i}") for i in range(5)]
    with pytest.raises(QuestionError, match="at most 4 questions"):
        interrupts.answers(worker, many)  # type: ignore[arg-type]
    assert worker.asked == []
    with pytest.raises(QuestionAsked):
        interrupts.answers(worker, many[:2])  # type: ignore[arg-type]
    assert worker.asked == ["q0?", "q1?"]  # both asked, then the attempt ends


def test_invoke_never_runs_a_finished_thread_again_nor_passes_a_breakpoint() -> None:
    runs: list[str] = []

    def act(state: State) -> dict[str, list[Any]]:
        runs.append("act")
        return {"steps": []}  # its state stays empty

    built = graph(act)
    worker = Asking()
    assert interrupts.invoke(built, {"steps": []}, worker=worker,  # type: ignore[arg-type]
                             config=CONFIG) == {"steps": ["plan"]}
    interrupts.invoke(built, {"steps": []}, worker=worker, config=CONFIG)  # type: ignore[arg-type]
    assert runs == ["act"]
    paused = StateGraph(State)
    paused.add_node("plan", lambda state: {"steps": ["plan"]})
    paused.add_node("act", act)
    paused.add_edge(START, "plan")
    paused.add_edge("plan", "act")
    compiled = paused.compile(checkpointer=InMemorySaver(), interrupt_before=["act"])
    for _ in range(2):  # refused before it runs, in every attempt (never run past)
        with pytest.raises(ValueError, match="static breakpoints"):
            interrupts.invoke(compiled, {"steps": []}, worker=worker,  # type: ignore[arg-type]
                              config={"configurable": {"thread_id": "other"}})
    assert runs == ["act"]
    with pytest.raises(ValueError, match="only 'sync'"):
        interrupts.invoke(compiled, {}, worker=worker, config=CONFIG,  # type: ignore[arg-type]
                          durability="async")
