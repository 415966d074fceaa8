"""Where the API server is and how to log in, read as kubectl reads it (no cluster: the
files are the input), and what a request carries. Covers: a kubeconfig's token, token file
(re-read, preferred, the last good one kept), client certificate (inline data to a private
file), CA relative to its file, insecure flag (refused beside a CA), TLS server name,
proxies (the kubeconfig's, the environment's, NO_PROXY), several files merged with the
first winning, every unreadable case with a message that names it, an exec login with and
without the kubernetes package, the pod's service account (and the fall back to it), the
kubernetes package's configuration read as a connection, and a request's headers, query
and body on a loopback server.
"""

from __future__ import annotations

import base64
import builtins
import json
import stat
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

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
               base64.b64encode(b"CA").decode()}
    found = rest.from_kubeconfig(paths=[kubeconfig(tmp_path / "c", user=user, cluster=cluster)])
    assert found.cert_file and found.key_file and found.ca_file
    assert [Path(p).read_bytes() for p in (found.cert_file, found.key_file, found.ca_file)] == [
        b"CERT", b"KEY", b"CA"]
    assert stat.S_IMODE(Path(found.key_file).stat().st_mode) == 0o600
    assert found.verify and found.authorization() is None
    insecure = rest.from_kubeconfig(paths=[kubeconfig(
        tmp_path / "d", user=user, cluster={"server": "https://h:1",
                                            "insecure-skip-tls-verify": True})])
    assert not insecure.verify and insecure.ca_file is None


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
    with pytest.raises(rest.ConfigError, match=message):
        rest.from_kubeconfig(paths=[path])


def test_a_broken_file_and_no_file_are_named(tmp_path: Path) -> None:
    (tmp_path / "list").write_text("- a\n- b\n")
    (tmp_path / "bad").write_text("a: [\n")
    with pytest.raises(rest.ConfigError, match="is not a mapping"):
        rest.from_kubeconfig(paths=[tmp_path / "list"])
    with pytest.raises(rest.ConfigError, match="cannot read the kubeconfig"):
        rest.from_kubeconfig(paths=[tmp_path / "bad"])
    with pytest.raises(rest.ConfigError, match="no kubeconfig"):
        rest.from_kubeconfig(paths=[])
    with pytest.raises(rest.ConfigError, match="not in a pod"):
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
    with pytest.raises(rest.ConfigError, match=r"pip install kubernetes"):
        rest.from_kubeconfig(paths=[path])


def test_in_a_pod_the_service_account(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("pod-token")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    found = rest.in_cluster(environ=env, account=tmp_path)
    assert found.server == "https://[fd00::1]:443"
    assert found.ca_file == str(tmp_path / "ca.crt")
    assert found.authorization() == "Bearer pod-token"
    with pytest.raises(rest.ConfigError, match="cannot read the token"):
        rest.in_cluster(environ=env, account=tmp_path / "none")
    (tmp_path / "token").write_text("")
    with pytest.raises(rest.ConfigError, match="is empty"):
        rest.in_cluster(environ=env, account=tmp_path)


def test_the_kubernetes_packages_configuration_is_read_as_a_connection() -> None:
    configuration = kubernetes.client.Configuration(host="https://10.0.0.1:6443")
    configuration.api_key = {"authorization": "Bearer from-exec"}
    configuration.ssl_ca_cert = "/ca"
    found = rest.of(kubernetes.client.ApiClient(configuration))
    assert (found.server, found.ca_file, found.verify) == ("https://10.0.0.1:6443", "/ca", True)
    assert found.authorization() == "Bearer from-exec"
    assert rest.of(found) is found


def test_a_token_file_wins_over_the_token_and_its_last_good_read_stays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(connections.time, "monotonic", lambda: now[0])
    (tmp_path / "token").write_text("from-file")
    found = rest.from_kubeconfig(paths=[kubeconfig(
        tmp_path / "config", user={"token": "inline", "tokenFile": "token"})])
    assert found.authorization() == "Bearer from-file"
    (tmp_path / "token").unlink()  # mid-rotation
    now[0] += connections.TOKEN_REREAD_SECONDS + 1
    assert found.authorization() == "Bearer from-file"


def test_tls_server_name_proxies_and_no_proxy(tmp_path: Path) -> None:
    cluster = {"server": "https://10.0.0.9:6443", "tls-server-name": "api.internal",
               "proxy-url": "http://proxy.local:3128"}
    found = rest.from_kubeconfig(paths=[kubeconfig(tmp_path / "a", user={"token": "t"},
                                                   cluster=cluster)], environ={})
    assert (found.tls_server_name, found.proxy) == ("api.internal", "http://proxy.local:3128")
    pools = rest.Rest(found).pools
    assert type(pools).__name__ == "ProxyManager"
    assert pools.connection_pool_kw["server_hostname"] == "api.internal"
    plain = kubeconfig(tmp_path / "b", user={"token": "t"},
                       cluster={"server": "https://api.example.com:6443"})
    env = {"HTTPS_PROXY": "http://proxy.local:3128"}
    assert rest.from_kubeconfig(paths=[plain], environ=env).proxy == "http://proxy.local:3128"
    for spared in ("example.com", ".example.com", "*", "api.example.com:6443"):
        assert rest.from_kubeconfig(
            paths=[plain], environ={**env, "NO_PROXY": f"other.org,{spared}"}).proxy is None
    ip = kubeconfig(tmp_path / "c", user={"token": "t"}, cluster={"server": "https://10.1.2.3"})
    assert rest.from_kubeconfig(paths=[ip], environ={**env, "no_proxy": "10.0.0.0/8"}).proxy is None
    assert type(rest.Rest(rest.from_kubeconfig(paths=[ip], environ={})).pools).__name__ == (
        "PoolManager")


def test_a_ca_with_insecure_and_bad_inline_data_are_refused(tmp_path: Path) -> None:
    both = {"server": "https://h:1", "certificate-authority": "ca.crt",
            "insecure-skip-tls-verify": True}
    with pytest.raises(rest.ConfigError, match="insecure-skip-tls-verify is not allowed"):
        rest.from_kubeconfig(paths=[kubeconfig(tmp_path / "a", user={}, cluster=both)])
    bad = {"client-certificate-data": "not base64!", "client-key-data": "a2V5"}
    with pytest.raises(rest.ConfigError, match=r"client-certificate-data .* is not base64"):
        rest.from_kubeconfig(paths=[kubeconfig(tmp_path / "b", user=bad)])


def test_no_current_context_gives_way_to_the_pods_account(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("pod")
    monkeypatch.setattr(connections, "SERVICE_ACCOUNT", tmp_path)
    path = kubeconfig(tmp_path / "config", user={"token": "t"}, current=None)
    env = {"KUBECONFIG": str(path), "KUBERNETES_SERVICE_HOST": "10.96.0.1",
           "KUBERNETES_SERVICE_PORT": "443"}
    assert rest.connect(environ=env).server == "https://10.96.0.1:443"
    with pytest.raises(rest.ConfigError, match="sets no current-context"):
        rest.connect(environ={"KUBECONFIG": str(path)})
    # Any other fault of an explicit kubeconfig is said, even in a pod: no silent switch.
    (tmp_path / "broken").write_text("a: [\n")
    with pytest.raises(rest.ConfigError, match="cannot read the kubeconfig"):
        rest.connect(environ={**env, "KUBECONFIG": str(tmp_path / "broken")})


def test_an_exec_login_runs_through_the_kubernetes_package_from_the_same_files(
        tmp_path: Path) -> None:
    plugin = tmp_path / "login.py"
    plugin.write_text("import json\nprint(json.dumps({'apiVersion': "
                      "'client.authentication.k8s.io/v1', 'kind': 'ExecCredential', "
                      "'status': {'token': 'from-exec'}}))\n")
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                     "command": sys.executable, "args": [str(plugin)],
                     "interactiveMode": "Never"}}
    cluster = {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}
    path = kubeconfig(tmp_path / "config", user=user, cluster=cluster)  # not $KUBECONFIG
    found = rest.from_kubeconfig(paths=[path])
    assert found.authorization() == "Bearer from-exec"
    assert found.server == "https://127.0.0.1:6443" and not found.verify


class Recorder(BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, Any]]] = []

    def handle_one(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.seen.append({"method": self.command, "path": self.path,
                          "headers": dict(self.headers),
                          "body": self.rfile.read(length) if length else b""})
        answer = json.dumps({"kind": "Lease"}).encode()
        self.send_response(404 if "missing" in self.path else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_GET = do_PATCH = handle_one

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Recorder.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_request_carries_the_credential_query_and_merge_patch(server: str) -> None:
    tokens = iter(["Bearer one", "Bearer two", "Bearer three"])
    client = rest.Rest(rest.Connection(server=server, authorization=lambda: next(tokens)))
    client.request("GET", "/apis/x/v1/namespaces/n/leases",
                   query={"labelSelector": "agentrun.dev/slot=s,agentrun.dev/run in (a,b)"})
    client.request("PATCH", "/apis/x/v1/namespaces/n/leases/l", body={"a": 1},
                   content_type=rest.MERGE_PATCH)
    assert client.get("/apis/x/v1/missing") is None
    first, second, _ = Recorder.seen
    assert first["path"] == ("/apis/x/v1/namespaces/n/leases?labelSelector=agentrun.dev%2F"
                             "slot%3Ds%2Cagentrun.dev%2Frun+in+%28a%2Cb%29")
    assert first["headers"]["Authorization"] == "Bearer one"
    assert first["headers"]["User-Agent"].startswith("agentrun")
    assert second["headers"]["Authorization"] == "Bearer two"  # asked again: rotated
    assert second["headers"]["Content-Type"] == rest.MERGE_PATCH
    assert json.loads(second["body"]) == {"a": 1}


def test_a_credential_that_fails_is_no_blind_time(server: str) -> None:
    def failing() -> str:
        raise rest.ConfigError("the token file is gone")
    client = rest.Rest(rest.Connection(server=server, authorization=failing))
    with pytest.raises(rest.ConfigError):
        client.request("GET", "/api/v1/namespaces")
    assert not client.health.blind() and Recorder.seen == []


def test_the_environments_proxy_by_scheme_never_for_loopback(tmp_path: Path) -> None:
    def proxy(server: str, env: dict[str, str]) -> str | None:
        path = kubeconfig(tmp_path / "k", user={"token": "t"}, cluster={"server": server})
        return rest.from_kubeconfig(paths=[path], environ=env).proxy
    both = {"HTTPS_PROXY": "http://secure.proxy:3128", "HTTP_PROXY": "http://plain.proxy:80"}
    assert proxy("https://api.example.com", both) == "http://secure.proxy:3128"
    assert proxy("http://api.example.com", both) == "http://plain.proxy:80"
    for loopback in ("http://127.0.0.1:8080", "https://localhost:6443", "https://[::1]:6443"):
        assert proxy(loopback, both) is None  # the local harness, kind, minikube
    assert proxy("https://api.example.com", {"https_proxy": "proxy.corp:3128"}) == (
        "http://proxy.corp:3128")  # no scheme: http, as Go reads it
    with pytest.raises(rest.ConfigError, match=r"\$HTTPS_PROXY is a socks5 proxy"):
        proxy("https://api.example.com", {"HTTPS_PROXY": "socks5://proxy.corp:1080"})


def test_a_proxys_credentials_become_its_authorization_header(tmp_path: Path) -> None:
    pools = rest.Rest(rest.Connection(server="https://api.example.com",
                                      proxy="https://us%40er:p%3Ass@proxy.corp:3128")).pools
    assert pools.proxy is not None and pools.proxy.host == "proxy.corp"
    assert pools.proxy.auth is None  # not in the URL the pool keeps
    expected = "Basic " + base64.b64encode(b"us@er:p:ss").decode()
    assert pools.proxy_headers["proxy-authorization"] == expected


class Held(BaseHTTPRequestHandler):
    """Answers only once ``barrier`` has every request in hand: they are all open at once."""

    protocol_version = "HTTP/1.1"  # keep-alive: a connection goes back to the pool
    barrier: ClassVar[threading.Barrier]

    def do_GET(self) -> None:
        Held.barrier.wait(timeout=30)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *_: object) -> None:
        pass


@pytest.mark.parametrize("kept", [4, 12])
def test_threads_over_the_connections_kept_open_more_and_drop_them(
        kept: int, caplog: pytest.LogCaptureFixture) -> None:
    """12 threads at once through one client: with 12 kept, every connection goes back to
    the pool; with 4, urllib3 drops the other 8 after use (each a new handshake next time),
    which is why the operator keeps as many as its reconcile threads."""
    threads = 12
    Held.barrier = threading.Barrier(threads)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Held)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    client = rest.Rest(rest.Connection(server=f"http://127.0.0.1:{httpd.server_address[1]}"),
                       connections=kept)
    answers: list[object] = []
    try:
        with caplog.at_level("WARNING", logger="urllib3.connectionpool"):
            workers = [threading.Thread(target=lambda: answers.append(client.get("/x")))
                       for _ in range(threads)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join(timeout=30)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert answers == [{}] * threads
    dropped = [r for r in caplog.records if "Connection pool is full" in r.getMessage()]
    assert len(dropped) == threads - kept if kept < threads else not dropped
