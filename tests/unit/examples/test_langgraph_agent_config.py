"""The LangGraph example's entrypoint refuses bad configuration before anything runs."""

from __future__ import annotations

import pytest

from agentrun.examples import langgraph_agent


@pytest.mark.parametrize(("name", "value", "said"), [
    ("AGENTRUN_EXAMPLE_ROUNDS", "0", "AGENTRUN_EXAMPLE_ROUNDS is a whole number 1..2000"),
    ("AGENTRUN_EXAMPLE_ROUNDS", "2001", "1..2000, not '2001'"),
    ("AGENTRUN_EXAMPLE_ROUNDS", "²", "not '²'"),
    ("AGENTRUN_EXAMPLE_PAUSE", "superstep:x y@1", "is not a point"),
    ("AGENTRUN_EXAMPLE_PAUSE", "superstep:3", "is not <point>@<attempt>"),
    ("AGENTRUN_EXAMPLE_PAUSE", "superstep:abc@1", "a superstep's key is its number"),
])
def test_bad_settings_exit_2_saying_which(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str], name: str,
                                          value: str, said: str) -> None:
    monkeypatch.setenv(name, value)
    assert langgraph_agent.main() == langgraph_agent.EXIT_CONFIG
    assert said in capsys.readouterr().err


def test_outside_a_pod_it_exits_2_naming_what_is_missing(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("AGENTRUN_EXAMPLE_ROUNDS", "AGENTRUN_EXAMPLE_PAUSE"):
        monkeypatch.delenv(name, raising=False)
    assert langgraph_agent.main() == langgraph_agent.EXIT_CONFIG
    assert capsys.readouterr().err.startswith("langgraph_agent: ")


def test_a_superstep_pause_is_a_point() -> None:
    from agentrun.examples import faults
    assert faults.parse("superstep:12@3,after-call:publish@4") == {
        "superstep:12": {3}, "after-call:publish": {4}}
