"""A small S3 client: the few operations the journal and workers' artifacts need, signed
with AWS Signature V4.

Any S3-compatible store will do (AWS S3, GCS's S3 interface, Ceph RGW, SeaweedFS, R2), so
the client speaks only what they all share: path-style addressing
(``<endpoint>/<bucket>/<key>``), SigV4 with the payload's sha256 (never
``UNSIGNED-PAYLOAD``, which some stores refuse and which would leave the body unsigned),
ListObjectsV2 and DeleteObjects, ranged reads and multipart uploads. Not boto3: botocore
pins ``python-dateutil<3`` while the kubernetes client needs ``>=3`` (pip then picks
boto3 0.0.3), and it is 35 MB and half a second of import for an SDK meant to be light.
urllib3 is already here (kubernetes').

Its own layer, below the worker and the operator: workers write and read journals with it,
the operator deletes them with their run. No request on a whole object is retried here
(urllib3's retries are off): the caller retries on its own schedule, and tells "the store
is unreachable or failing" (:class:`S3Unavailable`, retryable) from "the store answered
no" (:class:`S3Error`). Streams are the exception (``put_stream``, ``get_stream``): their
source is read once, so the caller could not retry them, and they retry, bounded, here.

Modules: ``_client`` signs, sends and reads bounded answers, whole objects; ``_parts``
is the pure side of streams (parts, multipart XML, ranges); ``_download`` the resumable
ranged read; ``_streams`` the :class:`ObjectStore` with streams and upload cleanup.
"""

from __future__ import annotations

from agentrun.objectstore._client import (
    KEY_FILE_BYTES,
    MESSAGE_CHARS,
    Client,
    Credentials,
    Head,
    S3Error,
    S3Unavailable,
    authorization,
    canonical_query,
    credentials_from,
)
from agentrun.objectstore._download import Download
from agentrun.objectstore._parts import (
    CHUNK_BYTES,
    MAX_PART_BYTES,
    MAX_PARTS,
    MIN_PART_BYTES,
    PART_BYTES,
    WINDOW_BYTES,
    Readable,
    Streamed,
    part_bytes_for,
)
from agentrun.objectstore._patience import Patience, retries_within
from agentrun.objectstore._streams import ObjectStore

__all__ = [
    "CHUNK_BYTES",
    "KEY_FILE_BYTES",
    "MAX_PARTS",
    "MAX_PART_BYTES",
    "MESSAGE_CHARS",
    "MIN_PART_BYTES",
    "PART_BYTES",
    "WINDOW_BYTES",
    "Client",
    "Credentials",
    "Download",
    "Head",
    "ObjectStore",
    "Patience",
    "Readable",
    "S3Error",
    "S3Unavailable",
    "Streamed",
    "authorization",
    "canonical_query",
    "credentials_from",
    "part_bytes_for",
    "retries_within",
]
