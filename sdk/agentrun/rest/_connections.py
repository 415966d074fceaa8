"""Where the API server is and how to prove who we are: a :class:`Connection`.

Why our own reader of kubeconfigs and of the pod's service account, and not the
``kubernetes`` package's: that package (and the ``requests``, ``oauthlib``,
``google-auth`` and ``websocket`` it brings) is most of a worker image's install and
half of its import time, for a worker that needs only a server address, a CA and a
token. Here is what a worker uses: in a pod, the service account (its token re-read
from the projected file, which the kubelet rotates); outside one, a kubeconfig's
server, CA, token (or token file) or client certificate. A kubeconfig whose user needs
an ``exec`` plugin or an ``auth-provider`` (cloud logins) is read by the ``kubernetes``
package when it is installed (the operator's distribution has it); without it, the
error says to install it. The operator and the plugin build their connections from the
``kubernetes`` package's configuration (:func:`of`), which knows every kind of login.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# The kubelet rewrites a projected token well before it expires (at 80% of its life, an
# hour at the least); re-reading it each minute is far inside that.
TOKEN_REREAD_SECONDS = 60.0


class ConnectionError(Exception):
    """No way to reach the API server was found, or the one named cannot be read."""


def _no_authorization() -> str | None:
    return None


@dataclass(frozen=True, kw_only=True)
class Connection:
    """The API server's URL, the files to trust and to present, and the credential.

    ``authorization`` is asked before each request (the value of the ``Authorization``
    header, or None), so a rotated token is used as soon as it is written.
    """

    server: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    authorization: Callable[[], str | None] = field(default=_no_authorization, repr=False)


def of(source: Any) -> Connection:
    """A :class:`Connection` from itself, or from the ``kubernetes`` package's
    ``ApiClient`` or ``Configuration`` (read, not imported: its server, TLS files and
    the credential its loader resolved, exec plugins included)."""
    if isinstance(source, Connection):
        return source
    config = getattr(source, "configuration", source)

    def authorization() -> str | None:
        value = (config.get_api_key_with_prefix("BearerToken")
                 or config.get_api_key_with_prefix("authorization"))
        return str(value) if value else None

    return Connection(server=str(config.host), ca_file=config.ssl_ca_cert,
                      cert_file=config.cert_file, key_file=config.key_file,
                      verify=bool(config.verify_ssl), authorization=authorization)


def connect(*, context: str | None = None,
            environ: Mapping[str, str] = os.environ) -> Connection:
    """The API for ``context`` of ``$KUBECONFIG`` (or ``~/.kube/config``), else the pod's
    service account (in-cluster), as ``kubectl`` and client-go choose."""
    paths = kubeconfig_paths(environ=environ)
    if paths or context is not None:
        return from_kubeconfig(paths=paths, context=context)
    return in_cluster(environ=environ)


def kubeconfig_paths(*, environ: Mapping[str, str] = os.environ) -> list[Path]:
    """The kubeconfig files that exist: ``$KUBECONFIG``'s list, else ``~/.kube/config``."""
    named = environ.get("KUBECONFIG")
    candidates = ([Path(part) for part in named.split(os.pathsep) if part] if named
                  else [Path(environ.get("HOME", "~")).expanduser() / ".kube" / "config"])
    return [path for path in candidates if path.is_file()]


def in_cluster(*, environ: Mapping[str, str] = os.environ,
               account: Path = SERVICE_ACCOUNT) -> Connection:
    """The pod's own: the ``kubernetes`` Service's variables and its service account."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConnectionError("no kubeconfig ($KUBECONFIG or ~/.kube/config) and not in a "
                              "pod (KUBERNETES_SERVICE_HOST/PORT are not set)")
    token = _TokenFile(account / "token")
    token.read()  # fail now, not at the first request, when the pod has no token
    host = f"[{host}]" if ":" in host else host
    return Connection(server=f"https://{host}:{port}", ca_file=str(account / "ca.crt"),
                      authorization=token.authorization)


class _TokenFile:
    """A bearer token read from a file, again when the last read is a minute old."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._token = ""
        self._read_at = float("-inf")

    def read(self) -> str:
        try:
            token = self.path.read_text().strip()
        except OSError as error:
            raise ConnectionError(f"cannot read the token {self.path}: {error}") from error
        if not token:
            raise ConnectionError(f"the token file {self.path} is empty")
        return token

    def authorization(self) -> str:
        with self._lock:
            if time.monotonic() - self._read_at > TOKEN_REREAD_SECONDS:
                self._token, self._read_at = self.read(), time.monotonic()
            return f"Bearer {self._token}"


def from_kubeconfig(*, paths: list[Path], context: str | None = None) -> Connection:
    """The connection a kubeconfig's ``context`` (else its current context) names."""
    if not paths:
        raise ConnectionError("no kubeconfig: $KUBECONFIG names no file and "
                              "~/.kube/config does not exist")
    merged = _merged(paths)
    name = context or merged["current-context"]
    if not name:
        raise ConnectionError(f"the kubeconfig ({_names(paths)}) sets no current-context; "
                              "name one with --context")
    entry = merged["contexts"].get(name)
    if entry is None:
        raise ConnectionError(f"the kubeconfig ({_names(paths)}) has no context {name!r}")
    cluster = merged["clusters"].get(entry.get("cluster"))
    user = merged["users"].get(entry.get("user"), {})
    if cluster is None or not cluster.get("server"):
        raise ConnectionError(f"context {name!r} names a cluster with no server in "
                              f"the kubeconfig ({_names(paths)})")
    if "exec" in user or "auth-provider" in user:
        return _through_kubernetes(context=name)
    return Connection(
        server=str(cluster["server"]).rstrip("/"),
        ca_file=_file(cluster, "certificate-authority"),
        cert_file=_file(user, "client-certificate"),
        key_file=_file(user, "client-key"),
        verify=not cluster.get("insecure-skip-tls-verify", False),
        authorization=_authorization(user))


def _names(paths: list[Path]) -> str:
    return os.pathsep.join(str(path) for path in paths)


def _merged(paths: list[Path]) -> dict[str, Any]:
    """The files' entries merged as kubectl does: the first file to name one wins."""
    merged: dict[str, Any] = {"current-context": "", "contexts": {}, "clusters": {},
                              "users": {}}
    import yaml  # here: a worker in its pod reads no kubeconfig

    for path in paths:
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as error:
            raise ConnectionError(f"cannot read the kubeconfig {path}: {error}") from error
        if not isinstance(loaded, dict):
            raise ConnectionError(f"the kubeconfig {path} is not a mapping")
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
        handle, name = tempfile.mkstemp(prefix="agentrun-kubeconfig-")
        with os.fdopen(handle, "wb") as file:  # mkstemp's file is the owner's alone
            file.write(base64.b64decode(data))
        atexit.register(_remove, name)
        return name
    path = entry.get(key)
    return str(_relative(entry, str(path))) if path else None


def _remove(name: str) -> None:
    with contextlib.suppress(OSError):  # already gone: nothing to remove
        os.unlink(name)


def _authorization(user: Mapping[str, Any]) -> Callable[[], str | None]:
    if user.get("token"):
        header = f"Bearer {user['token']}"
        return lambda: header
    if user.get("tokenFile"):
        return _TokenFile(_relative(user, str(user["tokenFile"]))).authorization
    if user.get("username"):
        pair = f"{user['username']}:{user.get('password', '')}".encode()
        header = f"Basic {base64.b64encode(pair).decode()}"
        return lambda: header
    return _no_authorization


def _through_kubernetes(*, context: str) -> Connection:
    """A login only the ``kubernetes`` package knows (an exec plugin, an auth-provider)."""
    try:
        import kubernetes  # the operator's distribution has it; the SDK's need not
    except ImportError as error:
        raise ConnectionError(
            f"context {context!r} logs in through an exec plugin or an auth-provider, "
            "which the worker SDK reads only with the kubernetes package installed "
            "(pip install kubernetes), or use a token or a client certificate") from error
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
        context=context, client_configuration=configuration)
    return of(configuration)
