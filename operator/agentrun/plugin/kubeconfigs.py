"""Where the plugin's credentials come from, as kubectl finds them, and what is wrong with
them in words a person can act on.

kubectl's order: ``--kubeconfig``; else ``$KUBECONFIG`` (files separated by ``:``,
merged, the first to name a context or a ``current-context`` winning; files that do not
exist are skipped); else ``~/.kube/config``; else, in a pod, its service account.

Why the files are found and read here before the kubernetes client loads them: the
client says little a person can act on. With no file anywhere it falls back to the pod's
configuration and complains "Service host/port is not set"; a file that is not YAML
escapes it as YAML's own exception (a traceback); an unknown context is "Expected object
with name ... in contexts list". Here each is a :class:`Failure` that names the file or the
context, with its exit code: 2 when what is wrong is what was typed (``--kubeconfig``,
``--context``: bad input), 3 when it is the environment's (no configuration anywhere, a
broken file named by ``$KUBECONFIG`` or at ``~/.kube/config``: the API cannot be reached).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kubernetes
import yaml

from agentrun.plugin import requests
from agentrun.plugin.requests import Failure

MAX_BYTES = 16 << 20  # a kubeconfig with many embedded certificates is well under this
SHOWN_CONTEXTS = 10  # contexts a message lists
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
NO_CONFIG = "no kubeconfig: set KUBECONFIG or --kubeconfig, or run in a cluster"


@dataclass(frozen=True, kw_only=True)
class Found:
    """The kubeconfig files to read (none: in a pod) and who named them."""

    files: tuple[str, ...]
    named_by: str  # "--kubeconfig", "$KUBECONFIG" or "~/.kube/config"

    @property
    def code(self) -> int:
        """The exit code of a problem with these files: typed (2), else the environment's."""
        return requests.USAGE if self.named_by == "--kubeconfig" else requests.FAILED


def find(*, flag: str | None, environ: Mapping[str, str]) -> Found:
    """The files kubectl would read; :class:`Failure` when ``--kubeconfig`` names none."""
    if flag is not None:
        if not os.path.isfile(os.path.expanduser(flag)):
            raise Failure(f"--kubeconfig {flag}: no such file", code=requests.USAGE)
        return Found(files=(os.path.expanduser(flag),), named_by="--kubeconfig")
    listed = environ.get("KUBECONFIG")
    if listed:
        paths = [os.path.expanduser(path) for path in listed.split(os.pathsep) if path]
        return Found(files=tuple(path for path in paths if os.path.isfile(path)),
                     named_by="$KUBECONFIG")
    home = environ.get("HOME") or os.path.expanduser("~")
    default = os.path.join(home, ".kube", "config")
    return Found(files=(default,) if os.path.isfile(default) else (),
                 named_by="~/.kube/config")


def _read(path: str, *, code: int) -> dict[str, Any]:
    """One kubeconfig file as a mapping, or a :class:`Failure` naming it."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_BYTES + 1)
    except OSError as error:
        raise Failure(f"the kubeconfig {path} cannot be read: {error.strerror}",
                      code=code) from None
    if len(data) > MAX_BYTES:
        raise Failure(f"the kubeconfig {path} is larger than {MAX_BYTES >> 20} MiB: is it "
                      "a kubeconfig?", code=code)
    try:
        loaded = yaml.safe_load(data)
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        at = f" (line {where.line + 1}, column {where.column + 1})" if where else ""
        said = getattr(error, "problem", None) or "unreadable"
        raise Failure(f"the kubeconfig {path} is not valid YAML{at}: {said}",
                      code=code) from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise Failure(f"the kubeconfig {path} is not a kubeconfig (not a YAML mapping)",
                      code=code)
    return loaded


def _named(entries: object) -> list[dict[str, Any]]:
    if not isinstance(entries, list):
        return []
    return [entry for entry in entries
            if isinstance(entry, dict) and isinstance(entry.get("name"), str)]


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(names[:SHOWN_CONTEXTS])
    return (shown + (", ..." if len(names) > SHOWN_CONTEXTS else "")) or "none"


def choose(found: Found, *, context: str | None) -> tuple[str, str]:
    """(the context to use, its default namespace) from ``found``'s files merged as
    kubectl merges them, or a :class:`Failure` naming the file or the context."""
    contexts: dict[str, dict[str, Any]] = {}
    current = None
    for path in found.files:
        loaded = _read(path, code=found.code)
        for entry in _named(loaded.get("contexts")):
            contexts.setdefault(entry["name"], entry)
        if current is None and isinstance(loaded.get("current-context"), str):
            current = loaded["current-context"] or None
    where = ", ".join(found.files)
    names = sorted(contexts)
    if context is not None:
        if context not in contexts:
            raise Failure(f"--context {context}: no such context in the kubeconfig {where} "
                          f"(its contexts: {_listed(names)})", code=requests.USAGE)
        chosen = context
    elif current is None:
        raise Failure(f"the kubeconfig {where} sets no current-context: pass --context "
                      f"(its contexts: {_listed(names)})", code=requests.USAGE)
    elif current not in contexts:
        raise Failure(f"the kubeconfig {where} names current-context {current}, which it "
                      f"does not define (its contexts: {_listed(names)})", code=found.code)
    else:
        chosen = current
    settings = contexts[chosen].get("context")
    namespace = settings.get("namespace") if isinstance(settings, dict) else None
    return chosen, namespace if isinstance(namespace, str) and namespace else "default"


def load(*, kubeconfig: str | None, context: str | None, environ: Mapping[str, str],
         configuration: Any) -> str:
    """Fill ``configuration`` as kubectl would connect; the namespace its context names
    (else ``default``; in a pod, the pod's). A :class:`Failure` says why it cannot."""
    found = find(flag=kubeconfig, environ=environ)
    if not found.files:
        if context is None and environ.get("KUBERNETES_SERVICE_HOST"):
            return _in_cluster(configuration)
        why = (f"$KUBECONFIG names no file that exists ({environ.get('KUBECONFIG')})"
               if found.named_by == "$KUBECONFIG" else "there is no ~/.kube/config")
        raise Failure(f"{NO_CONFIG} ({why})", code=requests.FAILED)
    chosen, namespace = choose(found, context=context)
    try:
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=os.pathsep.join(found.files), context=chosen,
            client_configuration=configuration)
    except (kubernetes.config.ConfigException, OSError, ValueError, TypeError,
            AttributeError, KeyError, yaml.YAMLError) as error:
        raise Failure(f"the kubeconfig {', '.join(found.files)} (context {chosen}) cannot "
                      f"be used: {error}", code=found.code) from None
    return namespace


def _in_cluster(configuration: Any) -> str:
    """The pod's service account, and the pod's namespace."""
    try:
        kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration)
    except (kubernetes.config.ConfigException, OSError) as error:
        raise Failure(f"{NO_CONFIG} (in a pod, its service account: {error})",
                      code=requests.FAILED) from None
    try:
        with open(SERVICE_ACCOUNT, encoding="utf-8") as file:
            return file.read().strip() or "default"
    except OSError:
        return "default"


def context_names(*, kubeconfig: str | None, environ: Mapping[str, str]) -> list[str]:
    """The contexts the kubeconfig defines, for completion: none when it cannot be read."""
    try:
        found = find(flag=kubeconfig, environ=environ)
        return sorted({entry["name"] for path in found.files
                       for entry in _named(_read(path, code=found.code).get("contexts"))})
    except Failure:
        return []
