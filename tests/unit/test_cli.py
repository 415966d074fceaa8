"""The operator's flags: defaults as documented, and every bound refused with its reason."""

from __future__ import annotations

import pytest

from agentrun import cli


def test_the_defaults_are_the_documented_ones() -> None:
    args = cli.parse(["run"])
    assert (args.workers, args.qps, args.burst, args.reconcile_timeout) == (5, 100.0, 150, 60.0)


def test_qps_zero_means_no_limit() -> None:
    assert cli.parse(["run", "--qps", "0"]).qps == 0.0


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--workers", "0", "--workers must be between 1 and 64, not 0"),
    ("--workers", "65", "between 1 and 64"),
    ("--workers", "2.5", "--workers must be a whole number"),
    ("--qps", "-1", "--qps must be between 0 and 10000"),
    ("--qps", "nan", "between 0 and 10000"),
    ("--qps", "inf", "between 0 and 10000"),
    ("--burst", "0", "--burst must be between 1 and 20000"),
    ("--reconcile-timeout", "0.5", "between 1 and 3600"),
])
def test_out_of_bounds_is_refused_clearly(flag: str, value: str, says: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.parse(["run", flag, value])
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


def test_tick_is_gone() -> None:
    with pytest.raises(SystemExit):
        cli.parse(["run", "--tick", "1"])
