"""Fixtures over one loopback S3 server a test module shares (``tests/support/s3server.py``).

A module takes them by name (``from tests.support.s3fixtures import endpoint, store``
and lists them in its ``__all__``): ``endpoint``, the server's URL, one per module;
``store``, a fresh bucket of each test's own (each test starts from an empty one);
``slot_journal``, a slot's journal in a fresh bucket that retries a silent store for one
second.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from agentrun.objectstore import ObjectStore
from agentrun.worker import _journal as journal
from tests.support.s3server import running_s3


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_s3(tmp_path_factory.mktemp("s3")) as url:
        yield url


def fresh_bucket(endpoint: str) -> ObjectStore:
    """A bucket no other test uses, made now."""
    made = ObjectStore(endpoint=endpoint, bucket=f"t-{uuid.uuid4().hex[:12]}",
                       credentials=lambda: None)
    made.ensure_bucket()
    return made


@pytest.fixture
def store(endpoint: str) -> ObjectStore:
    return fresh_bucket(endpoint)


@pytest.fixture
def slot_journal(endpoint: str) -> journal.Journal:
    return journal.Journal(objects=fresh_bucket(endpoint), prefix="agentrun/ns/uid", slot="s",
                           retry_seconds=1)
