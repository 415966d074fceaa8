"""An example LangGraph agent made durable by the journal: plan, a tool loop, write, publish.

A real ``StateGraph``: ``plan`` asks the model for a plan; ``agent`` asks the model what
to do next and ``tools`` (LangGraph's ``ToolNode``) runs the tool it chose, ``research``
(no side effect: its notes join the state), for ``rounds`` rounds; then ``write`` has the
model write the report and publishes it, in the same node: ``publish`` is a side effect
through the ledger (:func:`agentrun.worker.langgraph.durable_tool`), sent by the example's
client (:mod:`agentrun.examples.publisher`) with the effect protocol's headers to the
owner at ``<publish_url>/effects`` (an ``agentrun.owner`` service). The model is a
stand-in from ``langchain_core``'s fake chat models whose words and tool arguments are
drawn from the operating system's randomness: two attempts never phrase a call alike, so a
``write`` run again publishes other words under the same key, and the owner keeps the
first. The state grows by about 10 KiB a round (notes and tool messages; past 1 MiB at 110
rounds, 220 supersteps).

Every node prints one JSON line (``{"event": "node", "node", "step", "attempt"}``) as it
starts, so a test can see which supersteps each attempt ran and kill it at one; the fault
hook (:mod:`agentrun.examples.faults`, ``AGENTRUN_EXAMPLE_PAUSE``) can block an attempt
there (``superstep:<n>``) or once the owner answered the publish (``after-call:publish``).
``python3 -m agentrun.examples.langgraph_agent`` runs it in a worker pod (the pinned
bindings' ``publish.url``; ``AGENTRUN_EXAMPLE_ROUNDS``, 200 by default).

Its publish needs no approval (unless a LaunchSpec's ``spec.approvals`` floor asks for
it): ``write`` has the model write the words and publishes
them in one node, so a successor's other words would be asked again in every attempt. An
agent whose publish people approve drafts the words in a superstep of their own and
publishes from the state (docs/design/frameworks.md).
"""

from __future__ import annotations

import json
import operator
import os
import random
import sys
from typing import Annotated, Any, Final, TypedDict

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode

from agentrun.examples import faults
from agentrun.examples.publisher import Publisher
from agentrun.worker import QuestionAsked, Worker, WorkerContextError
from agentrun.worker.langgraph import JournalSaver, current, durable_tool, invoke

ROUNDS: Final = 200
MAX_ROUNDS: Final = 2000
NOTE_BYTES: Final = 10 * 1024
THREAD: Final = "main"
ENV_ROUNDS: Final = "AGENTRUN_EXAMPLE_ROUNDS"
EXIT_CONFIG: Final = 2


class State(TypedDict):
    task: str
    plan: list[str]
    messages: Annotated[list[AnyMessage], add_messages]
    notes: Annotated[list[str], operator.add]
    report: str


def told(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def model_says(message: AIMessage) -> AIMessage:
    """One reply of the stand-in chat model (langchain_core's ``GenericFakeChatModel``)."""
    reply = GenericFakeChatModel(messages=iter([message])).invoke("next")
    assert isinstance(reply, AIMessage)
    return reply


def build(*, worker: Worker, publish_url: str, rounds: int,
          pauses: faults.Pauses | None = None) -> Any:
    """The agent's graph, compiled with the journal's checkpointer. ``publish_url`` is the
    owner's base URL (the bindings' ``publish.url``): effects go to ``<url>/effects``
    with the protocol's headers, so it must be an ``agentrun.owner`` service."""
    hook = pauses or faults.Pauses(attempt=worker.context.attempt)
    draw = random.SystemRandom()
    publisher = Publisher(url=publish_url,
                          fence=f"{worker.context.run_uid}/{worker.context.slot}")

    def step_of() -> int:
        return int((get_config().get("metadata") or {}).get("langgraph_step", -1))

    def announced(node: str) -> None:
        step = step_of()
        told("node", node=node, step=step, attempt=worker.context.attempt)
        hook.at(f"superstep:{step}")

    @tool
    def research(query: str) -> str:
        """Research ``query``: notes on it (no side effect)."""
        return f"notes on {query}: " + "x" * NOTE_BYTES

    @tool
    def publish(title: str, text: str) -> dict[str, Any]:
        """Publish the report (a side effect: through the owner's kit)."""
        sent = current()
        assert sent is not None, "publish runs only as a ledger effect"
        found: dict[str, Any] = publisher.call(
            sent.idempotency_key, sent.fencing_token, {"title": title, "text": text},
            digest=sent.digest)
        hook.at("after-call:publish")
        return found

    def plan(state: State) -> dict[str, Any]:
        announced("plan")
        words = model_says(AIMessage(content=f"plan {draw.getrandbits(64):x}")).content
        return {"plan": [str(words), f"{rounds} rounds of research", "publish"],
                "messages": [HumanMessage(content=state["task"])]}

    def agent(state: State) -> dict[str, Any]:
        announced("agent")
        done = len(state["notes"])
        if done >= rounds:
            return {"messages": [model_says(AIMessage(content="enough research"))]}
        call = {"name": "research", "args": {"query": f"topic {done} {draw.random():.6f}"},
                "id": f"call-{draw.getrandbits(64):x}"}
        return {"messages": [model_says(AIMessage(content="", tool_calls=[call]))]}

    tooling = ToolNode([research])

    def tools(state: State) -> dict[str, Any]:
        announced("tools")
        out = tooling.invoke(state)
        notes = [str(m.content)[:80] + " ..." for m in out["messages"]]
        return {"messages": out["messages"], "notes": notes}

    publishing = durable_tool(publish, worker=worker, owner="publisher",
                              reconcile=publisher.reconcile)

    def write(state: State) -> dict[str, Any]:
        announced("write")
        title = str(model_says(AIMessage(content=f"Report {draw.getrandbits(32):x}")).content)
        text = f"{state['plan'][0]}: {len(state['notes'])} notes"
        published = publishing.invoke({"title": title, "text": text})
        return {"report": f"{title}: {text}; published {json.dumps(published)[:200]}"}

    def route(state: State) -> str:
        last = state["messages"][-1]
        return "tools" if getattr(last, "tool_calls", None) else "write"

    builder = StateGraph(State)
    for name, run in (("plan", plan), ("agent", agent), ("tools", tools), ("write", write)):
        builder.add_node(name, run)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "agent")
    builder.add_conditional_edges("agent", route, ["tools", "write"])
    builder.add_edge("tools", "agent")
    builder.add_edge("write", END)
    return builder.compile(checkpointer=JournalSaver(worker))


def run(*, worker: Worker, publish_url: str, rounds: int = ROUNDS,
        pauses: faults.Pauses | None = None) -> dict[str, Any]:
    """The agent's thread to its end from wherever earlier attempts left it."""
    if not 1 <= rounds <= MAX_ROUNDS:
        raise ValueError(f"rounds is 1..{MAX_ROUNDS}, not {rounds}")
    graph = build(worker=worker, publish_url=publish_url, rounds=rounds, pauses=pauses)
    state = invoke(graph, {"task": "report on durable agents", "plan": [], "messages": [],
                           "notes": [], "report": ""},
                   worker=worker, config={"configurable": {"thread_id": THREAD},
                                          "recursion_limit": 4 * rounds + 20})
    told("done", report=state["report"], attempt=worker.context.attempt)
    return dict(state)


def number(name: str, *, default: int, least: int, most: int) -> int:
    """The whole number ``least``..``most`` in environment variable ``name`` (``default``
    when unset), else a ValueError that says so."""
    text = os.environ.get(name) or str(default)
    if not (text.isascii() and text.isdigit() and len(text) <= 6
            and least <= int(text) <= most):
        raise ValueError(f"${name} is a whole number {least}..{most}, not {text[:20]!r}")
    return int(text)


def main() -> int:
    from agentrun.examples.research_report import Brief, ConfigError
    try:
        rounds = number(ENV_ROUNDS, default=ROUNDS, least=1, most=MAX_ROUNDS)
        points = faults.parse(faults.environ_spec())
        worker = Worker.from_env()
        pauses = faults.Pauses(
            attempt=worker.context.attempt, points=points,
            announce=lambda point: told("paused", point=point, attempt=worker.context.attempt))
        brief = Brief.from_pinned(worker.context.pinned)
    except (ValueError, WorkerContextError, faults.FaultSpecError, ConfigError) as error:
        print(f"langgraph_agent: {error}", file=sys.stderr)
        return EXIT_CONFIG
    with worker:
        try:
            run(worker=worker, publish_url=brief.publish_url, rounds=rounds, pauses=pauses)
        except QuestionAsked as asked:  # a LaunchSpec's approvals floor made the publish
            # ask: not a failure, the operator ends the attempt Asked
            told("asked", why=str(asked)[:300], attempt=worker.context.attempt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
