"""What the plugin says when it cannot load a configuration, without a cluster: temporary
kubeconfig files (absent, not YAML, not a kubeconfig, a context that is not in them) and
the environment kubectl reads ($KUBECONFIG, ~/.kube/config, a pod's service host).

What was typed (``--kubeconfig``, ``--context``) is bad input, exit 2; the environment's
configuration missing or broken is exit 3; each message names the file or the context."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentrun.plugin import cli, client, kubeconfigs, requests


def kubeconfig(path: Path, *, current: str | None = "a", namespace: str = "team-a") -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        **({"current-context": current} if current is not None else {}),
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u",
                                               "namespace": namespace}},
                     {"name": "b", "context": {"cluster": "c", "user": "u"}}]}))
    return path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home with no ~/.kube/config, no $KUBECONFIG, and not in a pod."""
    made = tmp_path / "home"
    made.mkdir()
    monkeypatch.setenv("HOME", str(made))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return made


def fails(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("where", ["KUBECONFIG", "home"])
def test_no_kubeconfig_anywhere_says_so_and_exits_3(
        where: str, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    if where == "KUBECONFIG":
        monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'none'}:{tmp_path / 'neither'}")
    code, err = fails(["status", "study"], capsys)
    assert code == requests.FAILED == 3
    assert err.startswith("error: no kubeconfig: set KUBECONFIG or --kubeconfig, or run in a "
                          "cluster"), err
    assert "Service host" not in err
    assert (str(tmp_path / "none") in err) == (where == "KUBECONFIG")


def test_a_kubeconfig_that_is_not_yaml_is_named(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken"
    broken.write_text("clusters: [\n")
    monkeypatch.setenv("KUBECONFIG", str(broken))
    code, err = fails(["list"], capsys)
    assert code == 3 and f"the kubeconfig {broken} is not valid YAML (line 2" in err, err
    assert "Traceback" not in err
    code, err = fails(["--kubeconfig", str(broken), "list"], capsys)  # typed: bad input
    assert code == 2 and f"the kubeconfig {broken} is not valid YAML" in err


@pytest.mark.parametrize(("text", "says"), [
    ("- a\n- b\n", "is not a kubeconfig (not a YAML mapping)"),
    ("current-context: gone\ncontexts: []\n", "names current-context gone, which it does "
                                              "not define (its contexts: none)"),
])
def test_a_kubeconfig_that_is_not_one_is_named(
        text: str, says: str, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / ".kube").mkdir()
    (home / ".kube" / "config").write_text(text)
    code, err = fails(["status", "study"], capsys)
    assert code == 3 and f"the kubeconfig {home / '.kube' / 'config'} " in err and says in err


def test_an_unknown_context_names_the_context_and_the_file(
        home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = kubeconfig(tmp_path / "config")
    code, err = fails(["--kubeconfig", str(config), "--context", "c1", "status", "study"],
                      capsys)
    assert code == 2
    assert f"--context c1: no such context in the kubeconfig {config} (its contexts: a, b)" in err
    kubeconfig(config, current=None)
    code, err = fails(["--kubeconfig", str(config), "status", "study"], capsys)
    assert code == 2 and "sets no current-context: pass --context" in err


def test_kubeconfig_files_merge_as_kubectls(home: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    first = kubeconfig(tmp_path / "first", current="b")
    second = kubeconfig(tmp_path / "second", current="a", namespace="team-z")
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent'}:{first}:{second}")
    conn = client.connect(kubeconfig=None, context=None, namespace=None)
    assert conn.namespace == "default"  # the first current-context (b: no namespace)
    assert client.connect(kubeconfig=None, context="a", namespace=None).namespace == "team-a"
    assert kubeconfigs.context_names(kubeconfig=None, environ={
        "KUBECONFIG": f"{first}:{second}"}) == ["a", "b"]
    assert kubeconfigs.context_names(kubeconfig=str(tmp_path / "none"), environ={}) == []


def test_in_a_pod_without_a_kubeconfig_the_service_account_is_used(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    loaded: list[Any] = []
    monkeypatch.setattr(kubeconfigs.kubernetes.config, "load_incluster_config",
                        lambda **kwargs: loaded.append(kwargs))
    monkeypatch.setattr(kubeconfigs, "SERVICE_ACCOUNT", str(home / "no-namespace-file"))
    assert client.connect(kubeconfig=None, context=None, namespace=None).namespace == "default"
    assert len(loaded) == 1


def test_an_unknown_namespace_is_said_when_the_object_is_not_found(
        capsys: pytest.CaptureFixture[str]) -> None:
    class Rest:
        def __init__(self, namespace: Any) -> None:
            self.namespace = namespace

        def get(self, path: str, *, query: Any = None) -> Any:
            if path.startswith("/api/v1/namespaces/"):
                if isinstance(self.namespace, Exception):
                    raise self.namespace
                return self.namespace
            return None  # the run

    def read(namespace: Any) -> requests.Failure:
        conn = client.Connection(rest=Rest(namespace), namespace="tema-a")  # type: ignore[arg-type]
        with pytest.raises(requests.Failure) as failed:
            client.get(conn, "agentruns", "study")
        assert failed.value.code == requests.USAGE
        return failed.value
    assert str(read(None)) == "namespace 'tema-a' does not exist (check -n and --context)"
    assert "agentruns/study not found in namespace 'tema-a'" in str(read({"metadata": {}}))
    # A person who may not read namespaces is not told it is missing: it may well exist.
    forbidden = client.rest.ApiError(403, json.dumps({"message": "forbidden"}))
    assert "agentruns/study not found" in str(read(forbidden))
