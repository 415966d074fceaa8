"""Model usage from LangChain's callbacks: every chat model or LLM call a graph makes,
reported to the worker (``worker.usage``) when it ends, with no code in the agent.

A model call's usage is what its provider said: LangChain puts it on the message
(``AIMessage.usage_metadata``: ``input_tokens``, ``output_tokens``) and the model's name
in ``response_metadata`` (``model_name``, or ``model``); older integrations put them in the
result's ``llm_output`` (``token_usage`` with ``prompt_tokens``/``completion_tokens``, and
``model_name``). A call that reports no usage is not counted, and says so in the log once
per model: usage is the provider's report, never estimated here. The call is attributed to
the LangGraph node it ran in (``langgraph_node`` in the run's metadata), the step of its
``usage`` record. Before each call starts, the worker's budget is checked
(``worker.check_budget``): past it, :class:`~agentrun.worker.BudgetExceeded` is raised
from the call and the call is never made.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult
from langchain_core.runnables import RunnableConfig

from agentrun.worker import _sdk as sdk
from agentrun.worker import _usage as usages

log = logging.getLogger(__name__)
NODE_CHARS = 63


class UsageCallback(BaseCallbackHandler):
    """Reports each model call's usage to ``worker`` (see the module docstring).

    ``raise_error``: a report the worker refuses (a model the run's price table does not
    price, the journal unreachable) fails the call, so it is never silently uncounted."""

    raise_error = True

    def __init__(self, worker: sdk.Worker, *, model: str | None = None) -> None:
        self.worker = worker
        self.model = model  # the name when the provider's report has none
        self._nodes: dict[UUID, str] = {}
        self._unreported: set[str] = set()
        self._lock = threading.Lock()

    def on_chat_model_start(self, serialized: dict[str, Any], messages: list[list[Any]], *,
                            run_id: UUID, metadata: dict[str, Any] | None = None,
                            **kwargs: Any) -> None:
        self._started(run_id, metadata)

    def on_llm_start(self, serialized: dict[str, Any], prompts: list[str], *, run_id: UUID,
                     metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._started(run_id, metadata)

    def _started(self, run_id: UUID, metadata: Mapping[str, Any] | None) -> None:
        self.worker.check_budget()  # no model call starts past the run's budget
        node = (metadata or {}).get("langgraph_node")
        if isinstance(node, str) and node:
            with self._lock:
                self._nodes[run_id] = node[:NODE_CHARS]

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._nodes.pop(run_id, None)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            node = self._nodes.pop(run_id, None)
        for model, input_tokens, output_tokens in reports(response, default=self.model):
            if model is None:
                self._unreported_once("a model with no name (give UsageCallback(model=...))")
                continue
            if input_tokens is None or output_tokens is None:
                self._unreported_once(model)
                continue
            if node is None:
                self.worker.usage(model, input_tokens=input_tokens, output_tokens=output_tokens)
            else:
                with usages.in_step(node):
                    self.worker.usage(model, input_tokens=input_tokens,
                                      output_tokens=output_tokens)

    def _unreported_once(self, model: str) -> None:
        with self._lock:
            if model in self._unreported:
                return
            self._unreported.add(model)
        log.warning("a call of %s reported no token usage: it is not counted (its provider's "
                    "LangChain integration must fill usage_metadata)", model)


def reports(response: LLMResult, *, default: str | None = None
            ) -> list[tuple[str | None, int | None, int | None]]:
    """``(model, input tokens, output tokens)`` of each generation in ``response`` (one per
    call; the legacy ``llm_output`` form when no message carries usage)."""
    output = response.llm_output or {}
    found = []
    for generation in _flat(response.generations):
        message = getattr(generation, "message", None)
        usage = getattr(message, "usage_metadata", None)
        if not usage:
            continue
        metadata = getattr(message, "response_metadata", None) or {}
        model = metadata.get("model_name") or metadata.get("model") or output.get(
            "model_name") or default
        found.append((_name(model), _count(usage.get("input_tokens")),
                      _count(usage.get("output_tokens"))))
    if found:
        return found
    legacy = output.get("token_usage") or output.get("usage")
    if isinstance(legacy, Mapping):
        return [(_name(output.get("model_name") or output.get("model") or default),
                 _count(legacy.get("prompt_tokens", legacy.get("input_tokens"))),
                 _count(legacy.get("completion_tokens", legacy.get("output_tokens"))))]
    return [(_name(default), None, None)]


def _flat(generations: Sequence[Sequence[Any]]) -> list[Any]:
    return [g for batch in generations for g in batch]


def _name(model: Any) -> str | None:
    return model if isinstance(model, str) and model else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def with_usage(config: RunnableConfig, worker: sdk.Worker) -> RunnableConfig:
    """``config`` with a :class:`UsageCallback` of ``worker`` among its callbacks (unless
    one is there already)."""
    callbacks = config.get("callbacks")
    if callbacks is None:
        return {**config, "callbacks": [UsageCallback(worker)]}
    if isinstance(callbacks, list):
        if any(isinstance(c, UsageCallback) for c in callbacks):
            return config
        return {**config, "callbacks": [*callbacks, UsageCallback(worker)]}
    if not any(isinstance(c, UsageCallback) for c in callbacks.handlers):
        callbacks = callbacks.copy()
        callbacks.add_handler(UsageCallback(worker), inherit=True)
    return {**config, "callbacks": callbacks}
