"""The journal setting checked before a run is pinned: a reason not to launch it yet.

A run whose journal cannot work must not claim: its first worker would fail at its first
commit (a missing Secret even keeps its pod in ContainerCreating until the start
deadline), spending attempts on a platform's mistake. So before a run is pinned the
operator checks what it can without store credentials, and a failing check is a
:class:`~agentrun.core.runs.resolution.Problem` on the run (``Pinned`` False, a Warning
Event), nothing created; the run is looked at again every :data:`RECHECK` and pinned once
the setting works:

- ``JournalSecretMissing``: the pinned Secret (``--journal-secret``) is not in the run's
  namespace, or lacks ``accessKeyId`` or ``secretAccessKey``. The operator may read
  Secrets of that one name only (its ClusterRole's ``resourceNames``: the default
  :data:`~agentrun.api.names.JOURNAL_SECRET`); one it may not read is not checked (logged);
- ``JournalUnreachable``: nothing answers HTTP at the endpoint (refused, no route, no such
  host, a timeout). Any HTTP answer counts as reachable, an error status too: whether a
  bucket exists or credentials are right is for the store to say to a signed request,
  which the operator cannot make (it holds no store credentials); a worker shows that at
  its first commit (the slot's ``JournalUnavailable``, or its attempt's failure).

Why here and not in admission: both facts change without the run changing (a Secret
created, a store started), so they are checked when the run is launched, not when it is
written. Probes are remembered for :data:`PROBE_TTL` per endpoint, so many runs waiting on
one bad endpoint cost one probe, not one each.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta

import urllib3

from agentrun.api import names
from agentrun.api.runs import JournalSettings
from agentrun.core.runs.resolution import Problem
from agentrun.kube import reads, rest

RECHECK = timedelta(seconds=10)
PROBE_TTL = 5.0  # seconds a probe's answer is reused
PROBE_TIMEOUT = urllib3.Timeout(connect=2.0, read=3.0)
SECRET_KEYS = (names.JOURNAL_ACCESS_KEY, names.JOURNAL_SECRET_KEY)
log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class JournalChecks:
    """Checks the operator's journal setting for runs in a namespace (see the module)."""

    settings: JournalSettings
    reader: reads.Reader
    pool: urllib3.PoolManager = field(default_factory=lambda: urllib3.PoolManager(
        retries=False, timeout=PROBE_TIMEOUT))
    probed: dict[str, tuple[float, str | None]] = field(default_factory=dict)

    def problem(self, namespace: str) -> Problem | None:
        """Why runs in ``namespace`` cannot be launched with this journal yet, or None."""
        return self._secret(namespace) or self._endpoint()

    def _secret(self, namespace: str) -> Problem | None:
        name = self.settings.secret
        if name is None:
            return None
        try:
            found = self.reader.rest.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
        except rest.ApiError as error:
            if error.status != 403:
                raise
            log.warning("the journal Secret %s/%s is not checked: the operator may not read "
                        "it (its ClusterRole reads Secrets named %s only)", namespace, name,
                        names.JOURNAL_SECRET)
            return None
        create = (f"kubectl -n {namespace} create secret generic {name} --from-literal="
                  f"{names.JOURNAL_ACCESS_KEY}=... --from-literal={names.JOURNAL_SECRET_KEY}=...")
        if found is None:
            return Problem(reason="JournalSecretMissing", message=(
                f"the journal's Secret {name} (the operator's --journal-secret) is not in "
                f"namespace {namespace}; its workers could not sign for the store. Create it "
                f"({create}); the run is launched once it is there, nothing was created"))
        missing = [key for key in SECRET_KEYS if key not in (found.get("data") or {})]
        if missing:
            return Problem(reason="JournalSecretMissing", message=(
                f"the journal's Secret {namespace}/{name} has no {' or '.join(missing)}: it "
                f"needs both keys ({create}); the run is launched once it has them, nothing "
                "was created"))
        return None

    def _endpoint(self) -> Problem | None:
        endpoint = self.settings.endpoint
        now = time.monotonic()
        seen = self.probed.get(endpoint)
        if seen is None or now - seen[0] > PROBE_TTL:
            seen = (now, self._probe(endpoint))
            self.probed[endpoint] = seen
        error = seen[1]
        if error is None:
            return None
        return Problem(reason="JournalUnreachable", message=(
            f"nothing answers at the journal's store {endpoint} (the operator's "
            f"--journal-endpoint, chart value journal.endpoint): {error}. Fix the endpoint "
            "or start the store; the run is launched once it answers, nothing was created"))

    def _probe(self, endpoint: str) -> str | None:
        """None if anything answers HTTP at ``endpoint``, else why not (bounded)."""
        try:
            self.pool.request("GET", endpoint.rstrip("/") + "/", preload_content=True)
        except urllib3.exceptions.HTTPError as error:
            return str(error)[:300]
        return None
