"""make test's driver refuses a bad worker count before it starts anything."""

from __future__ import annotations

import pytest

from tests.support.cluster import session


@pytest.mark.parametrize("argv", [["--workers", "0"], ["--workers", "17"], ["--workers", "x"]])
def test_a_bad_worker_count_is_refused_with_its_value(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        session.main(argv)
    assert refused.value.code == 2
    assert "--workers" in capsys.readouterr().err


def test_a_bad_worker_count_from_the_environment_is_refused(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AGENTRUN_TEST_WORKERS", "many")
    with pytest.raises(SystemExit) as refused:
        session.main([])
    assert refused.value.code == 2
    assert "invalid int value: 'many'" in capsys.readouterr().err
