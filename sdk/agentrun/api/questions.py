"""Questions a worker asks a person: what a question may be, and whether an answer fits it.

Shared by the worker SDK (which refuses a question out of bounds at ask time) and the
operator (which checks an answer before accepting it), so both judge by the same rules.

Terms:
- *question*: a text (at most :data:`~agentrun.api.bounds.QUESTION_BYTES` UTF-8 bytes)
  and an optional *schema*, a JSON Schema (draft 2020-12) the answer must satisfy;
- *digest*: sha256 of the canonical JSON of ``{"question": ..., "schema": ...}``: an
  answer is bound to it, so a successor that asks something else is not answered by it;
- *bounded schema*: at most :data:`~agentrun.api.bounds.SCHEMA_BYTES` of canonical JSON,
  valid against the draft's metaschema, with no ``$id``, ``$dynamicRef`` or
  ``$recursiveRef`` and only local ``$ref`` (``#...``: nothing is ever fetched), and every
  ``pattern`` a regular expression RE2 accepts (:mod:`re2`, linear in its input: no
  backreference or lookaround, so no pattern can take exponential time on an answer).

Why jsonschema and RE2 rather than our own: jsonschema is the reference implementation of
the standard people write their schemas in; its ``pattern`` and ``patternProperties``
are replaced here by RE2's, the one change that bounds their cost. An answer is at most
:data:`~agentrun.api.bounds.ANSWER_VALUE_BYTES` and a schema at most ``SCHEMA_BYTES``, so
checking one is bounded too; a schema that refers to itself without descending into the
answer is refused at ask time (probed) and, should one slip through, fails the answer's
check with a message instead of looping.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from agentrun.api import bounds, records

DRAFT = "https://json-schema.org/draft/2020-12/schema"
MAX_SCHEMA_DEPTH = 16
MAX_PATTERN_CHARS = 256
MAX_ANSWER_DEPTH = 16  # levels of arrays and objects in an answer or a default
MAX_STEPS = 20_000  # keyword evaluations one check of an answer may take
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions",
                          "dependentSchemas"})
_REFUSED_KEYWORDS = ("$id", "$dynamicRef", "$recursiveRef", "$dynamicAnchor",
                     "$recursiveAnchor")


class QuestionError(ValueError):
    """A question, schema or answer out of its bounds: the message says which and why."""


def canonical(value: Any) -> bytes:
    """The bytes a value is measured and digested by: a record's canonical JSON (sorted
    keys, no spaces, UTF-8), so an answer reaches the worker byte for byte as measured."""
    try:
        return records.canonical(value)
    except records.RecordError as error:
        raise QuestionError(str(error)) from None


def digest(*, question: str, schema: Mapping[str, Any] | None) -> str:
    """What an answer is bound to (see the module docstring)."""
    return hashlib.sha256(canonical({"question": question, "schema": schema})).hexdigest()


def _options() -> Any:
    import re2  # imported when a question is checked: a worker that never asks skips it

    options = re2.Options()
    options.log_errors = False  # a refused pattern is said in our message, not on stderr
    options.max_mem = 1 << 20
    return options


def _compiled(pattern: str) -> Any:
    import re2

    if len(pattern) > MAX_PATTERN_CHARS:
        raise QuestionError(f"schema pattern {pattern[:40]!r}... is {len(pattern)} characters "
                            f"long; at most {MAX_PATTERN_CHARS}")
    try:
        return re2.compile(pattern, _options())
    except re2.error as error:
        detail = error.args[0].decode(errors="replace") if error.args and isinstance(
            error.args[0], bytes) else str(error)
        raise QuestionError(f"schema pattern {pattern!r} is not a regular expression RE2 "
                            f"runs in linear time ({detail}): no backreferences or "
                            "lookaround") from None


def _pattern(validator: Any, pattern: str, instance: Any,
             schema: Mapping[str, Any]) -> Iterator[Any]:
    import jsonschema

    if validator.is_type(instance, "string") and not _compiled(pattern).search(instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Mapping[str, Any], instance: Any,
                        schema: Mapping[str, Any]) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        compiled = _compiled(pattern)
        for name, value in instance.items():
            if compiled.search(name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _additional_properties(validator: Any, allowed: Any, instance: Any,
                           schema: Mapping[str, Any]) -> Iterator[Any]:
    """jsonschema's ``additionalProperties``, with ``patternProperties`` matched by RE2
    (jsonschema's own runs them through Python's backtracking ``re``)."""
    import jsonschema

    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties") or {}
    patterns = [_compiled(p) for p in schema.get("patternProperties") or {}]
    extras = [name for name in instance
              if name not in named and not any(p.search(name) for p in patterns)]
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif allowed is False and extras:
        listed = ", ".join(repr(name) for name in sorted(extras))
        yield jsonschema.ValidationError(f"Additional properties are not allowed ({listed} "
                                         f"{'was' if len(extras) == 1 else 'were'} unexpected)")


class _OverBudget(Exception):
    """A check took more than :data:`MAX_STEPS` keyword evaluations."""


_budget = threading.local()  # ``left``: the evaluations the running check may still take


def _counted(keyword: Callable[..., Any]) -> Callable[..., Iterator[Any]]:
    """``keyword``'s validation, counted against the running check's budget."""
    def counted(validator: Any, value: Any, instance: Any,
                schema: Mapping[str, Any]) -> Iterator[Any]:
        left = getattr(_budget, "left", None)
        if left is not None:
            if left <= 0:
                raise _OverBudget
            # uniqueItems compares every pair: its cost is counted as such
            pairs = len(instance) ** 2 // 64 if isinstance(instance, list) else 0
            _budget.left = left - 1 - pairs
        found = keyword(validator, value, instance, schema)
        if found is not None:
            yield from found
    return counted


@functools.cache
def _validator() -> Any:
    """Draft 2020-12 with RE2's ``pattern`` and ``patternProperties``, every keyword
    counted against a budget (imported on first use: jsonschema costs a worker that never
    asks nothing)."""
    import jsonschema
    from jsonschema import validators

    keywords = {**jsonschema.Draft202012Validator.VALIDATORS, "pattern": _pattern,
                "patternProperties": _pattern_properties,
                "additionalProperties": _additional_properties}
    return validators.extend(jsonschema.Draft202012Validator, validators={
        name: _counted(keyword) for name, keyword in keywords.items()})


def _resolvable(schema: Mapping[str, Any], refs: list[str]) -> None:
    """Refuse a ``$ref`` that names nothing in the schema (checked once, at ask time)."""
    from referencing import Registry
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    uri = "urn:agentrun:question"
    resolver = Registry().with_resource(
        uri=uri, resource=DRAFT202012.create_resource(dict(schema))).resolver(base_uri=uri)
    for ref in refs:
        try:
            resolver.lookup(ref)
        except (Unresolvable, ValueError, TypeError, LookupError):  # a bad pointer too
            raise QuestionError(f"the schema's $ref {ref[:80]!r} names nothing in the "
                                "schema") from None


def _walk(node: Any, *, depth: int, where: str, refs: list[str], seen: set[str]) -> None:
    """Refuse what is not bounded: depth, non-local references, patterns RE2 refuses;
    collect the local references into ``refs`` and the keywords used into ``seen``.
    Values that are data (``const``, ``enum``, ``default``, ``examples``) are not walked,
    and the names of a map of schemas (``properties``, ``$defs``, ...) are not keywords."""
    if depth > MAX_SCHEMA_DEPTH:
        raise QuestionError(f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels (at {where})")
    if isinstance(node, list):
        for n, item in enumerate(node):
            _walk(item, depth=depth + 1, where=f"{where}/{n}", refs=refs, seen=seen)
        return
    if not isinstance(node, dict):
        return
    for keyword in _REFUSED_KEYWORDS:
        if keyword in node:
            raise QuestionError(f"the schema uses {keyword} (at {where}): only local $ref "
                                "(#...) is allowed; nothing is fetched or re-based")
    ref = node.get("$ref")
    if ref is not None and not (isinstance(ref, str) and ref.startswith("#")):
        raise QuestionError(f"the schema's $ref {str(ref)[:80]!r} (at {where}) is not local: "
                            "only references inside the schema (#...) are allowed")
    if isinstance(ref, str):
        refs.append(ref)
    if isinstance(node.get("pattern"), str):
        _compiled(node["pattern"])
    if isinstance(node.get("patternProperties"), dict):
        for pattern in node["patternProperties"]:
            _compiled(pattern)
    seen.update(node)
    for name, value in node.items():
        if name in _DATA_KEYWORDS:
            continue
        if name in _SCHEMA_MAPS and isinstance(value, dict):
            for child, schema in value.items():
                _walk(schema, depth=depth + 2, where=f"{where}/{name}/{child}", refs=refs,
                      seen=seen)
            continue
        _walk(value, depth=depth + 1, where=f"{where}/{name}", refs=refs, seen=seen)


def check_question(*, question: str, schema: Mapping[str, Any] | None) -> None:
    """Raise :class:`QuestionError` unless the question and its schema are within bounds."""
    if not isinstance(question, str) or not question.strip():
        raise QuestionError("a question must be a non-blank text")
    size = len(question.encode())
    if size > bounds.QUESTION_BYTES:
        raise QuestionError(f"the question is {size} bytes (UTF-8); at most "
                            f"{bounds.QUESTION_BYTES}: put long context in a step's result "
                            "or an artifact, and ask about it")
    if schema is None:
        return
    if not isinstance(schema, dict):
        raise QuestionError("a schema must be a JSON object (a JSON Schema, draft 2020-12)")
    data = canonical(schema)
    if len(data) > bounds.SCHEMA_BYTES:
        raise QuestionError(f"the schema is {len(data)} bytes of canonical JSON; at most "
                            f"{bounds.SCHEMA_BYTES}")
    declared = schema.get("$schema")
    if declared is not None and declared not in (DRAFT, DRAFT + "#"):
        raise QuestionError(f"the schema declares $schema {str(declared)[:80]!r}; only "
                            f"{DRAFT} (draft 2020-12) is supported")
    refs: list[str] = []
    seen: set[str] = set()
    _walk(schema, depth=0, where="#", refs=refs, seen=seen)
    if {"unevaluatedProperties", "patternProperties"} <= seen:
        raise QuestionError("the schema uses unevaluatedProperties with patternProperties: "
                            "jsonschema matches those patterns with Python's backtracking "
                            "re there; use additionalProperties instead")
    import jsonschema

    try:
        _validator().check_schema(schema)
    except jsonschema.SchemaError as error:
        raise QuestionError(f"the schema is not a valid JSON Schema: {error.message}") from None
    _resolvable(schema, refs)
    violation(None, schema=schema)  # a reference loop fails here, at ask time


def violation(value: Any, *, schema: Mapping[str, Any] | None) -> str | None:
    """Why ``value`` does not satisfy ``schema`` (the schema's own message), or None.

    A schema that cannot be checked raises :class:`QuestionError`: one that loops (a
    ``$ref`` back to itself on the same value), one whose check of this value takes more
    than :data:`MAX_STEPS` keyword evaluations (a short schema can cost exponential time
    in the answer's depth: the budget bounds it), one that names what is not in it."""
    if schema is None:
        return None
    import jsonschema

    _budget.left = MAX_STEPS
    try:
        error = jsonschema.exceptions.best_match(_validator()(schema).iter_errors(value))
    except RecursionError:
        raise QuestionError("the schema refers to itself without descending into the "
                            "answer ($ref loop): it can never be checked") from None
    except _OverBudget:
        raise QuestionError(f"checking this answer against the schema takes more than "
                            f"{MAX_STEPS} steps: the schema is too costly to check it") from None
    except QuestionError:
        raise
    except Exception as failed:  # the validator's own, on a schema a worker wrote: never a crash
        raise QuestionError(f"the schema cannot be checked: {type(failed).__name__}: "
                            f"{str(failed)[:200]}") from None
    finally:
        _budget.left = None
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{error.message}" + (f" (at /{where})" if where else "")


def check_value(value: Any, *, what: str, limit: int = bounds.ANSWER_VALUE_BYTES) -> bytes:
    """The canonical JSON of an answer or default, or :class:`QuestionError` if larger
    than ``limit`` bytes or nested deeper than :data:`MAX_ANSWER_DEPTH`."""
    if records.nesting(value, limit=MAX_ANSWER_DEPTH) > MAX_ANSWER_DEPTH:
        raise QuestionError(f"{what} nests deeper than {MAX_ANSWER_DEPTH} levels of arrays "
                            "and objects")
    try:
        data = canonical(value)
    except QuestionError as error:
        raise QuestionError(f"{what}: {error}") from None
    if len(data) > limit:
        raise QuestionError(f"{what} is {len(data)} bytes of canonical JSON; at most "
                            f"{limit}")
    return data
