"""Side-effecting tool calls as ledger effects, keyed by their position in the graph.

An agent's tool call that changes something outside the run (sends a message, opens a
ticket) is an effect (``worker.effect``: intent committed before the call, outcome after,
an ambiguous one asked about). What a model passes a tool differs between attempts (its
arguments, its tool-call id), so neither can be the effect's key: a successor that asked
the model again would send again. The key here is the call's *position*: the thread, the
task (its namespace: the node and the task's id, which LangGraph derives from the
committed checkpoint the task runs from and the task's path), the tool's name and how
many calls of it this task made before, as ``tool-<40 hex digits>``. Every attempt that
runs a task from the same checkpoint names its calls alike, and the owner deduplicates
the re-send even if the arguments changed.

:func:`effect` is the plain function form (inside a node); :func:`durable_tool` wraps a
LangChain tool. While the call runs, :func:`current` gives its idempotency key and fencing
token (:class:`Sent`), for the request to carry to the owner (the owner's kit's headers).
A task run again in this attempt (a ``RetryPolicy`` retry, or resumed after a question)
counts from 0 again, so its calls meet their own intents. Two side-effecting calls of one
task at once would make the count depend on timing: the second is refused
(:class:`ConcurrentToolCall`).
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.config import get_config
from pydantic import BaseModel

from agentrun import owner
from agentrun.api import records as api_records
from agentrun.worker import _approvals as approvals
from agentrun.worker import _effects as effects
from agentrun.worker import _sdk as sdk

KEY_PREFIX: Final = "tool-"
KEPT: Final = 1024  # task executions whose call counts are remembered
T = TypeVar("T")


class ConcurrentToolCall(RuntimeError):
    """Two side-effecting calls of one task ran at once: their order, which is their key,
    would depend on timing. Run them one after the other."""


@dataclass(frozen=True, kw_only=True)
class Sent:
    """The effect being sent: what its owner deduplicates and fences by (``scope``: where
    the tokens grow, ``<run uid>/<slot>``; ``digest``: the approved payload's, if any)."""

    idempotency_key: str
    fencing_token: int
    scope: str
    digest: str | None = None

    def headers(self) -> dict[str, str]:
        """The effect protocol's request headers (docs/effect-owners.md), for the call's
        request to its owner."""
        return owner.Effect(key=self.idempotency_key, token=self.fencing_token,
                            scope=self.scope, digest=self.digest).headers()


_current: contextvars.ContextVar[Sent | None] = contextvars.ContextVar(
    "agentrun_tool_effect", default=None)


def current() -> Sent | None:
    """The effect whose call is running in this context (None outside one)."""
    return _current.get()


@dataclass(frozen=True, kw_only=True)
class Position:
    """Where a call is in the graph: what its key is made of. ``index`` is the call's
    place in the model's message a ``ToolNode`` runs (``"call-<i>"``), or else how many
    calls of this tool the task's execution made before it (a number)."""

    thread: str
    task: str  # the task's checkpoint namespace (``node:task id``, nested for subgraphs)
    tool: str
    index: int | str

    def key(self) -> str:
        """The effect's key: ``tool-`` and 40 hex digits of the position's sha256."""
        parts: api_records.JSON = [self.thread, self.task, self.tool, self.index]
        return KEY_PREFIX + hashlib.sha256(api_records.canonical(parts)).hexdigest()[:40]


def _in_message(configurable: dict[str, Any], call_id: str, messages_key: str) -> int:
    """The place of tool call ``call_id`` in the last message of the task's
    ``messages_key`` channel that made tool calls (what a ``ToolNode`` runs). The message is
    in the committed checkpoint the task runs from, so every attempt finds it alike; the id
    only finds the call, it is not part of the key. Not found: refused (counting instead
    would make the key depend on the order the ``ToolNode``'s threads start in)."""
    read = configurable.get("__pregel_read")
    try:
        messages = read(messages_key, False) if read is not None else None
    except Exception:  # no such channel
        messages = None
    for message in reversed(messages if isinstance(messages, list) else []):
        calls = getattr(message, "tool_calls", None)
        if calls:
            ids = [call.get("id") for call in calls]
            if ids.count(call_id) == 1:
                return ids.index(call_id)
            break
    raise RuntimeError(
        f"tool call {call_id[:80]!r}: not found once among the tool calls of the last "
        f"message of the task's {messages_key!r} channel, which is its place and so its "
        "key; give durable_tool the ToolNode's messages_key")


class _Counts:
    """Calls per task execution and tool: the next index, and which are running.

    An execution is known by its task's namespace, its ``node_attempt`` and when its first
    attempt started (LangGraph's ``ExecutionInfo``): a task run again (resumed in this
    process after its question was answered, or retried) is a new execution, counts from
    0 and meets its own intents. The last :data:`KEPT` executions are remembered."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: OrderedDict[tuple[Any, ...], dict[str, int]] = OrderedDict()
        self.running: set[tuple[Any, ...]] = set()

    @contextmanager
    def taking(self, *, tool: str, call_id: str | None = None,
               messages_key: str = "messages") -> Iterator[Position]:
        configurable = get_config().get("configurable") or {}
        info = getattr(configurable.get("__pregel_runtime"), "execution_info", None)
        thread = str(configurable.get("thread_id") or "")
        task = str(configurable.get("checkpoint_ns") or "")
        if not thread or not task or info is None:
            raise RuntimeError("a tool effect's key is its position in a graph: call it from "
                               "a node of a graph compiled with a checkpointer, on a thread")
        durability = configurable.get("__pregel_durability", "async")  # LangGraph's default
        if durability != "sync":
            raise RuntimeError(
                f"a tool effect's key is its position, which holds only if the checkpoint its "
                f"task runs from is durable before the task starts: run the graph with "
                f"durability='sync' (agentrun.worker.langgraph.invoke does), not {durability!r}")
        if call_id is not None:
            placed = _in_message(configurable, call_id, messages_key)
            yield Position(thread=thread, task=task, tool=tool, index=f"call-{placed}")
            return
        run = (task, info.node_attempt, info.node_first_attempt_time, tool)
        with self.lock:
            if run in self.running:
                raise ConcurrentToolCall(
                    f"tool {tool}: another call of it in task {task[:80]} is running; "
                    "their order is their idempotency key, so run them one at a time")
            counts = self.runs.setdefault(run[:3], {})
            self.runs.move_to_end(run[:3])
            busy = {r[:3] for r in self.running}
            for idle in [k for k in self.runs if k not in busy][:max(0, len(self.runs) - KEPT)]:
                del self.runs[idle]  # the oldest idle executions; never a running one
            index = counts.get(tool, 0)
            counts[tool] = index + 1
            self.running.add(run)
        try:
            yield Position(thread=thread, task=task, tool=tool, index=index)
        finally:
            with self.lock:
                self.running.discard(run)


_counts = _Counts()


def effect(name: str, *, worker: sdk.Worker, call: Callable[[], T],
           reconcile: effects.Reconcile | None = None, owner: str | None = None,
           payload: api_records.JSON = None, approvers: int = 0,
           redact: Sequence[str] = (), call_id: str | None = None,
           messages_key: str = "messages") -> T:
    """Perform the side effect ``name`` from inside a node, once per position (see the
    module docstring): ``call()`` runs with :func:`current` set; the rest is
    ``worker.effect``'s (``reconcile``, ``owner``, approval by ``approvers`` of
    ``payload``). ``call_id``: the tool call a ``ToolNode`` runs (it finds the call's place
    in the model's message, in the task's ``messages_key`` channel)."""
    scope = f"{worker.context.run_uid}/{worker.context.slot}"
    needed = approvals.required(name=name, approvers=approvers, floor=worker.context.approvals)
    digest = approvals.payload_digest(payload) if needed and payload is not None else None
    with _counts.taking(tool=name, call_id=call_id, messages_key=messages_key) as position:
        def sending(key: str, token: int) -> T:
            told = _current.set(Sent(idempotency_key=key, fencing_token=token, scope=scope,
                                     digest=digest))
            try:
                return call()
            finally:
                _current.reset(told)

        return worker.effect(name, key=position.key(), call=sending, reconcile=reconcile,
                             owner=owner, payload=payload, approvers=approvers, redact=redact)


class _DurableTool(BaseTool):
    """A LangChain tool whose every call is :func:`effect` (see :func:`durable_tool`)."""

    inner: BaseTool
    worker: Any
    reconcile: Any = None
    effect_owner: str | None = None
    approvers: int = 0
    redact: tuple[str, ...] = ()
    messages_key: str = "messages"

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        """A ``ToolNode`` gives a ``ToolCall`` (its ``id`` finds the call's place in the
        model's message; the answer is a ``ToolMessage``); a direct call gives the
        arguments (the answer is the tool's result). The ledger records the inner tool's
        result for its arguments, so it must be JSON."""
        is_call = isinstance(input, dict) and input.get("type") == "tool_call"
        arguments = input.get("args", {}) if is_call else input
        schema = self.inner.tool_call_schema
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            schema.model_validate(  # refused here, before an intent: nothing was sent
                {k: v for k, v in arguments.items() if k in schema.model_fields})
            model_fields = set(schema.model_fields)
        else:
            model_fields = set(arguments)
        payload = json.loads(json.dumps(  # what people approve: the model's arguments only
            {k: v for k, v in arguments.items() if k in model_fields}, default=str))
        result = effect(self.inner.name, worker=self.worker,
                        call=lambda: self.inner.invoke(arguments, config, **kwargs),
                        reconcile=self.reconcile, owner=self.effect_owner, payload=payload,
                        approvers=self.approvers, redact=self.redact,
                        call_id=input.get("id") if is_call else None,
                        messages_key=self.messages_key)
        if not is_call:
            return result
        return ToolMessage(content=result if isinstance(result, str) else json.dumps(result),
                           tool_call_id=input["id"], name=self.name)

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        """:meth:`invoke` in a thread (the ledger's calls block)."""
        return await asyncio.to_thread(self.invoke, input, config, **kwargs)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("a durable tool runs through invoke")


def durable_tool(tool: BaseTool, *, worker: sdk.Worker,
                 reconcile: effects.Reconcile | None = None, owner: str | None = None,
                 approvers: int = 0, redact: Sequence[str] = (),
                 messages_key: str = "messages") -> BaseTool:
    """``tool`` as an effect: the same name, description, argument schema and return
    settings; each call is :func:`effect` (its payload, for an approval, is the call's
    arguments as JSON). Give it to the graph (``ToolNode([durable_tool(...)])``) in place
    of ``tool`` (``messages_key``: the ``ToolNode``'s, where the model's message is). A
    tool with no sync function is refused (its call would raise inside the effect, after
    the intent). Leave ``handle_tool_errors`` at its default: an error handler that turns
    every exception into a message would swallow the SDK's (``QuestionAsked``,
    ``EffectStopped``, ``LeaseLost``), which must end the attempt."""
    if getattr(tool, "func", True) is None:
        raise ValueError(f"tool {tool.name}: a durable tool needs a sync function (the "
                         "effect ledger's calls block); give the tool one")
    if tool.response_format != "content":
        raise ValueError(f"tool {tool.name}: a durable tool answers with content only "
                         f"(response_format='content'), not {tool.response_format!r}")
    return _DurableTool(name=tool.name, description=tool.description,
                        args_schema=tool.args_schema, return_direct=tool.return_direct,
                        inner=tool, worker=worker, messages_key=messages_key,
                        reconcile=reconcile, effect_owner=owner, approvers=approvers,
                        redact=tuple(redact))
