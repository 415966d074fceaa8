"""What both fakes share: a threaded HTTP/1.1 server on 127.0.0.1 and a handler base.

Threaded, because the worker talks to both at once (its lease keeper renews while a step
commits) and its clients keep connections alive in a pool; HTTP/1.1 with a length on
every answer, because urllib3 reuses a connection only when the answer says where it
ends. Nothing is logged per request: the author's terminal is the worker's output.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from agentrun.worker._local import settings


class Handler(BaseHTTPRequestHandler):
    """A request's parts and the answers both fakes give; subclasses route the verbs."""

    protocol_version = "HTTP/1.1"
    server_version = "agentrun-local"

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: a line per renewal and per part would bury the worker's own output."""

    @property
    def route(self) -> tuple[str, dict[str, str]]:
        """The request's decoded path and its query (each name's first value; a bare
        name, as S3's ``?uploads``, maps to "")."""
        parts = urlsplit(self.path)
        query = {name: values[0] for name, values in
                 parse_qs(parts.query, keep_blank_values=True).items()}
        return unquote(parts.path), query

    def body(self) -> bytes | None:
        """The request's body, read whole; None (and a 413 sent) when it is over
        :data:`settings.MAX_REQUEST_BYTES` or its length is not a number."""
        text = self.headers.get("Content-Length") or "0"
        if not text.isdigit() or int(text) > settings.MAX_REQUEST_BYTES:
            self.close_connection = True  # the unread body must not be taken for a request
            self.answer(413, b"request body over the local harness's "
                        b"%d bytes" % settings.MAX_REQUEST_BYTES, content_type="text/plain")
            return None
        return self.rfile.read(int(text))

    def answer(self, status: int, data: bytes = b"", *, content_type: str = "application/json",
               headers: dict[str, str] | None = None, length: int | None = None) -> None:
        """Send ``status`` with ``data`` (a HEAD's answer: ``length`` and no bytes)."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data) if length is None else length))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if data and self.command != "HEAD":
            self.wfile.write(data)


@dataclass
class Serving:
    """A server running on its own thread; :meth:`stop` ends it and closes its socket."""

    server: ThreadingHTTPServer
    thread: threading.Thread

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def serve(handler: Callable[..., BaseHTTPRequestHandler], *, name: str) -> Serving:
    """Start ``handler``'s server on :data:`settings.HOST` at a port the kernel picks."""
    server = ThreadingHTTPServer((settings.HOST, 0), handler)
    server.daemon_threads = True  # a connection the worker left open never holds the exit
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    return Serving(server=server, thread=thread)
