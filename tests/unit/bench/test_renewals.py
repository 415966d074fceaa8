"""bench/renewals/'s pure parts: its figures and its options (bad input: exit 2)."""

from __future__ import annotations

import pytest

from bench.renewals import __main__ as renewals


def figures(**changed: float) -> renewals.Figures:
    base: dict[str, float] = dict(workers=40, lease=15, seconds=60.0, renew_changes=480,
                                  lease_writes=480, worker_requests=480, apiserver_cpu=12.0,
                                  operator_cpu=0.6, operator_requests=48)
    base.update(changed)
    return renewals.Figures(**base)  # type: ignore[arg-type]


def test_the_expected_rate_is_workers_over_the_renewal_interval() -> None:
    # a 15 s lease renews every 5 s: 40 workers make 8 renewals a second
    assert figures().expected_rate == pytest.approx(8.0)
    assert figures().rate == pytest.approx(8.0)
    assert figures().ratio == pytest.approx(1.0)
    assert figures(renew_changes=240).ratio == pytest.approx(0.5)


def test_costs_are_per_renewal_and_none_without_renewals() -> None:
    assert figures().per_renewal(12.0) == pytest.approx(0.025)
    assert figures(renew_changes=0).per_renewal(12.0) is None
    assert figures(seconds=0.0).rate == 0.0


def test_the_table_says_each_figure() -> None:
    text = renewals.table(figures())
    assert "| ratio measured / expected | 1.00 |" in text
    assert "| expected: 40 / 5.00 s | 8.00 |" in text
    assert "| API-server CPU-seconds per renewal (etcd inside) | 0.0250 |" in text
    assert "| operator CPU-seconds per renewal | 0.0013 |" in text
    assert "| renewTime changes (watch) | 480 |" in renewals.table(figures())
    assert "| operator CPU-seconds per renewal | - |" in renewals.table(
        figures(renew_changes=0))


def test_defaults() -> None:
    args = renewals.parse([])
    assert (args.workers, args.lease, args.window) == (40, 15, 60)


@pytest.mark.parametrize(("argv", "said"), [
    (["--workers", "0"], "0 is not from 1 to 100"),
    (["--workers", "101"], "101 is not from 1 to 100"),
    (["--lease", "4"], "4 is not from 5 to 60"),
    (["--lease", "61"], "61 is not from 5 to 60"),
    (["--window", "x"], "'x' is not an integer"),
    (["--window", "601"], "601 is not from 5 to 600"),
])
def test_bad_options_are_a_clear_error(argv: list[str], said: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        renewals.parse(argv)
    assert exited.value.code == 2
    assert said in capsys.readouterr().err


def test_requests_are_said_most_first() -> None:
    assert renewals.said({"get secrets": 3, "get namespaces": 1, "get a": 3}) == (
        "get a 3, get secrets 3, get namespaces 1")
    assert renewals.said({}) == "none"
