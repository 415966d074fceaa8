"""The slot's journal: an attempt's records in an object store, its head on the Lease.

Where a run's journal lives is pinned on the run at launch (``status.pinned.journal``) and
given to its workers as ``AGENTRUN_JOURNAL_*`` (:class:`Location`). Terms:

- a *node* is one commit of an attempt: the canonical JSON ``{"attempt", "entries",
  "prev", "seq"}``, where ``entries`` are records in their one encoding
  (:func:`~agentrun.api.records.encode`), ``seq`` counts the attempt's commits from 1 and
  ``prev`` is the digest of the node before (``null`` for the first). It is stored once,
  content-addressed, at ``<prefix>/<slot>/<attempt>/sha256/<its sha256>`` with a
  conditional write (``If-None-Match: *``): nothing there is ever overwritten;
- a payload too large to go inline is stored the same way beside the nodes;
- the *head* is the annotation ``journal.agentrun.dev/head`` on the attempt's own Lease,
  ``<seq as 10 digits>-<node sha256>``. Admission lets only the Lease's holder pod change
  it, only forward (the fixed width makes "forward" a string comparison CEL can do) and
  never after the tombstone.

A commit is durable once the head names its node: the node is written first, the head
advanced second, so a head never names content that is not stored. What a successor
trusts is exactly what is reachable from the heads of sealed attempt Leases (and its own):
a stale attempt's late objects are unreachable (its head cannot move once the Lease is
tombstoned), and every object is verified against the digest that reached it, so one
overwritten or damaged (a store without conditional writes) is found, never used.

Why a chain of nodes and not one manifest rewritten per commit: a commit then costs one
small object whatever the journal's length, and the Lease (which every renewal delivers to
the operator's watch) holds one fixed-size head at 0 and at 100,000 steps. A successor
reads an attempt's nodes once, head to first.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from agentrun import objectstore as s3
from agentrun import rest
from agentrun.api import bounds, cuts, names
from agentrun.api.journalnodes import NODE_BYTES, Head, Usage, node, read_node
from agentrun.core.attempts import prefixes
from agentrun.worker import _records as records

__all__ = ["NODE_BYTES", "USAGE", "ErrorReport", "Head", "Journal", "JournalDamaged",
           "JournalPayloads", "JournalRefused", "JournalUnavailable",
           "Location", "Usage", "node", "read_node"]

HEAD = names.JOURNAL_HEAD_ANNOTATION
USAGE = names.JOURNAL_USAGE_ANNOTATION
ERROR = names.JOURNAL_ERROR_ANNOTATION
LOST = names.JOURNAL_LOST_ANNOTATION
# How long a commit or a read retries a store that does not answer. The lease is kept
# meanwhile (renewals go to the API server, not the store), so an outage shorter than this
# costs the attempt a wait, never its work; a longer one ends the step with
# JournalUnavailable and the attempt with it, the error left on the Lease.
RETRY_SECONDS = 300.0
T = TypeVar("T")
log = logging.getLogger(__name__)


class JournalUnavailable(records.StoreUnavailable):
    """The journal's store did not answer (unreachable, 5xx) for as long as a commit or a
    read retries: nothing was committed (the head was not advanced), or the prefix could
    not be read (the attempt must not start from less than was committed)."""


class JournalRefused(records.RecordError):
    """The journal's store answered no to a read (a 403: keys rotated or revoked; a 400, a
    429): what it holds is unknown, not lost; fix the access, not the data."""


class JournalDamaged(records.RecordError):
    """What a trusted head reaches cannot be had intact (an object missing, changed, or
    not a node of that attempt): the store lost or altered committed work. Raised, not
    reported, when the prefix is read: a successor must not start from less than was
    committed (an effect's intent lost would be sent again without asking its owner)."""


@dataclass(frozen=True, kw_only=True)
class Location:
    """Where the run's journal is (``AGENTRUN_JOURNAL_*``, pinned on the run at launch)."""

    endpoint: str
    bucket: str
    prefix: str
    region: str = "us-east-1"
    credentials: str | None = None  # a directory holding the Secret's keys as files

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Location | None:
        """The pinned location, or None when the run has no journal (records then go on
        the attempt's Lease, as for runs pinned before journals existed)."""
        env = os.environ if environ is None else environ
        endpoint = env.get(names.ENV_JOURNAL_ENDPOINT)
        if not endpoint:
            return None
        missing = [n for n in (names.ENV_JOURNAL_BUCKET, names.ENV_JOURNAL_PREFIX)
                   if not env.get(n)]
        if missing:
            raise records.RecordError(f"{names.ENV_JOURNAL_ENDPOINT} is set but not "
                                      f"{', '.join(missing)}: the operator sets all of them")
        return cls(endpoint=endpoint, bucket=env[names.ENV_JOURNAL_BUCKET],
                   prefix=env[names.ENV_JOURNAL_PREFIX].strip("/"),
                   region=env.get(names.ENV_JOURNAL_REGION) or "us-east-1",
                   credentials=env.get(names.ENV_JOURNAL_CREDENTIALS) or None)

    def objects(self) -> s3.ObjectStore:
        return s3.ObjectStore(endpoint=self.endpoint, bucket=self.bucket, region=self.region,
                              credentials=s3.credentials_from(self.credentials))


@dataclass(kw_only=True)
class Journal:
    """One slot's journal in ``objects`` under ``prefix`` (the run's pinned prefix)."""

    objects: s3.ObjectStore
    prefix: str
    slot: str
    retry_seconds: float = RETRY_SECONDS
    # Told the store's error at the first failed try of an outage and None once it answers
    # again (:class:`ErrorReport`: the operator shows it on the slot); None: not told.
    report: Callable[[str | None], bool] | None = field(default=None, repr=False)
    failing: bool = field(default=False, repr=False)  # the last try of any call failed
    telling: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def retrying(self, what: str, call: Callable[[], T]) -> T:
        """``call()``, retried while the store does not answer, for at most
        :attr:`retry_seconds`; the outage's start and end told to :attr:`report`."""
        deadline, pause = time.monotonic() + self.retry_seconds, 0.25
        while True:
            try:
                answer = call()
            except s3.S3Unavailable as error:
                message = f"{what}: {error}"
                self.tell(message)
                if time.monotonic() + pause > deadline:
                    raise JournalUnavailable(
                        f"{what}: the journal's store at {self.objects.endpoint} did not answer "
                        f"for {self.retry_seconds:.0f}s: {error}") from None
                time.sleep(pause)  # a backoff between tries, not a wait for a condition
                pause = min(pause * 2, 5.0)
                continue
            self.tell(None)
            return answer

    def tell(self, error: str | None) -> None:
        """Tell :attr:`report` when the store starts or stops failing (once each way)."""
        with self.telling:
            if self.report is None or self.failing == (error is not None):
                return
            if self.report(error):  # else told again at the next try's outcome
                self.failing = error is not None

    def attempt_key(self, attempt: int) -> str:
        return f"{self.prefix}/{self.slot}/{attempt}/sha256"

    def uri(self, key: str) -> str:
        return f"s3://{self.objects.bucket}/{key}"

    def put_once(self, key: str, data: bytes) -> None:
        """Store ``data`` under the content-addressed ``key``, never overwriting. A name
        already taken is read back and must hold these very bytes (anyone with the bucket's
        credentials could have put something else there first): else :class:`RecordError`
        and nothing is committed."""
        def put() -> bool:
            try:
                return self.objects.put(key, data, if_none_match=True)
            except s3.S3Error as error:
                if error.code not in ("NoSuchBucket", "AccessDenied"):
                    raise
            # The bundled store starts empty: the first commit makes its bucket (SeaweedFS
            # answers an anonymous put into a missing bucket AccessDenied). A store that
            # does not let workers create buckets refuses, and that refusal is shown.
            self.objects.ensure_bucket()
            return self.objects.put(key, data, if_none_match=True)

        try:
            written = self.retrying(f"storing {key}", put)
        except s3.S3Error as error:  # an answer, not a silence (those are retried)
            raise records.RecordError(f"cannot store {key}: {error}") from None
        if not written and self.get(key, size=len(data)) != data:
            raise records.RecordError(f"{key} is taken by other content than its name says: "
                                      "not committed")

    def get(self, key: str, *, size: int) -> bytes:
        """At most ``size`` bytes of ``key``; :class:`JournalUnavailable` when the store does
        not answer, :class:`RecordError` when it answers no (missing, refused)."""
        try:
            data = self.retrying(f"reading {key}", lambda: self.objects.get(key, limit=size))
        except s3.S3Error as error:  # an answer, not a silence (those are retried)
            if error.code == "NoSuchKey" or error.status == 404:
                raise records.RecordError(f"cannot read {key}: {error}") from None
            raise JournalRefused(f"cannot read {key}: {error}") from None
        if len(data) > size:
            raise records.RecordError(f"{key} holds more than the {size} bytes expected")
        return data

    def chain(self, *, attempt: int, head: Head, leave: cuts.Discards = cuts.NONE,
              ) -> tuple[dict[str, records.Record], list[str]]:
        """The records reachable from attempt ``attempt``'s ``head`` (a later commit's record
        wins over an earlier one of the same key), and the entries not taken: a record of one
        of ``names.LEASE_ONLY_SUFFIXES`` (``.resolved``, ``.unresolved``, ``.answer``,
        ``.question``, ``.approval``, ``.approved``) is trusted only on the Lease (the
        operator's and the slot's), never from a journal. A record a rerun leaves out
        (``leave``: its cuts and re-sends, ``api.cuts``) is not taken. A node that cannot
        be had intact raises :class:`JournalDamaged`; a store that does not answer,
        :class:`JournalUnavailable`."""
        found: dict[str, records.Record] = {}
        problems: list[str] = []
        digest: str | None = head.digest
        for seq in range(head.seq, 0, -1):
            assert digest is not None
            try:
                data = self.get(f"{self.attempt_key(attempt)}/{digest}", size=NODE_BYTES)
                prev, entries = read_node(data, attempt=attempt, seq=seq, digest=digest)
            except (JournalUnavailable, JournalRefused):
                raise
            except records.RecordError as error:
                raise JournalDamaged(f"attempt {attempt}'s journal, commit {seq} of "
                                     f"{head.seq}: {error}") from None
            prefixes.take(found, problems, entries=entries, attempt=attempt, seq=seq,
                          leave=leave)
            digest = prev
        return found, problems

    def payloads(self, *, attempt: int) -> JournalPayloads:
        return JournalPayloads(journal=self, attempt=attempt)


@dataclass(kw_only=True)
class ErrorReport:
    """The journal's store error on the attempt's own Lease (:data:`ERROR`), for the
    operator to show on the slot (``JournalUnavailable``) without store credentials; or
    (``annotation`` :data:`LOST`) why the prefix cannot be read intact (``JournalLost``).

    One merge patch of that annotation alone (no ``resourceVersion``: it touches nothing
    another writer sets), at an outage's start and end only, so a long outage costs two
    writes, not one per try. Best effort: a report that fails is logged and made again at
    the next try's outcome (True: it landed); the retry itself does not depend on it."""

    lease: records.LeaseRecords
    annotation: str = ERROR  # or LOST: what a trusted head reaches is gone or altered

    def __call__(self, error: str | None) -> bool:
        value = None if error is None else bounds.clip_bytes(
            " ".join(error.split()), limit=bounds.JOURNAL_ERROR_BYTES)
        body = {"metadata": {"annotations": {self.annotation: value}}}
        try:
            self.lease.api.request("PATCH", self.lease.path, body=body,
                                   content_type=rest.MERGE_PATCH)
        except Exception as failed:  # shown in the log; the retry goes on
            log.warning("could not put the journal's store error on Lease %s: %s",
                        self.lease.lease, failed)
            return False
        return True


@dataclass(kw_only=True)
class JournalPayloads:
    """The payload store of an attempt's records (:class:`records.PayloadStore`): puts
    under this attempt's own names; reads only this slot's journal, any attempt's."""

    journal: Journal
    attempt: int

    def put(self, *, sha256: str, data: bytes) -> str:
        key = f"{self.journal.attempt_key(self.attempt)}/{sha256}"
        self.journal.put_once(key, data)
        return self.journal.uri(key)

    def get(self, uri: str, *, size: int) -> bytes:
        own = re.escape(self.journal.uri(f"{self.journal.prefix}/{self.journal.slot}/"))
        if not re.fullmatch(own + bounds.ATTEMPT_NUMBER_PATH + r"/sha256/[0-9a-f]{64}", uri):
            raise records.RecordError(f"{uri[:200]} is not this slot's journal: a payload is "
                                      "read only from it")
        return self.journal.get(uri.removeprefix(f"s3://{self.journal.objects.bucket}/"),
                                size=size)
