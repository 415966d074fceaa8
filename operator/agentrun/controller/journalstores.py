"""The operator's own use of a run's journal store: counting and deleting it, reading it.

The operator decides without store credentials (what it needs is on the Leases); the
store itself is needed to delete a run's journal (with the run, or at the end of its
retention: ``core.runs.runjournals``) and to read it for people (the history API,
``controller.journalhistory``). It then signs with the
run's own pinned Secret (read from the run's namespace; the operator may read Secrets of
the name :data:`~agentrun.api.names.JOURNAL_SECRET` only), or unsigned when the run pinned
none (the bundled store). Every failure is returned as text for the run's condition,
never raised: one store down must not stop the operator's work on other runs.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from agentrun import objectstore, rest
from agentrun.api import bounds, names
from agentrun.api.runs import JournalPin
from agentrun.kube import reads

TIMEOUT_SECONDS = 5.0  # a reconcile waits on the store at most this long per request


class Unusable(Exception):
    """The run's journal cannot be reached as pinned (its Secret missing or unreadable)."""


@dataclass(kw_only=True)
class JournalStores:
    """The stores of runs' journals, as the operator reaches them (see the module)."""

    reader: reads.Reader

    def _credentials(self, secret: str | None,
                     namespace: str) -> objectstore.Credentials | None:
        if secret is None:
            return None
        try:
            found = self.reader.rest.get(f"/api/v1/namespaces/{namespace}/secrets/{secret}")
        except rest.ApiError as error:
            raise Unusable(f"the Secret {namespace}/{secret} cannot be read: "
                           f"{bounds.clip(error.message, limit=200)}") from None
        data = (found or {}).get("data") or {}
        try:
            keys = [base64.b64decode(data[k]).decode().strip()
                    for k in (names.JOURNAL_ACCESS_KEY, names.JOURNAL_SECRET_KEY)]
        except (KeyError, binascii.Error, UnicodeDecodeError):
            raise Unusable(f"the Secret {namespace}/{secret} is missing or lacks "
                           f"{names.JOURNAL_ACCESS_KEY} and {names.JOURNAL_SECRET_KEY}") from None
        return objectstore.Credentials(*keys)

    def store(self, *, endpoint: str, bucket: str, region: str, secret: str | None,
              namespace: str) -> objectstore.ObjectStore:
        """The bucket as a run in ``namespace`` reaches it (signed with its Secret, if any);
        :class:`Unusable` when that Secret cannot be read whole."""
        credentials = self._credentials(secret, namespace)
        return objectstore.ObjectStore(endpoint=endpoint, bucket=bucket, region=region,
                                       timeout=TIMEOUT_SECONDS,
                                       credentials=lambda: credentials)

    def _store(self, pin: JournalPin, namespace: str) -> objectstore.ObjectStore:
        return self.store(endpoint=pin.endpoint, bucket=pin.bucket, region=pin.region,
                          secret=pin.secret, namespace=namespace)

    def live_attempts(self, namespace: str, run: str) -> list[str]:
        """The run's attempts that may still write: a Lease not tombstoned (a claim under
        way included) or a Pod not finished, by name; read from the API, not a cache."""
        selector = {"labelSelector": f"{names.RUN_LABEL}={run},{names.ATTEMPT_LABEL}"}
        leases = self.reader.rest.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", query=selector) or {}
        pods = self.reader.rest.get(f"/api/v1/namespaces/{namespace}/pods",
                                    query=selector) or {}
        live = {lease["metadata"]["name"] for lease in leases.get("items") or []
                if (lease.get("spec") or {}).get("holderIdentity") and names.OUTCOME_ANNOTATION
                not in ((lease["metadata"].get("annotations")) or {})}
        live |= {pod["metadata"]["name"] for pod in pods.get("items") or []
                 if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")}
        return sorted(live)

    def orphaned(self, pin: JournalPin, namespace: str) -> str | None:
        """Why the run's journal can never be deleted (its pinned Secret is gone), or None."""
        if pin.secret is None:
            return None
        try:
            found = self.reader.rest.get(f"/api/v1/namespaces/{namespace}/secrets/{pin.secret}")
        except rest.ApiError:
            return None  # unreadable is not gone: shown as an error by the listing
        if found is not None:
            return None
        return (f"its Secret {namespace}/{pin.secret} is gone (deleted with the namespace, or "
                "by hand), so the operator cannot sign for the store")

    def left(self, pin: JournalPin, namespace: str) -> tuple[int | None, str | None]:
        """Whether objects are left under the run's prefix (1 or 0: one listed at most),
        or why the store could not say."""
        try:
            return len(self._store(pin, namespace).list(pin.prefix + "/", limit=1)), None
        except objectstore.S3Error as error:
            if error.code == "NoSuchBucket":
                return 0, None  # nothing was ever written: the first commit makes it
            return None, bounds.clip(str(error), limit=300)
        except Unusable as error:
            return None, str(error)

    def delete(self, pin: JournalPin, namespace: str) -> str | None:
        """Delete everything under the run's prefix; None, or why it could not be."""
        try:
            self._store(pin, namespace).delete_prefix(pin.prefix + "/")
        except (objectstore.S3Error, Unusable) as error:
            return bounds.clip(str(error), limit=300)
        return None
