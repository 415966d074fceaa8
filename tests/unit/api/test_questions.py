"""A question's schema and an answer's check (``agentrun.api.questions``), where the cost of
checking is what is at stake: RE2 wherever jsonschema would match a pattern with Python's
``re`` (``pattern``, ``patternProperties``, ``additionalProperties``), ``unevaluatedProperties``
beside ``patternProperties`` refused, every ``$ref`` resolvable (a bad pointer is a
QuestionError, never another error), data keywords not taken for schemas, and the step
budget: per check, per thread, reset after it is spent."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from agentrun.api import questions

BACKTRACKS = {"patternProperties": {"^(a|a)+$": {}}, "additionalProperties": False}
COSTLY = {"$defs": {"a": {"allOf": [{"items": {"$ref": "#/$defs/a"}},
                                    {"items": {"$ref": "#/$defs/a"}}]}}, "$ref": "#/$defs/a"}


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def test_additional_properties_match_the_patterns_with_re2() -> None:
    questions.check_question(question="q", schema=BACKTRACKS)
    started = time.monotonic()
    found = questions.violation({"a" * 50 + "!": 1}, schema=BACKTRACKS)
    assert time.monotonic() - started < 0.5  # Python's re takes minutes here
    assert found is not None and "Additional properties are not allowed" in found
    assert questions.violation({"aaa": 1}, schema=BACKTRACKS) is None
    typed = {"patternProperties": {"^x": {"type": "integer"}},
             "additionalProperties": {"type": "string"}}
    assert questions.violation({"x1": 1, "other": "s"}, schema=typed) is None
    assert "is not of type 'string'" in (questions.violation({"other": 1}, schema=typed) or "")


@pytest.mark.parametrize(("schema", "says"), [
    ({"patternProperties": {"a": {}}, "unevaluatedProperties": False}, "unevaluatedProperties"),
    ({"allOf": [{}], "$ref": "#/allOf/x"}, "names nothing"),
    ({"allOf": [{}], "$ref": "#/allOf/-"}, "names nothing"),
    ({"$ref": "#/$defs/a~2"}, "names nothing"),
])
def test_schemas_refused_when_asked(schema: dict[str, Any], says: str) -> None:
    with pytest.raises(questions.QuestionError, match=says):
        questions.check_question(question="q", schema=schema)


def test_data_and_names_are_not_keywords() -> None:
    schema = {"properties": {"$ref": {"type": "string"}, "$id": {}},
              "enum": [{"$ref": "https://x"}], "default": {"$id": "x"},
              "examples": [{"$dynamicRef": "#a"}]}
    questions.check_question(question="q", schema=schema)


def test_the_budget_is_per_check_per_thread_and_reset() -> None:
    with pytest.raises(questions.QuestionError, match="too costly"):
        questions.violation(nested(15), schema=COSTLY)
    assert questions.violation(nested(4), schema=COSTLY) is None  # a fresh budget
    results: list[str | None] = []

    def check() -> None:
        results.append(questions.violation(nested(6), schema=COSTLY))
    threads = [threading.Thread(target=check) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [None] * 8


def test_unique_items_counts_its_pairs() -> None:
    schema = {"$defs": {"u": {"allOf": [{"uniqueItems": True}] * 4}},
              "allOf": [{"$ref": "#/$defs/u"}] * 8}
    questions.check_question(question="q", schema=schema)
    started = time.monotonic()
    with pytest.raises(questions.QuestionError, match="too costly"):
        questions.violation(list(range(200)), schema=schema)
    assert time.monotonic() - started < 2
