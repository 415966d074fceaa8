"""The sidecar's real HTTP server (``agentrun.worker._sidecarserver``) on 127.0.0.1, port
chosen by the kernel, over a given :class:`~agentrun.worker._sidecar.Sidecar`, and a
client that answers (status, parsed JSON body or None)."""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

from agentrun.worker import _sidecarserver as sidecarserver
from agentrun.worker._sidecar import Sidecar

Ask = Callable[..., tuple[int, Any]]  # (method, path, body=b"", headers=None)


@contextlib.contextmanager
def serving(sidecar: Sidecar) -> Iterator[tuple[Ask, tuple[str, int]]]:
    """``(ask, (host, port))`` while the server runs; it is shut down on exit."""
    server = sidecarserver.Server(port=0, sidecar=sidecar)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = str(server.server_address[0]), int(server.server_address[1])

    def ask(method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, Any]:
        connection = http.client.HTTPConnection(host, port, timeout=30)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            answer = connection.getresponse()
            data = answer.read()
        finally:
            connection.close()
        return answer.status, json.loads(data) if data else None

    try:
        yield ask, (host, port)
    finally:
        server.shutdown()
        server.server_close()
