"""Which namespace this operator is installed in, learnt once at start.

The chart installs into any namespace, and the operator keeps its own objects there (the
leader Lease, the fencing token, the stamping Secret, the history API's certificate); the
admission policies the chart renders name the same namespace. So the running operator
must not assume one: it asks, in this order,

1. ``--operator-namespace``, when given (a person's explicit choice wins; given empty, it
   is refused, never skipped: an empty value is a mistake, not a wish for the default);
2. ``$POD_NAMESPACE``, which the chart's Deployment sets from the downward API
   (``metadata.namespace``), as it sets ``$POD_NAME``;
3. the pod's service-account namespace file, which the kubelet mounts with the token
   (a pod run without the chart's env);
4. :data:`~agentrun.api.names.OPERATOR_NAMESPACE`: a run outside the cluster
   (``make operator``), against the plain manifests, which install there.

Whatever the source, :data:`REFUSED` names are refused, and the operator does not start
(exit 2, like any bad flag): its namespace holds the Secrets that decide whom admission
trusts (the stamping epoch, the leader's fencing token), so it must be one where only
cluster admins may read or write Secrets, which ``default`` seldom is; and the fencing
policy never applies in the control plane's namespaces (:data:`~agentrun.core.policies.
fencing.SPARED`), so there a new leader's dry-run check (``controller.leadership``) would
pass before admission saw its token, and a former leader's writes would go unfenced. The
chart's install guard refuses the same names (``agentrun.chart.INSTALL_GUARD``).
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agentrun.api import bounds, names
from agentrun.core.policies import fencing

ENV = "POD_NAMESPACE"
FLAG = "--operator-namespace"
SERVICE_ACCOUNT_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
REFUSED = ("default", *fencing.SPARED)  # never the operator's (see above)
DEFAULT_SOURCE = (f"the default (no {FLAG}, no ${ENV}, no service-account namespace file: "
                  "a run outside the cluster)")
HELP = (f"the namespace the operator is installed in, where its leader Lease and Secrets "
        f"are; one where only cluster admins may read or write Secrets, never "
        f"{', '.join(REFUSED)} (default: ${ENV}, else the pod's service account's, else "
        f"{names.OPERATOR_NAMESPACE})")


@dataclass(frozen=True, kw_only=True)
class Found:
    """The operator's namespace and where it was learnt (logged at start, so a surprise,
    such as a flag overriding the pod's, shows in the first lines)."""

    name: str
    source: str


def checked(text: str, *, source: str) -> str:
    """``text`` as the operator's namespace: a DNS label not in :data:`REFUSED`, else a
    ValueError naming ``source`` and what to do."""
    name = text.strip()
    if not bounds.DNS_LABEL.fullmatch(name):  # a namespace's name
        raise ValueError(f"{source} must be a namespace name (a DNS label: lower-case "
                         f"letters, digits and '-', at most 63), not {name[:70]!r}")
    if name in REFUSED:
        why = ("the control plane's, where the operator's fencing policy never applies"
               if name in fencing.SPARED else
               "the cluster's default namespace, where people and tools are commonly given "
               "rights, to Secrets too")
        raise ValueError(
            f"{source} names {name}, which cannot be the operator's namespace: it is {why}, "
            "and the operator keeps its leader Lease and the Secrets admission trusts (the "
            "stamping epoch, the fencing token) there; use a namespace of its own where "
            f"only cluster admins may read or write Secrets, such as "
            f"{names.OPERATOR_NAMESPACE} (never {', '.join(REFUSED)})")
    return name


def resolve(*, flag: str | None = None, environ: Mapping[str, str] | None = None,
            account_file: Path | None = None) -> Found:
    """The operator's namespace, from the first of the sources above that says one
    (``environ``, ``account_file``: this process's, unless a test gives others); a
    ValueError, naming the source, when that one is no usable namespace."""
    environ = os.environ if environ is None else environ
    account_file = SERVICE_ACCOUNT_FILE if account_file is None else account_file
    if flag is not None:
        return Found(name=checked(flag, source=FLAG), source=FLAG)
    if environ.get(ENV):
        return Found(name=checked(environ[ENV], source=f"${ENV}"), source=f"${ENV}")
    try:
        found = account_file.read_bytes()
    except OSError:  # not in a pod (or no token mounted)
        found = b""
    try:
        text = found.decode()
    except UnicodeDecodeError:
        raise ValueError(f"{account_file} is not UTF-8 text, so it names no namespace; "
                         f"give the operator's namespace with {FLAG} or ${ENV}") from None
    if text.strip():
        return Found(name=checked(text, source=str(account_file)), source=str(account_file))
    return Found(name=names.OPERATOR_NAMESPACE, source=DEFAULT_SOURCE)


def add_flag(parser: argparse.ArgumentParser) -> None:
    """``--operator-namespace`` on a command of ``agentrun-operator`` (each that needs it)."""
    parser.add_argument(FLAG, help=HELP)


def parsed(*, parser: argparse.ArgumentParser, flag: str | None) -> Found:
    """:func:`resolve` for a command line: a refusal is the parser's error (the usage, the
    reason, exit 2), as for any bad flag, before anything starts."""
    try:
        return resolve(flag=flag)
    except ValueError as error:
        parser.error(str(error))


def announce(found: Found, *, logger: logging.Logger) -> None:
    """Say at start which namespace the operator keeps its objects in, and why that one."""
    logger.info("the operator's namespace is %s (from %s)", found.name, found.source)
