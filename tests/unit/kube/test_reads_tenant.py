"""A namespace's tenant is cached, and refreshed by one GET however many threads ask.

The work queue's threads share the operator's reader; when the cached label expired,
each thread that asked before the first answer came made its own GET, so namespace reads
grew with the reconciles per second, that is with the slots (benchmarks.md, ``## Scale``:
6 GETs in 30 s at 1,000 idle slots, 21 at 10,000).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from agentrun.api import names
from agentrun.kube import reads


class SlowNamespaces:
    """A client whose namespace GET waits (up to ``wait`` s) for a second GET to arrive:
    two GETs at once pass the barrier; one alone times out and answers anyway."""

    def __init__(self, *, wait: float) -> None:
        self.gets = 0
        self.at_once = threading.Barrier(2, timeout=wait)
        self.lock = threading.Lock()

    def get(self, path: str) -> dict[str, Any]:
        with self.lock:
            self.gets += 1
        with contextlib.suppress(threading.BrokenBarrierError):
            self.at_once.wait()
        return {"metadata": {"name": path.rsplit("/", 1)[-1],
                             "labels": {names.TENANT_LABEL: "team-a"}}}


def test_threads_that_find_the_tenant_expired_make_one_get() -> None:
    client = SlowNamespaces(wait=1.0)
    reader = reads.Reader(client,  # type: ignore[arg-type]
                          operator_namespace=names.OPERATOR_NAMESPACE)
    answers: list[str | None] = []
    threads = [threading.Thread(target=lambda: answers.append(reader.tenant("ns")))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert answers == ["team-a"] * 4
    assert client.gets == 1


def test_the_cached_tenant_is_asked_again_once_it_expired(monkeypatch: Any) -> None:
    client = SlowNamespaces(wait=0.01)
    reader = reads.Reader(client,  # type: ignore[arg-type]
                          operator_namespace=names.OPERATOR_NAMESPACE)
    now = [1000.0]
    monkeypatch.setattr(reads.time, "monotonic", lambda: now[0])
    assert reader.tenant("ns") == "team-a"
    assert reader.tenant("ns") == "team-a"
    assert client.gets == 1
    now[0] += reads.CACHE_SECONDS
    assert reader.tenant("ns") == "team-a"
    assert client.gets == 2

