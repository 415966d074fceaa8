"""LangGraph on the journal: a checkpointer that makes a LangGraph agent durable across pods.

Public: :class:`JournalSaver` (``builder.compile(checkpointer=JournalSaver(worker))``).
Needs the ``langgraph`` extra (``pip install 'agentrun-operator[langgraph]'``) and a run
pinned with a journal. The rest is private: ``_entries`` (the log's entries and the index
they replay to; pure), ``_log`` (one attempt's log: replay and fenced commits) and
``_saver`` (LangGraph's interface over it). See docs/worker-sdk.md ("LangGraph").
"""

from agentrun.worker.langgraph._saver import JournalSaver

__all__ = ["JournalSaver"]
