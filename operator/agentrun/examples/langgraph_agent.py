"""An example LangGraph agent made durable by the journal: plan, a tool loop, write, publish.

A real ``StateGraph``: ``plan`` asks the model for a plan; ``agent`` asks the model what
to do next and ``tools`` (LangGraph's ``ToolNode``) runs the tool it chose, ``research``
(no side effect: its notes join the state), for ``rounds`` rounds; then ``write`` has
the model write the report and publishes it, in the same node: ``publish`` is a side
effect through the ledger (:func:`agentrun.worker.langgraph.durable_tool`), its request
carrying the effect protocol's headers to the owner at ``<publish_url>/effects`` (an
``agentrun.owner`` service). The model is a stand-in from ``langchain_core``'s fake chat
models whose words and tool arguments are drawn from the operating system's randomness:
two attempts never phrase a call alike, so a ``write`` run again publishes other words
under the same key, and the owner keeps the first. The state grows by about 10 KiB a round
(notes and tool messages; past 1 MiB at 110 rounds, 220 supersteps).

Every node prints one JSON line (``{"event": "node", "node", "step", "attempt"}``) as it
starts, so a test can see which supersteps each attempt ran and kill it at one.
``python3 -m agentrun.examples.langgraph_agent`` runs it in a worker pod (the pinned
bindings' ``publish.url``; ``AGENTRUN_EXAMPLE_ROUNDS``, 200 by default).
"""

from __future__ import annotations

import json
import operator
import os
import random
import sys
import urllib.request
from typing import Annotated, Any, Final, TypedDict

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode

from agentrun import owner
from agentrun.worker import Answer, Reconciled, Worker
from agentrun.worker.langgraph import JournalSaver, current, durable_tool, invoke

ROUNDS: Final = 200
MAX_ROUNDS: Final = 2000
NOTE_BYTES: Final = 10 * 1024
THREAD: Final = "main"
ENV_ROUNDS: Final = "AGENTRUN_EXAMPLE_ROUNDS"
REQUEST_TIMEOUT_SECONDS: Final = 30.0
MAX_ANSWER_BYTES: Final = 64 * 1024


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


def build(*, worker: Worker, publish_url: str, rounds: int) -> Any:
    """The agent's graph, compiled with the journal's checkpointer. ``publish_url`` is the
    owner's base URL (the bindings' ``publish.url``): effects go to ``<url>/effects``
    with the protocol's headers, so it must be an ``agentrun.owner`` service."""
    draw = random.SystemRandom()
    endpoint = publish_url.rstrip("/") + "/effects"

    def step_of() -> int:
        return int((get_config().get("metadata") or {}).get("langgraph_step", -1))

    def announced(node: str) -> None:
        told("node", node=node, step=step_of(), attempt=worker.context.attempt)

    @tool
    def research(query: str) -> str:
        """Research ``query``: notes on it (no side effect)."""
        return f"notes on {query}: " + "x" * NOTE_BYTES

    @tool
    def publish(title: str, text: str) -> dict[str, Any]:
        """Publish the report (a side effect: through the owner's kit)."""
        sent = current()
        assert sent is not None, "publish runs only as a ledger effect"
        body = json.dumps({"title": title, "text": text}).encode()
        request = urllib.request.Request(endpoint, data=body, method="POST", headers={
            **sent.headers(), "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_SECONDS) as reply:
            found: dict[str, Any] = json.loads(reply.read(MAX_ANSWER_BYTES))
            return found

    def reconcile(idempotency_key: str) -> Reconciled:
        """The owner's answer about a publish whose outcome was not recorded."""
        request = urllib.request.Request(endpoint, method="GET", headers=owner.Effect(
            key=idempotency_key, query=True).headers())
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_SECONDS) as reply:
            said = json.loads(reply.read(MAX_ANSWER_BYTES))
        return Reconciled(answer=Answer(said["answer"]), result=said.get("result"))

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

    publishing = durable_tool(publish, worker=worker, owner="publisher", reconcile=reconcile)

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


def run(*, worker: Worker, publish_url: str, rounds: int = ROUNDS) -> dict[str, Any]:
    """The agent's thread to its end from wherever earlier attempts left it."""
    if not 1 <= rounds <= MAX_ROUNDS:
        raise ValueError(f"rounds is 1..{MAX_ROUNDS}, not {rounds}")
    graph = build(worker=worker, publish_url=publish_url, rounds=rounds)
    state = invoke(graph, {"task": "report on durable agents", "plan": [], "messages": [],
                           "notes": [], "report": ""},
                   worker=worker, config={"configurable": {"thread_id": THREAD},
                                          "recursion_limit": 4 * rounds + 20})
    told("done", report=state["report"], attempt=worker.context.attempt)
    return dict(state)


def main() -> int:
    from agentrun.examples.research_report import Brief
    rounds = int(os.environ.get(ENV_ROUNDS) or ROUNDS)
    with Worker.from_env() as worker:
        brief = Brief.from_pinned(worker.context.pinned)
        run(worker=worker, publish_url=brief.publish_url, rounds=rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
