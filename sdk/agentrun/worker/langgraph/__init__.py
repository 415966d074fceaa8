"""LangGraph on the journal: a LangGraph agent made durable across pods.

Public (``__all__``):

- :class:`JournalSaver`: the checkpointer (``builder.compile(checkpointer=
  JournalSaver(worker))``), every write a fenced entry in the slot's journal;
- :func:`invoke`: run a graph on a thread to its end from wherever earlier attempts left
  it, its ``interrupt()`` asked as the slot's questions (the attempt ends until a person
  answers);
- :func:`effect` and :func:`durable_tool`: side-effecting tool calls as ledger effects,
  keyed by their position in the graph, never by what the model passed; :func:`current`
  (a :class:`Sent`) gives the running call's idempotency key and fencing token;
  :class:`ConcurrentToolCall`: two of one task at once;
- :class:`UsageCallback`: each model call's token usage reported to the worker
  (``worker.usage``) from LangChain's callbacks; :func:`invoke` adds it.

Needs the ``langgraph`` extra (``pip install '.[langgraph]'`` from a clone) and a run
pinned with a journal. The rest is private: ``_entries`` (the log's entries and the index
they replay to; pure), ``_log`` (one attempt's log: replay and fenced commits),
``_saver`` (LangGraph's interface over it), ``_interrupts``, ``_tools`` and ``_usage``. See
docs/worker-sdk.md ("LangGraph") and docs/design/frameworks.md.
"""

from agentrun.worker.langgraph._interrupts import invoke
from agentrun.worker.langgraph._saver import JournalSaver
from agentrun.worker.langgraph._tools import (
    ConcurrentToolCall,
    Sent,
    current,
    durable_tool,
    effect,
)
from agentrun.worker.langgraph._usage import UsageCallback

__all__ = ["ConcurrentToolCall", "JournalSaver", "Sent", "UsageCallback", "current",
           "durable_tool", "effect", "invoke"]
