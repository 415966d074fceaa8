"""What the LangChain callback reads of a model call's result: the provider's usage on
the message (or the legacy ``llm_output`` form), the model's name, and nothing invented."""

from __future__ import annotations

from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, Generation, LLMResult

from agentrun.worker.langgraph._usage import reports, with_usage


def chat(**message: object) -> ChatGeneration:
    return ChatGeneration(message=AIMessage(content="x", **message))  # type: ignore[arg-type]


def test_usage_on_the_message_with_the_model_it_names() -> None:
    result = LLMResult(generations=[[chat(
        usage_metadata={"input_tokens": 7, "output_tokens": 2, "total_tokens": 9},
        response_metadata={"model_name": "gpt-x"})], [chat(
            usage_metadata={"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
            response_metadata={"model": "claude-y"})]])
    assert reports(result) == [("gpt-x", 7, 2), ("claude-y", 1, 1)]


def test_the_legacy_form_and_the_default_name() -> None:
    result = LLMResult(generations=[[Generation(text="x")]], llm_output={
        "token_usage": {"prompt_tokens": 11, "completion_tokens": 3}})
    assert reports(result, default="old-model") == [("old-model", 11, 3)]
    named = LLMResult(generations=[[Generation(text="x")]], llm_output={
        "model_name": "m", "usage": {"input_tokens": 5, "output_tokens": 6}})
    assert reports(named) == [("m", 5, 6)]


def test_no_usage_is_reported_as_none_never_guessed() -> None:
    assert reports(LLMResult(generations=[[chat(response_metadata={"model_name": "m"})]]),
                   default="m") == [("m", None, None)]
    assert reports(LLMResult(generations=[[Generation(text="x")]], llm_output={
        "token_usage": {"prompt_tokens": "many", "completion_tokens": True}})) == [
            (None, None, None)]


def test_the_callback_is_added_once_to_a_list_or_a_manager() -> None:
    from langchain_core.callbacks import CallbackManager

    worker = object()
    once = with_usage({}, worker)  # type: ignore[arg-type]
    assert len(once["callbacks"]) == 1  # type: ignore[arg-type]
    assert with_usage(once, worker) == once  # type: ignore[arg-type]
    manager = CallbackManager(handlers=[])
    added = with_usage({"callbacks": manager}, worker)  # type: ignore[arg-type]
    assert len(added["callbacks"].handlers) == 1 and not manager.handlers  # type: ignore[union-attr]
