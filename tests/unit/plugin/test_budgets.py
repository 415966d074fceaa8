"""The plugin's budget command before it writes anything (the operator's bounds, exit 2),
and how the tree shows a run's usage and budget."""

from __future__ import annotations

import pytest

from agentrun.plugin import budgets, requests, views


@pytest.mark.parametrize(("add", "add_cost", "reason", "said"), [
    (None, None, "more", "give --add TOKENS, --add-cost AMOUNT, or both"),
    ("-5", None, "more", "--add is a whole number of tokens"),
    ("0", None, "more", "--add is a whole number of tokens"),
    ("1" * 17, None, "more", "--add is a whole number of tokens"),
    (None, "0", "more", "--add-cost is a positive decimal"),
    (None, "1,5", "more", "--add-cost is a positive decimal"),
    (None, "1.1234567", "more", "--add-cost is a positive decimal"),
    ("5", None, "   ", "--reason is required"),
    ("5", None, "x" * 1025, "--reason is required"),
])
def test_a_raise_out_of_its_bounds_is_refused_before_any_write(
        add: str | None, add_cost: str | None, reason: str, said: str) -> None:
    with pytest.raises(requests.BadInput, match=said.replace("+", r"\+")):
        budgets.check(add=add, add_cost=add_cost, reason=reason)
    budgets.check(add="5", add_cost="2.50", reason="the report is worth it")


def test_the_tree_says_what_was_used_of_which_budget() -> None:
    assert views.spent(None) == "none"
    assert views.spent({"inputTokens": 1000, "outputTokens": 200, "costMicros": 6000,
                        "currency": "EUR"}) == "1200 tokens (1000 in, 200 out), 0.006 EUR"
    assert views.limits({"tokens": 740, "currency": "EUR", "raises": 1}) == (
        "740 tokens (raised 1 time)")
    assert views.limits({"costMicros": 2_500_000, "currency": "USD", "raises": 2}) == (
        "2.5 USD (raised 2 times)")
