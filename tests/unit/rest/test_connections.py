"""Where the API server is and how to log in, read as kubectl reads it (no cluster: the
files are the input). Covers: a kubeconfig's token, token file (re-read), client
certificate (inline data to a private file), CA relative to its file, insecure flag,
several files merged with the first winning, every unreadable case with a message that
names it, an exec login without the kubernetes package, the pod's service account, and
the kubernetes package's configuration read as a connection.
"""

from __future__ import annotations

import base64
import builtins
import stat
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from agentrun import rest
from agentrun.rest import _connections as connections


def kubeconfig(path: Path, *, user: dict[str, Any], cluster: dict[str, Any] | None = None,
               context: str = "dev", current: str | None = "dev") -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        **({"current-context": current} if current is not None else {}),
        "clusters": [{"name": "c", "cluster": cluster or {
            "server": "https://127.0.0.1:6443/", "certificate-authority": "ca.crt"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}}]}))
    return path


def test_a_token_and_a_ca_relative_to_the_file(tmp_path: Path) -> None:
    found = rest.from_kubeconfig(paths=[kubeconfig(tmp_path / "config", user={"token": "t0"})])
    assert found.server == "https://127.0.0.1:6443"
    assert found.ca_file == str(tmp_path / "ca.crt")
    assert found.verify and found.cert_file is None and found.key_file is None
    assert found.authorization() == "Bearer t0"


def test_a_token_file_is_read_again_when_a_minute_old(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("first\n")
    now = [1000.0]
    monkeypatch.setattr(connections.time, "monotonic", lambda: now[0])
    found = rest.from_kubeconfig(paths=[kubeconfig(tmp_path / "config",
                                                   user={"tokenFile": "token"})])
    assert found.authorization() == "Bearer first"
    (tmp_path / "token").write_text("second")  # the kubelet rotated it
    assert found.authorization() == "Bearer first"  # within the minute: the one read
    now[0] += connections.TOKEN_REREAD_SECONDS + 1
    assert found.authorization() == "Bearer second"


def test_inline_certificates_go_to_private_files(tmp_path: Path) -> None:
    user = {"client-certificate-data": base64.b64encode(b"CERT").decode(),
            "client-key-data": base64.b64encode(b"KEY").decode()}
    cluster = {"server": "https://h:1", "certificate-authority-data":
               base64.b64encode(b"CA").decode(), "insecure-skip-tls-verify": True}
    found = rest.from_kubeconfig(paths=[kubeconfig(tmp_path / "c", user=user, cluster=cluster)])
    assert found.cert_file and found.key_file and found.ca_file
    assert [Path(p).read_bytes() for p in (found.cert_file, found.key_file, found.ca_file)] == [
        b"CERT", b"KEY", b"CA"]
    assert stat.S_IMODE(Path(found.key_file).stat().st_mode) == 0o600
    assert not found.verify and found.authorization() is None


def test_files_merge_and_the_first_to_name_an_entry_wins(tmp_path: Path) -> None:
    first = kubeconfig(tmp_path / "a", user={"token": "a"}, context="one", current="one")
    second = kubeconfig(tmp_path / "b", user={"token": "b"}, context="two", current="two")
    assert rest.from_kubeconfig(paths=[first, second]).authorization() == "Bearer a"
    # "two" is only in the second file, but its user "u" is the first file's
    assert rest.from_kubeconfig(paths=[first, second], context="two").authorization() == (
        "Bearer a")
    assert rest.connect(environ={"KUBECONFIG": f"{second}:{first}"}).authorization() == (
        "Bearer b")


@pytest.mark.parametrize(("change", "message"), [
    ({"current": None}, "sets no current-context"),
    ({"context": "other"}, "has no context 'dev'"),
    ({"cluster": {"certificate-authority": "x"}}, "names a cluster with no server"),
])
def test_what_cannot_be_read_is_named(tmp_path: Path, change: dict[str, Any],
                                      message: str) -> None:
    path = kubeconfig(tmp_path / "config", user={"token": "t"}, **change)
    with pytest.raises(rest.ConnectionError, match=message):
        rest.from_kubeconfig(paths=[path])


def test_a_broken_file_and_no_file_are_named(tmp_path: Path) -> None:
    (tmp_path / "list").write_text("- a\n- b\n")
    (tmp_path / "bad").write_text("a: [\n")
    with pytest.raises(rest.ConnectionError, match="is not a mapping"):
        rest.from_kubeconfig(paths=[tmp_path / "list"])
    with pytest.raises(rest.ConnectionError, match="cannot read the kubeconfig"):
        rest.from_kubeconfig(paths=[tmp_path / "bad"])
    with pytest.raises(rest.ConnectionError, match="no kubeconfig"):
        rest.from_kubeconfig(paths=[])
    with pytest.raises(rest.ConnectionError, match="not in a pod"):
        rest.connect(environ={"KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path)})


def test_an_exec_login_needs_the_kubernetes_package(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = kubeconfig(tmp_path / "config", user={"exec": {"command": "login-helper"}})
    real = builtins.__import__

    def without_kubernetes(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "kubernetes":
            raise ImportError("No module named 'kubernetes'")
        return real(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", without_kubernetes)
    with pytest.raises(rest.ConnectionError, match=r"pip install kubernetes"):
        rest.from_kubeconfig(paths=[path])


def test_in_a_pod_the_service_account(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("pod-token")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    found = rest.in_cluster(environ=env, account=tmp_path)
    assert found.server == "https://[fd00::1]:443"
    assert found.ca_file == str(tmp_path / "ca.crt")
    assert found.authorization() == "Bearer pod-token"
    with pytest.raises(rest.ConnectionError, match="cannot read the token"):
        rest.in_cluster(environ=env, account=tmp_path / "none")
    (tmp_path / "token").write_text("")
    with pytest.raises(rest.ConnectionError, match="is empty"):
        rest.in_cluster(environ=env, account=tmp_path)


def test_the_kubernetes_packages_configuration_is_read_as_a_connection() -> None:
    configuration = kubernetes.client.Configuration(host="https://10.0.0.1:6443")
    configuration.api_key = {"authorization": "Bearer from-exec"}
    configuration.ssl_ca_cert = "/ca"
    found = rest.of(kubernetes.client.ApiClient(configuration))
    assert (found.server, found.ca_file, found.verify) == ("https://10.0.0.1:6443", "/ca", True)
    assert found.authorization() == "Bearer from-exec"
    assert rest.of(found) is found
