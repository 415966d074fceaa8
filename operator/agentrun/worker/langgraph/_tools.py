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

import contextvars
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from langchain_core.tools import BaseTool, StructuredTool
from langgraph.config import get_config

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
    scope: str = ""
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
    """Where a call is in the graph: what its key is made of."""

    thread: str
    task: str  # the task's checkpoint namespace (``node:task id``, nested for subgraphs)
    tool: str
    index: int

    def key(self) -> str:
        parts: api_records.JSON = [self.thread, self.task, self.tool, self.index]
        return KEY_PREFIX + hashlib.sha256(api_records.canonical(parts)).hexdigest()[:40]


class _Counts:
    """Calls per task execution and tool: the next index, and whether one is running.

    A task execution is known by its ``Runtime`` object: LangGraph makes a new one for
    each run of a task (each retry too, with its ``node_attempt``), so a task run again
    (resumed in this process after its question was answered, retried) counts from 0 and
    meets its own intents. The last :data:`KEPT` executions are remembered (each with its
    ``Runtime``, so its id is not reused meanwhile); an older one has long ended."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: OrderedDict[int, tuple[object, dict[str, int]]] = OrderedDict()
        self.running: set[int] = set()

    @contextmanager
    def taking(self, *, tool: str) -> Iterator[Position]:
        configurable = get_config().get("configurable") or {}
        runtime = configurable.get("__pregel_runtime")
        thread = str(configurable.get("thread_id") or "")
        task = str(configurable.get("checkpoint_ns") or "")
        if not thread or not task or getattr(runtime, "execution_info", None) is None:
            raise RuntimeError("a tool effect's key is its position in a graph: call it from "
                               "a node of a graph compiled with a checkpointer, on a thread")
        run = id(runtime)
        with self.lock:
            if run in self.running:
                raise ConcurrentToolCall(
                    f"tool {tool}: another side-effecting call of task {task[:80]} is "
                    "running; their order is their idempotency key, so run them one at a time")
            _, counts = self.runs.setdefault(run, (runtime, {}))
            self.runs.move_to_end(run)
            while len(self.runs) > KEPT:
                self.runs.popitem(last=False)
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
           redact: Sequence[str] = ()) -> T:
    """Perform the side effect ``name`` from inside a node, once per position (see the
    module docstring): ``call()`` runs with :func:`current` set; the rest is
    ``worker.effect``'s (``reconcile``, ``owner``, approval by ``approvers`` of
    ``payload``)."""
    scope = f"{worker.context.run_uid}/{worker.context.slot}"
    digest = None if payload is None else approvals.payload_digest(payload)
    with _counts.taking(tool=name) as position:
        def sending(key: str, token: int) -> T:
            told = _current.set(Sent(idempotency_key=key, fencing_token=token, scope=scope,
                                     digest=digest))
            try:
                return call()
            finally:
                _current.reset(told)

        return worker.effect(name, key=position.key(), call=sending, reconcile=reconcile,
                             owner=owner, payload=payload, approvers=approvers, redact=redact)


def durable_tool(tool: BaseTool, *, worker: sdk.Worker,
                 reconcile: effects.Reconcile | None = None, owner: str | None = None,
                 approvers: int = 0, redact: Sequence[str] = ()) -> BaseTool:
    """``tool`` as an effect: the same name, description and arguments; each call is
    :func:`effect` (its payload, for an approval, is the call's arguments). Give it to the
    graph (``ToolNode([durable_tool(...)])``) in place of ``tool``."""
    def run(**arguments: Any) -> Any:
        return effect(tool.name, worker=worker, call=lambda: tool.invoke(arguments),
                      reconcile=reconcile, owner=owner,
                      payload=arguments if approvers else None, approvers=approvers,
                      redact=redact)

    return StructuredTool.from_function(func=run, name=tool.name,
                                        description=tool.description,
                                        args_schema=tool.args_schema)
