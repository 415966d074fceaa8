"""A stand-in for an S3 store's connection pool, for the client's unit tests: each request
recorded and answered in turn (a status, a body, headers), or by raising (a connection that
broke); a body cut after 3 bytes; a monotonic clock the test moves."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any, cast

import urllib3

from agentrun import objectstore as s3

Answer = tuple[int, bytes | io.BytesIO, dict[str, str]]


@dataclass
class Pool:
    """A pool standing in for the store: each request recorded, answered in turn with a
    status, a body and headers, or by raising (a connection that broke)."""

    answers: list[Answer | OSError]
    sent: list[dict[str, Any]] = field(default_factory=list)

    def connection_from_url(self, url: str) -> Pool:
        return self

    def urlopen(self, method: str, url: str, **kwargs: Any) -> urllib3.HTTPResponse:
        self.sent.append({"method": method, "url": url, **kwargs})
        answer = self.answers.pop(0)
        if isinstance(answer, OSError):
            raise answer
        status, body, headers = answer
        return urllib3.HTTPResponse(
            body=io.BytesIO(body) if isinstance(body, bytes) else body, status=status,
            headers=headers, preload_content=False, request_method=method)


def answering(*answers: Answer | OSError) -> tuple[s3.ObjectStore, Pool]:
    pool = Pool(list(answers))
    store = s3.ObjectStore(endpoint="http://store:9000", bucket="bucket",
                           credentials=lambda: None, pool=cast(urllib3.PoolManager, pool))
    return store, pool


class Cut(io.BytesIO):
    """A body whose connection breaks after its first 3 bytes."""

    def read(self, size: int | None = -1, /) -> bytes:
        if self.tell():
            raise ConnectionResetError("reset by peer")
        return super().read(3)


class Clock:
    """A monotonic clock the test moves: each try takes ``per_try`` seconds, each wait
    what it asks (nothing really sleeps)."""

    def __init__(self, *, per_try: float) -> None:
        self.now, self.per_try, self.waits = 100.0, per_try, list[float]()

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds
