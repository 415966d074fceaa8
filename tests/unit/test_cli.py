"""The operator's flags: defaults as documented, and every bound refused with its reason."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agentrun import cli
from agentrun.api.runs import JournalSettings
from agentrun.kube import ownnamespace


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
    ("--history-port", "70000", "--history-port must be between 0 and 65535"),
    ("--history-port", "8443.5", "--history-port must be a whole number"),
    ("--history-address", "localhost", "--history-address must be an IP address"),
    ("--metrics-address", "localhost", "--metrics-address must be an IP address"),
    ("--identity", "Operator_A", "--identity must be this replica's pod name"),
    ("--identity", "a" * 254, "--identity must be this replica's pod name"),
    ("--identity", "a-", "--identity must be this replica's pod name"),
    ("--leader-election-lease", "1", "--leader-election-lease must be between 2 and 300"),
    ("--leader-election-renew-deadline", "nan", "between 1 and 299"),
    ("--leader-election-retry-period", "0.1", "between 0.2 and 60"),
    ("--otlp-endpoint", "collector:4318", "is not an http(s) URL of a host"),
    ("--otlp-endpoint", "http://c/?q", "is not an http(s) URL of a host"),
    ("--otlp-endpoint", "http://c/" + "a" * 2048, "at most 2048"),
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


# --- the journal store: flags checked where parsed, both-or-neither, into settings --------

JOURNAL = ["--journal-endpoint", "http://minio.storage:9000", "--journal-bucket", "journals"]


def test_no_journal_flags_no_journal() -> None:
    assert cli.parse(["run"]).journal is None


def test_journal_flags_become_settings_with_defaults() -> None:
    found = cli.parse(["run", *JOURNAL]).journal
    assert found == JournalSettings(endpoint="http://minio.storage:9000", bucket="journals",
                                    prefix="agentrun", region="us-east-1", secret=None)
    every = cli.parse(["run", *JOURNAL, "--journal-prefix", "platform/runs", "--journal-region",
                       "eu-west-1", "--journal-secret", "agentrun-journal"]).journal
    assert every is not None
    assert (every.prefix, every.region, every.secret) == (
        "platform/runs", "eu-west-1", "agentrun-journal")
    assert found is not None
    at_root = cli.parse(["run", *JOURNAL, "--journal-prefix", ""]).journal
    assert at_root == found.model_copy(update={"prefix": ""})


@pytest.mark.parametrize(("args", "says"), [
    (["--journal-endpoint", "http://minio:9000"], "--journal-endpoint and --journal-bucket go "
                                                  "together"),
    (["--journal-bucket", "journals"], "given: --journal-bucket"),
    (["--journal-secret", "agentrun-journal"], "go together"),
    (["--journal-prefix", "p"], "go together"),
    (["--journal-retention-seconds", "60"], "given: --journal-retention-seconds"),
])
def test_a_partial_journal_is_refused(args: list[str], says: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.parse(["run", *args])
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--journal-endpoint", "minio:9000", "the journal endpoint must be an http:// or https://"),
    ("--journal-endpoint", "http://minio:9000/path", "no path"),
    ("--journal-endpoint", "http://minio:99999", "between 1 and 65535"),
    ("--journal-endpoint", "http://" + "m" * 600, "at most 512 characters"),
    ("--journal-bucket", "Journals", "the journal bucket must be an S3 bucket name"),
    ("--journal-bucket", "ab", "S3 bucket name"),
    ("--journal-prefix", "/abs", "no leading or trailing '/'"),
    ("--journal-prefix", "a/../b", "no '.' or '..' segment"),
    ("--journal-prefix", "p" * 412, "at most 411 characters"),
    ("--journal-region", "r" * 65, "at most 64 characters"),
    ("--journal-secret", "Keys", "the journal Secret must be a Secret's name"),
    ("--journal-secret", "journal-keys", "the only Secret name the operator may read"),
    ("--journal-retention-seconds", "-1", "between 0 and 315360000"),
    ("--journal-retention-seconds", "315360001", "between 0 and 315360000"),
    ("--journal-retention-seconds", "1.5", "must be a whole number"),
])
def test_journal_flags_out_of_bounds_are_refused_clearly(
        flag: str, value: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.parse(["run", *JOURNAL, flag, value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: " in err and says in err


def test_leader_election_is_off_unless_asked_and_its_timing_is_ordered(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "agentrun-operator-5d9c-x2")
    assert cli.parse(["run"]).election is None
    args = cli.parse(["run", "--leader-elect"])
    assert args.election == cli.leadership.Timing() and args.identity == "agentrun-operator-5d9c-x2"
    with pytest.raises(SystemExit) as exited:  # each in bounds, not in order
        cli.parse(["run", "--leader-elect", "--leader-election-lease", "5",
                   "--leader-election-renew-deadline", "6"])
    assert exited.value.code == 2
    assert "retry (2) < renew deadline (6) < lease (5)" in capsys.readouterr().err
    monkeypatch.setenv("POD_NAME", "Not A Pod")
    with pytest.raises(SystemExit):
        cli.parse(["run", "--leader-elect"])
    assert "$POD_NAME: --identity must be this replica's pod name" in capsys.readouterr().err


def test_off_cluster_the_identity_is_the_host_made_a_name_and_unique(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_NAME", raising=False)
    monkeypatch.setattr(cli.socket, "gethostname", lambda: "Dev_Box.local")
    first, second = cli.default_identity(), cli.default_identity()
    assert first.startswith("dev-box.local-") and first != second
    assert cli.identity(first) == first


def test_an_ambient_endpoint_that_is_not_otlp_http_is_logged_and_tracing_is_off(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A platform may set $OTEL_EXPORTER_OTLP_ENDPOINT for every pod (a gRPC host:port):
    not the operator's to refuse; the flag, which only a person sets, is checked."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")
    with caplog.at_level(logging.WARNING):
        tracing = cli.start_tracing(flag=None, identity="op")
    assert tracing is not None and not tracing.on
    assert "tracing is off: $OTEL_EXPORTER_OTLP_ENDPOINT: the OTLP endpoint" in caplog.text


def test_malformed_sdk_settings_stop_the_start_with_what_to_fix(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "-5")
    assert cli.start_tracing(flag="http://127.0.0.1:9", identity="op") is None
    assert "tracing could not start:" in capsys.readouterr().err
    monkeypatch.delenv("OTEL_BSP_MAX_QUEUE_SIZE")
    tracing = cli.start_tracing(flag="http://127.0.0.1:9", identity="op")
    assert tracing is not None and tracing.on
    tracing.shutdown()


def test_the_operator_namespace_is_the_pods_unless_a_flag_names_another(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Both commands learn it (``run``'s leader Lease and Secrets, ``stamping``'s Secret):
    from ``$POD_NAMESPACE`` (the chart's Deployment sets it), or ``--operator-namespace``;
    neither and no pod: the plain manifests' namespace. ``--namespace`` stays the watched
    namespaces'."""
    monkeypatch.setattr(ownnamespace, "SERVICE_ACCOUNT_FILE", tmp_path / "missing")
    monkeypatch.delenv(ownnamespace.ENV, raising=False)
    assert cli.parse(["run"]).own_namespace == ownnamespace.Found(
        name="agentrun-system", source=ownnamespace.DEFAULT_SOURCE)
    monkeypatch.setenv(ownnamespace.ENV, "agentrun-ops")
    args = cli.parse(["run", "--namespace", "team-a"])
    assert (args.own_namespace.name, args.namespace) == ("agentrun-ops", ["team-a"])
    assert cli.parse(["stamping"]).own_namespace == ownnamespace.Found(
        name="agentrun-ops", source="$POD_NAMESPACE")
    assert cli.parse(["run", "--operator-namespace", "other"]).own_namespace == \
        ownnamespace.Found(name="other", source="--operator-namespace")


@pytest.mark.parametrize(("flag", "says"), [
    ("Not A Namespace", "--operator-namespace must be a namespace name"),
    ("", "--operator-namespace must be a namespace name"),  # refused, not skipped
    ("default", "--operator-namespace names default, which cannot be the operator's"),
    ("kube-system", "--operator-namespace names kube-system, which cannot be the operator's"),
])
def test_an_operator_namespace_that_cannot_be_its_stops_the_start(
        flag: str, says: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 2, as for any bad flag, before anything starts (no client, no election)."""
    monkeypatch.setenv(ownnamespace.ENV, "agentrun-ops")  # a usable one the flag overrides
    for command in ("run", "stamping"):
        with pytest.raises(SystemExit) as exited:
            cli.main([command, "--operator-namespace", flag])
        assert exited.value.code == 2
        assert says in capsys.readouterr().err


def test_a_pod_in_a_refused_namespace_does_not_start(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(ownnamespace.ENV, "kube-public")
    with pytest.raises(SystemExit) as exited:
        cli.main(["run"])
    assert exited.value.code == 2
    assert "$POD_NAMESPACE names kube-public" in capsys.readouterr().err


def test_the_start_says_which_operator_namespace_and_from_where(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The first lines tell a flag that overrode the pod's namespace from the pod's own."""
    monkeypatch.setenv(ownnamespace.ENV, "agentrun-ops")
    monkeypatch.setattr(cli, "configure_logging", lambda **_: None)  # the test's logging
    used: list[str] = []

    def stamping(*, context: str | None, timeout: float, operator_namespace: str) -> int:
        used.append(operator_namespace)
        return 0

    monkeypatch.setattr(cli, "stamping", stamping)
    with caplog.at_level(logging.INFO, logger="agentrun"):
        assert cli.main(["stamping"]) == 0
        assert cli.main(["stamping", "--operator-namespace", "platform-ops"]) == 0
    assert used == ["agentrun-ops", "platform-ops"]
    assert "the operator's namespace is agentrun-ops (from $POD_NAMESPACE)" in caplog.text
    assert ("the operator's namespace is platform-ops (from --operator-namespace)"
            in caplog.text)
