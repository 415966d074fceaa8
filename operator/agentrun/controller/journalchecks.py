"""The journal setting checked before a run is pinned: a reason not to launch it yet.

A run whose journal cannot work must not claim: its first worker would fail at its first
commit (a missing Secret even keeps its pod in ContainerCreating until the start
deadline), spending attempts on a platform's mistake. So before a run is pinned the
operator checks the setting as the run's workers will use it, and a failing check is a
:class:`~agentrun.core.runs.resolution.Problem` on the run (``Pinned`` False, a Warning
Event), nothing created; the run is looked at again every ``runsteps.JOURNAL_RECHECK``
and pinned once the setting works:

- ``JournalSecretMissing``: the pinned Secret (``--journal-secret``) is not in the run's
  namespace, lacks ``accessKeyId`` or ``secretAccessKey``, or cannot be read (the
  operator may read Secrets of the one name :data:`~agentrun.api.names.JOURNAL_SECRET`
  only: its ClusterRole's ``resourceNames``);
- ``JournalUnreachable``: the store does not answer a HEAD of the bucket (refused, no
  route, no such host, a timeout, a 5xx);
- ``JournalCredentialsRefused``: it answers 403, to the Secret's keys (wrong or revoked)
  or, with no Secret pinned, to an unsigned request;
- ``JournalBucketMissing``: it answers 404 to a signed request. Unsigned, a missing bucket
  is fine: the bundled store starts empty and a worker's first commit makes it.

Why here and not in admission: these facts change without the run changing (a Secret
created, a store started, keys rotated), so they are checked when the run is launched,
not when it is written. Answers are remembered for :data:`PROBE_TTL` per endpoint, bucket
and namespace, so many runs waiting on one bad store cost one request, not one each.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from agentrun import objectstore, rest
from agentrun.api import bounds, names
from agentrun.api.runs import JournalSettings
from agentrun.controller import journalstores
from agentrun.core.runs.resolution import Problem
from agentrun.kube import reads

PROBE_TTL = 5.0  # seconds a store's answer is reused
SECRET_KEYS = (names.JOURNAL_ACCESS_KEY, names.JOURNAL_SECRET_KEY)


@dataclass(kw_only=True)
class JournalChecks:
    """Checks the operator's journal setting for runs in a namespace (see the module)."""

    settings: JournalSettings
    reader: reads.Reader
    stores: journalstores.JournalStores
    probed: dict[str, tuple[float, Problem | None]] = field(default_factory=dict)

    def problem(self, namespace: str) -> Problem | None:
        """Why runs in ``namespace`` cannot be launched with this journal yet, or None."""
        readable, problem = self._secret(namespace)
        if problem is not None:
            return problem
        now = time.monotonic()
        seen = self.probed.get(namespace)
        if seen is None or now - seen[0] > PROBE_TTL:
            seen = (now, self._store(namespace, signed=readable))
            self.probed[namespace] = seen
        return seen[1]

    def _secret(self, namespace: str) -> tuple[bool, Problem | None]:
        """Whether the Secret can be used to sign (pinned and readable), or why not."""
        name = self.settings.secret
        if name is None:
            return False, None
        try:
            found = self.reader.rest.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
        except rest.ApiError as error:
            if error.status != 403:
                raise
            return False, Problem(reason="JournalSecretMissing", message=(
                f"the operator may not read the journal's Secret {namespace}/{name}: its "
                f"ClusterRole reads Secrets named {names.JOURNAL_SECRET} only (re-apply "
                "manifests/rbac or the chart); the run is launched once it can, nothing was "
                "created"))
        create = (f"kubectl -n {namespace} create secret generic {name} --from-literal="
                  f"{names.JOURNAL_ACCESS_KEY}=... --from-literal={names.JOURNAL_SECRET_KEY}=...")
        if found is None:
            return False, Problem(reason="JournalSecretMissing", message=(
                f"the journal's Secret {name} (the operator's --journal-secret) is not in "
                f"namespace {namespace}; its workers could not sign for the store. Create it "
                f"({create}); the run is launched once it is there, nothing was created"))
        missing = [key for key in SECRET_KEYS if key not in (found.get("data") or {})]
        if missing:
            return False, Problem(reason="JournalSecretMissing", message=(
                f"the journal's Secret {namespace}/{name} has no {' or '.join(missing)}: it "
                f"needs both keys ({create}); the run is launched once it has them, nothing "
                "was created"))
        return True, None

    def _store(self, namespace: str, *, signed: bool) -> Problem | None:
        """The store's answer to a HEAD of the bucket, as the run's workers would ask."""
        settings = self.settings
        where = (f"the journal's store {settings.endpoint} (bucket {settings.bucket}; the "
                 "operator's --journal-endpoint and --journal-bucket, chart values "
                 "journal.endpoint and journal.bucket)")
        how = (f"signed with the Secret {namespace}/{settings.secret}" if signed
               else "unsigned (no journal Secret pinned)")
        then = "the run is launched once it does, nothing was created"
        try:
            exists = self.stores.store(
                endpoint=settings.endpoint, bucket=settings.bucket, region=settings.region,
                secret=settings.secret if signed else None, namespace=namespace,
            ).bucket_exists()
        except journalstores.Unusable as error:
            return Problem(reason="JournalSecretMissing", message=f"{error}; {then}")
        except objectstore.S3Unavailable as error:
            return Problem(reason="JournalUnreachable", message=bounds.clip(
                f"{where} does not answer: {error}. Fix the endpoint or start the store; "
                f"{then}"))
        except objectstore.S3Error as error:
            if error.status in (401, 403):
                return Problem(reason="JournalCredentialsRefused", message=bounds.clip(
                    f"{where} refuses a request {how}: {error}. Fix the keys (or pin the "
                    f"Secret with --journal-secret); {then}"))
            return Problem(reason="JournalUnreachable", message=bounds.clip(
                f"{where} answers a HEAD of the bucket {how} with {error} (a wrong region "
                f"or endpoint?); {then}"))
        if not exists and signed:
            return Problem(reason="JournalBucketMissing", message=bounds.clip(
                f"{where} has no such bucket: create it (the workers' keys need not be "
                f"allowed to); {then}"))
        return None
