"""Cuts (``agentrun.api.cuts``): the text a rerun writes, what it covers and what it keeps.

Covers: a cut's text parsed (a fork's inherited attempt 0 included), its coverage, bad
texts refused (attempt order, digits, a range past the bound, two in one), merging and the
earliest position left standing, at most 32 on a Lease; and that a cut discards a step's
result it covers but never an effect's intent or payload (an effect sent is a fact).
"""

from __future__ import annotations

import pytest

from agentrun.api import cuts


def test_cut_texts_parse_merge_and_refuse_what_is_out_of_bounds() -> None:
    cut = cuts.Cut.parse("2.5.1-4")
    assert (cut.start, cut.through, cut.text()) == ((2, 5, 1), 4, "2.5.1-4")
    assert cut.covers((2, 5, 1)) and cut.covers((4, 9, 0)) and not cut.covers((2, 5, 0))
    assert not cut.covers((5, 0, 0))
    assert cuts.Cut.parse("0.1.0-1").start == (0, 1, 0)  # a fork's inherited attempt 0
    for bad in ("3.0.0-2", "1.1.0-0", "00.1.0-1", "1.1-1", "1.1.1-1001", "x" * 100,
                "1.1.1-1,2.1.1-2"):
        with pytest.raises(cuts.CutError):
            cuts.Cut.parse(bad)
    merged = cuts.merged(cuts.parse_all(["3.1.0-4", "1.2.0-2", "2.7.0-3", "6.1.0-6"]))
    assert [c.text() for c in merged] == ["1.2.0-4", "6.1.0-6"]
    assert cuts.earliest([(1, 2, 0), (3, 1, 0), (7, 1, 0)], cuts=merged) == (7, 1, 0)
    with pytest.raises(cuts.CutError, match="at most 32"):
        cuts.on_lease(",".join(["1.1.0-1"] * 33))


def test_what_a_cut_keeps_whatever_it_covers() -> None:
    from agentrun.worker import _records as records
    step = records.make(key="draft", kind=records.Kind.STEP_RESULT, attempt=1, payload=1)
    intent = records.make(key="publish.intent", kind=records.Kind.EFFECT_INTENT, attempt=1,
                          payload={})
    payload = records.make(key="publish.payload", kind=records.Kind.DECISION, attempt=1,
                           payload={})
    every = [cuts.Cut(start=cuts.START, through=1)]
    assert cuts.discarded(every, record=step, position=(1, 3, 0))
    assert not cuts.discarded(every, record=intent, position=(1, 3, 1))
    assert not cuts.discarded(every, record=payload, position=(1, 3, 2))
    assert not cuts.discarded(every, record=step, position=(2, 1, 0))
