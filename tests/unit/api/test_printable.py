"""What people and workers write, shown escaped: ``bounds.printable`` and the condition
messages built with it (an Event's: tests/unit/kube/test_events.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agentrun.api import bounds, conditions


@pytest.mark.parametrize(("sent", "shown"), [
    ("plain text, é, 👩‍💻, tab-free", "plain text, é, 👩‍💻, tab-free"),
    ("line\nbreak\r", "line\\x0abreak\\x0d"),
    ("\x1b[31mred\x7f\x85", "\\x1b[31mred\\x7f\\x85"),
    ("a\tb\x00", "a\\x09b\\x00"),
    ("\u202eevil\u2066\u200f", "\\u202eevil\\u2066\\u200f"),
    ("one\u2028two\u2029", "one\\u2028two\\u2029"),
    ("no\u00a0break\u200dkept", "no\u00a0break\u200dkept"),  # not controls: kept
])
def test_controls_and_bidi_are_escaped_the_rest_kept(sent: str, shown: str) -> None:
    assert bounds.printable(sent) == shown
    assert bounds.printable(shown) == shown  # an escape is plain text: nothing twice


def test_a_condition_message_is_escaped_then_clipped() -> None:
    at = datetime(2030, 1, 1, tzinfo=UTC)
    made = conditions.set_condition([], type_="Reopened", status="True", reason="Reassigned",
                                    message="why:\n" + "x" * 2000, now=at)
    assert made[0].message.startswith("why:\\x0axxx")
    assert len(made[0].message) == bounds.MESSAGE_CHARS
