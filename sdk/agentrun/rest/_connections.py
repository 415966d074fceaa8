"""Where the API server is and how to prove who we are: a :class:`Connection`.

Why our own reader of kubeconfigs and of the pod's service account, and not the
``kubernetes`` package's: that package (and the ``requests``, ``oauthlib``,
``google-auth`` and ``websocket`` it brings) is most of a worker image's install and
half of its import time, for a worker that needs only a server address, a CA and a
token. Here is what a worker uses: in a pod, the service account (its token re-read
from the projected file, which the kubelet rotates); outside one, a kubeconfig's
server, CA, TLS server name, proxy, token (or token file), client certificate or basic
login, as kubectl reads them. A kubeconfig whose user needs an ``exec`` plugin or an
``auth-provider`` (cloud logins) is read by the ``kubernetes`` package when it is
installed (the operator's distribution has it); without it, the error says to install
it. The operator and the plugin build their connections from the ``kubernetes``
package's configuration (:func:`of`), which knows every kind of login.

A proxy comes from the kubeconfig's ``proxy-url``, else from ``HTTPS_PROXY`` (``HTTP_PROXY``
for an ``http://`` server) unless the server is loopback or ``NO_PROXY`` spares it, as
client-go's ``ProxyFromEnvironment`` does, in a pod too: a pod that sets a proxy for its
model APIs must list the API server's address in ``NO_PROXY``. Only HTTP(S) proxies.
"""

from __future__ import annotations

import atexit
import base64
import binascii
import contextlib
import ipaddress
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# The kubelet rewrites a projected token well before it expires (at 80% of its life, an
# hour at the least); re-reading it each minute is far inside that.
TOKEN_REREAD_SECONDS = 60.0


class ConfigError(OSError):
    """No way to reach the API server was found, or the one named cannot be read.

    An :class:`OSError`, as an unreachable server is: a caller that retries one (the
    lease keeper, when a rotated token file cannot be read for a moment) retries both.
    """


class NoContext(ConfigError):
    """The kubeconfig names no current context: the one case that gives way to the
    pod's own account, as client-go's loader does for an empty configuration."""


def _no_authorization() -> str | None:
    return None


@dataclass(frozen=True, kw_only=True)
class Connection:
    """The API server's URL, the files to trust and to present, and the credential.

    ``authorization`` is asked before each request (the value of the ``Authorization``
    header, or None), so a rotated token is used as soon as it is written.
    ``tls_server_name`` is the name the server's certificate is checked against when it
    is not the URL's host; ``proxy`` the HTTP(S) proxy's URL, if requests go through one.
    """

    server: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    tls_server_name: str | None = None
    proxy: str | None = None
    proxy_headers: Mapping[str, str] | None = None
    authorization: Callable[[], str | None] = field(default=_no_authorization, repr=False)


def of(source: Any) -> Connection:
    """A :class:`Connection` from itself, or from the ``kubernetes`` package's
    ``ApiClient`` or ``Configuration`` (read, not imported: its server, TLS, proxy and
    the credential its loader resolved, exec plugins included)."""
    if isinstance(source, Connection):
        return source
    config = getattr(source, "configuration", source)

    def authorization() -> str | None:
        value = (config.get_api_key_with_prefix("BearerToken")
                 or config.get_api_key_with_prefix("authorization"))
        return str(value) if value else None

    ca_file = config.ssl_ca_cert
    ca_data = getattr(config, "ca_cert_data", None)
    if ca_file is None and ca_data:
        ca_file = _private(ca_data.encode() if isinstance(ca_data, str) else ca_data)
    proxy = getattr(config, "proxy", None)
    spared = getattr(config, "no_proxy", None)
    if proxy and spared and _spared(urlsplit(str(config.host)).hostname or "", str(spared)):
        proxy = None
    proxy = _proxy_url(str(proxy), source="the kubernetes configuration's proxy") if (
        proxy) else None
    return Connection(server=str(config.host), ca_file=ca_file,
                      cert_file=config.cert_file, key_file=config.key_file,
                      verify=bool(config.verify_ssl),
                      tls_server_name=getattr(config, "tls_server_name", None) or None,
                      proxy=proxy,
                      proxy_headers=getattr(config, "proxy_headers", None) or None,
                      authorization=authorization)


def connect(*, context: str | None = None,
            environ: Mapping[str, str] = os.environ) -> Connection:
    """The API for ``context`` of ``$KUBECONFIG`` (or ``~/.kube/config``), else the pod's
    service account (in-cluster), as ``kubectl`` and client-go choose: a kubeconfig that
    names no current context gives way to the pod's account when there is one."""
    paths = kubeconfig_paths(environ=environ)
    if not paths and context is None:
        return in_cluster(environ=environ)
    try:
        return from_kubeconfig(paths=paths, context=context, environ=environ)
    except NoContext:
        if context is None and environ.get("KUBERNETES_SERVICE_HOST"):
            return in_cluster(environ=environ)
        raise


def kubeconfig_paths(*, environ: Mapping[str, str] = os.environ) -> list[Path]:
    """The kubeconfig files that exist: ``$KUBECONFIG``'s list, else ``~/.kube/config``."""
    named = environ.get("KUBECONFIG")
    candidates = ([Path(part) for part in named.split(os.pathsep) if part] if named
                  else [Path(environ.get("HOME", "~")).expanduser() / ".kube" / "config"])
    return [path for path in candidates if path.is_file()]


def in_cluster(*, environ: Mapping[str, str] = os.environ,
               account: Path | None = None) -> Connection:
    """The pod's own: the ``kubernetes`` Service's variables and its service account
    (``account``: the folder its files are mounted in, :data:`SERVICE_ACCOUNT`)."""
    account = SERVICE_ACCOUNT if account is None else account
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError("no kubeconfig ($KUBECONFIG or ~/.kube/config) and not in a "
                          "pod (KUBERNETES_SERVICE_HOST/PORT are not set)")
    token = _TokenFile(account / "token")
    token.authorization()  # fail now, not at the first request, when the pod has no token
    host = f"[{host}]" if ":" in host else host
    server = f"https://{host}:{port}"
    return Connection(server=server, ca_file=str(account / "ca.crt"),
                      proxy=_environment_proxy(server, environ=environ),
                      authorization=token.authorization)


def _environment_proxy(server: str, *, environ: Mapping[str, str]) -> str | None:
    """``HTTPS_PROXY`` (``HTTP_PROXY`` for an ``http://`` server, either in lower case
    too) unless ``server`` is loopback or ``NO_PROXY`` spares it."""
    parts = urlsplit(server)
    names = ("HTTPS_PROXY", "https_proxy") if parts.scheme == "https" else (
        "HTTP_PROXY", "http_proxy")
    name = next((name for name in names if environ.get(name)), None)
    host = parts.hostname or ""
    spared = environ.get("NO_PROXY") or environ.get("no_proxy") or ""
    if name is None or _loopback(host) or _spared(host, spared):
        return None
    return _proxy_url(environ[name], source=f"${name}")


def _loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _proxy_url(value: str, *, source: str) -> str:
    """A proxy's URL (``http://`` when it names none); only HTTP(S) proxies are spoken."""
    url = value if "://" in value else f"http://{value}"
    scheme = urlsplit(url).scheme.lower()
    if scheme not in ("http", "https"):
        raise ConfigError(f"{source} is a {scheme} proxy ({value[:100]}): only http and "
                          "https proxies are supported")
    return url


def _spared(host: str, no_proxy: str) -> bool:
    """Does ``NO_PROXY`` (a comma list: ``*``, names matched with their subdomains, IP
    addresses and CIDR ranges, as Go's ``httpproxy``) spare ``host``?"""
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = (
            ipaddress.ip_address(host))
    except ValueError:
        address = None
    for entry in (part.strip().lower() for part in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        if address is not None and "/" in entry:
            with contextlib.suppress(ValueError):
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            continue
        name = entry.removeprefix("*").removeprefix(".").rsplit(":", 1)[0] if (
            entry.count(":") == 1) else entry.removeprefix("*").removeprefix(".")
        if host.lower() == name or host.lower().endswith("." + name):
            return True
    return False


class _TokenFile:
    """A bearer token read from a file, again when the last read is a minute old; while
    a read fails (a rotation half done), the last token read stays in use."""

    def __init__(self, path: Path, *, first: str = "") -> None:
        self.path = path
        self._lock = threading.Lock()
        self._token = first
        self._read_at = float("-inf")

    def read(self) -> str:
        try:
            token = self.path.read_text().strip()
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"cannot read the token {self.path}: {error}") from error
        if not token:
            raise ConfigError(f"the token file {self.path} is empty")
        return token

    def authorization(self) -> str:
        with self._lock:
            if time.monotonic() - self._read_at > TOKEN_REREAD_SECONDS:
                try:
                    self._token, self._read_at = self.read(), time.monotonic()
                except ConfigError:
                    if not self._token:
                        raise
            return f"Bearer {self._token}"


def from_kubeconfig(*, paths: list[Path], context: str | None = None,
                    environ: Mapping[str, str] = os.environ) -> Connection:
    """The connection a kubeconfig's ``context`` (else its current context) names."""
    if not paths:
        raise ConfigError("no kubeconfig: $KUBECONFIG names no file and "
                          "~/.kube/config does not exist")
    merged = _merged(paths)
    name = context or merged["current-context"]
    if not name:
        raise NoContext(f"the kubeconfig ({_names(paths)}) sets no current-context; "
                        "name one with --context")
    entry = merged["contexts"].get(name)
    if entry is None:
        raise ConfigError(f"the kubeconfig ({_names(paths)}) has no context {name!r}")
    cluster = merged["clusters"].get(entry.get("cluster"))
    user = merged["users"].get(entry.get("user"), {})
    if cluster is None or not cluster.get("server"):
        raise ConfigError(f"context {name!r} names a cluster with no server in "
                          f"the kubeconfig ({_names(paths)})")
    if "exec" in user or "auth-provider" in user:
        return _through_kubernetes(paths=paths, context=name)
    insecure = bool(cluster.get("insecure-skip-tls-verify", False))
    ca_file = _file(cluster, "certificate-authority")
    if insecure and ca_file:
        raise ConfigError(f"context {name!r}: a certificate authority together with "
                          "insecure-skip-tls-verify is not allowed (as in kubectl)")
    server = str(cluster["server"]).rstrip("/")
    return Connection(
        server=server, ca_file=ca_file,
        cert_file=_file(user, "client-certificate"), key_file=_file(user, "client-key"),
        verify=not insecure, tls_server_name=cluster.get("tls-server-name") or None,
        proxy=(_proxy_url(str(cluster["proxy-url"]), source=f"context {name!r}'s proxy-url")
               if cluster.get("proxy-url") else _environment_proxy(server, environ=environ)),
        authorization=_authorization(user))


def _names(paths: list[Path]) -> str:
    return os.pathsep.join(str(path) for path in paths)


def _merged(paths: list[Path]) -> dict[str, Any]:
    """The files' entries merged as kubectl does: the first file to name one wins."""
    import yaml  # here: a worker in its pod reads no kubeconfig

    merged: dict[str, Any] = {"current-context": "", "contexts": {}, "clusters": {},
                              "users": {}}
    for path in paths:
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
            raise ConfigError(f"cannot read the kubeconfig {path}: {error}") from error
        if not isinstance(loaded, dict):
            raise ConfigError(f"the kubeconfig {path} is not a mapping")
        merged["current-context"] = merged["current-context"] or loaded.get(
            "current-context") or ""
        for kind, key in (("contexts", "context"), ("clusters", "cluster"),
                          ("users", "user")):
            for item in loaded.get(kind) or []:
                if isinstance(item, dict) and isinstance(item.get(key), dict):
                    merged[kind].setdefault(item.get("name"),
                                            {**item[key], "_from": str(path)})
    return merged


def _relative(entry: Mapping[str, Any], path: str) -> Path:
    """A path in a kubeconfig entry: relative to the file that holds the entry."""
    return Path(entry.get("_from") or ".").parent / path


def _file(entry: Mapping[str, Any], key: str) -> str | None:
    """A TLS file's path: the kubeconfig's own (relative to its file), or its inline
    ``-data`` written to a private file removed when the process ends."""
    data = entry.get(f"{key}-data")
    if data:
        try:
            decoded = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError, TypeError) as error:
            raise ConfigError(f"{key}-data in the kubeconfig {entry.get('_from')} is not "
                              f"base64: {error}") from error
        return _private(decoded)
    path = entry.get(key)
    return str(_relative(entry, str(path))) if path else None


def _private(data: bytes) -> str:
    """``data`` in a file only this user may read, removed when the process ends."""
    handle, name = tempfile.mkstemp(prefix="agentrun-kubeconfig-")
    with os.fdopen(handle, "wb") as file:  # mkstemp's file is the owner's alone
        file.write(data)
    atexit.register(_remove, name)
    return name


def _remove(name: str) -> None:
    with contextlib.suppress(OSError):  # already gone: nothing to remove
        os.unlink(name)


def _authorization(user: Mapping[str, Any]) -> Callable[[], str | None]:
    """The user's credential, as client-go ranks them: a token file (its last good read
    wins over ``token``), a token, a basic login, else none (a client certificate)."""
    if user.get("tokenFile"):
        return _TokenFile(_relative(user, str(user["tokenFile"])),
                          first=str(user.get("token") or "")).authorization
    if user.get("token"):
        header = f"Bearer {user['token']}"
        return lambda: header
    if user.get("username"):
        pair = f"{user['username']}:{user.get('password', '')}".encode()
        header = f"Basic {base64.b64encode(pair).decode()}"
        return lambda: header
    return _no_authorization


def _through_kubernetes(*, paths: list[Path], context: str) -> Connection:
    """A login only the ``kubernetes`` package knows (an exec plugin, an auth-provider),
    from the same files."""
    try:
        import kubernetes  # the operator's distribution has it; the SDK's need not
    except ImportError as error:
        raise ConfigError(
            f"context {context!r} logs in through an exec plugin or an auth-provider, "
            "which the worker SDK reads only with the kubernetes package installed "
            "(pip install kubernetes), or use a token or a client certificate") from error
    configuration = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=_names(paths), context=context, client_configuration=configuration)
    except Exception as error:  # its loader's ConfigException and whatever an exec raises
        raise ConfigError(f"context {context!r}: {error}") from error
    return of(configuration)
