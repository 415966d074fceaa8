"""Which namespace this operator is installed in, learnt once at start.

The chart installs into any namespace, and the operator keeps its own objects there (the
leader Lease, the fencing token, the stamping Secret, the history API's certificate); the
admission policies the chart renders name the same namespace. So the running operator
must not assume one: it asks, in this order,

1. ``--operator-namespace``, when given (a person's explicit choice wins);
2. ``$POD_NAMESPACE``, which the chart's Deployment sets from the downward API
   (``metadata.namespace``), as it sets ``$POD_NAME``;
3. the pod's service-account namespace file, which the kubelet mounts with the token
   (a pod run without the chart's env);
4. :data:`~agentrun.api.names.OPERATOR_NAMESPACE`: a run outside the cluster
   (``make operator``), against the plain manifests, which install there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from agentrun.api import names

ENV = "POD_NAMESPACE"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # a namespace's name
SERVICE_ACCOUNT_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def checked(text: str, *, source: str) -> str:
    """``text`` as a namespace name (a DNS label), else a ValueError naming ``source``."""
    name = text.strip()
    if not DNS_LABEL.fullmatch(name):
        raise ValueError(f"{source} must be a namespace name (a DNS label: lower-case "
                         f"letters, digits and '-', at most 63), not {name[:70]!r}")
    return name


def operator_namespace(*, flag: str | None = None, environ: Mapping[str, str] | None = None,
                       account_file: Path | None = None) -> str:
    """The operator's namespace, from the first of the sources above that says one
    (``environ``, ``account_file``: this process's, unless a test gives others)."""
    environ = os.environ if environ is None else environ
    account_file = SERVICE_ACCOUNT_FILE if account_file is None else account_file
    if flag:
        return checked(flag, source="--operator-namespace")
    if environ.get(ENV):
        return checked(environ[ENV], source=f"${ENV}")
    try:
        found = account_file.read_text()
    except OSError:  # not in a pod (or no token mounted)
        found = ""
    if found.strip():
        return checked(found, source=str(account_file))
    return names.OPERATOR_NAMESPACE
