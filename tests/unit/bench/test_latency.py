"""bench/latency/'s pure pieces: the Job's failedIndexes, the percentiles, the options."""

from __future__ import annotations

import pytest

from bench.latency.__main__ import main
from bench.latency.support import attempt_outcome, indexes, ledger_outcome, percentile


def test_failed_indexes_are_read_as_the_job_controller_writes_them() -> None:
    assert indexes(None) == set()
    assert indexes("") == set()
    assert indexes("1,3-5,9") == {1, 3, 4, 5, 9}


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 201)]
    assert percentile(values, 50) == 100.0
    assert percentile(values, 99) == 198.0
    assert percentile([7.0], 99) == 7.0


def test_status_lists_are_looked_up_by_their_key() -> None:
    slot = {"status": {"attempts": [{"number": 1, "outcome": "Failed"}, {"number": 2}],
                       "commands": [{"requestId": "r", "outcome": "Accepted"}]}}
    assert attempt_outcome(slot, 1) == "Failed"
    assert attempt_outcome(slot, 2) is None
    assert attempt_outcome(slot, 3) is None
    assert ledger_outcome(slot, "r") == "Accepted"
    assert ledger_outcome({}, "r") is None


@pytest.mark.parametrize("argv", [["--count", "10"], ["--count", "30", "--nodes", "20"],
                                  ["--every", "0"], ["--alone-every", "x"]])
def test_bad_options_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
