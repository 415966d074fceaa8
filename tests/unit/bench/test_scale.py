"""bench/scale/'s options: bad input is a clear error and exit 2, before any cluster."""

from __future__ import annotations

import pytest

from bench.scale import __main__ as scale


@pytest.mark.parametrize(("argv", "said"), [
    (["--slots", "150"], "multiple of --nodes"),
    (["--slots", "2000,1000"], "growing sizes"),
    (["--slots", "1000,x"], "comma-separated integers"),
    (["--slots", "30000"], "1..20000"),
    (["--nodes", "300"], "argument --nodes: 300 is not from 1 to 100"),
    (["--lease", "5"], "argument --lease: 5 is not from 60 to 3600"),
    (["--lease", "600", "--renew-every", "600"], "--renew-every must be in"),
    (["--window", "0"], "--window must be in 1..600"),
    (["--arenas", "-1"], "argument --arenas: -1 is not from 0 to 64"),
])
def test_bad_options_exit_2_with_the_reason(argv: list[str], said: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        scale.parse(argv)
    assert stopped.value.code == 2
    assert said in capsys.readouterr().err


def test_defaults_renew_a_third_of_the_lease() -> None:
    args = scale.parse(["--slots", "200,1000", "--lease", "300"])
    assert args.sizes == [200, 1000] and args.renew_every == 100.0


def test_the_table_gives_rss_per_1000_slots_above_idle() -> None:
    def point(slots: int, rss: float) -> scale.Point:
        return scale.Point(slots=slots, rss_mib=rss, cpu=0.0, reads=0.0, own_reads=0.0,
                           audited_reads=0.0, apiserver_mib=0.0, etcd_mib=0.0)

    text = scale.table([point(0, 60.0), point(2000, 100.0)], [])
    assert "| 2,000 | 100 MiB | 20.0 MiB |" in text
