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
from typing import Any, cast
from urllib.parse import parse_qs, unquote

from agentrun.worker._local import settings


class Handler(BaseHTTPRequestHandler):
    """A request's parts and the answers both fakes give; subclasses :meth:`serve` a
    request and say no in their format (:meth:`refuse`).

    Every verb comes to :meth:`serve` once its ``Host`` is this server's (127.0.0.1 or
    localhost at its port: a page a browser loaded from a rebound DNS name gets a 403),
    and whatever it raises is a 500 that says what (never a connection dropped).
    """

    protocol_version = "HTTP/1.1"
    server_version = "agentrun-local"
    limit = settings.MAX_REQUEST_BYTES  # the most a request's body may hold (else 413)
    answered = False  # this request's status line is sent

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: a line per renewal and per part would bury the worker's own output."""

    def serve(self) -> None:
        raise NotImplementedError

    def refuse(self, status: int, reason: str, message: str) -> None:
        """Answer ``status``, in the fake's own format for an error."""
        self.answer(status, message.encode(), content_type="text/plain")

    def do_GET(self) -> None:
        self._dispatch()

    do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = do_GET

    def _dispatch(self) -> None:
        self.answered = False
        try:
            host = self.headers.get("Host") or ""
            port = cast(tuple[str, int], self.server.server_address)[1]
            if host.lower() not in (f"{settings.HOST}:{port}", f"localhost:{port}"):
                self.close_connection = True  # its body, if any, is not read
                self.refuse(403, "Forbidden", f"Host {host!r} is not this server "
                            f"({settings.HOST}:{port} or localhost:{port})")
                return
            self.serve()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client left: nobody to answer
        except Exception as error:  # a harness bug: said to the client, not a dropped line
            self.close_connection = True
            if not self.answered:
                self.refuse(500, "InternalError", f"the local harness failed: "
                            f"{type(error).__name__}: {error}")

    @property
    def route(self) -> tuple[str, dict[str, str]]:
        """The request's decoded path and its query (each name's first value; a bare
        name, as S3's ``?uploads``, maps to "")."""
        path, _, text = self.path.partition("?")  # a request's target: no scheme, no host
        query = {name: values[0] for name, values in
                 parse_qs(text, keep_blank_values=True).items()}
        return unquote(path), query

    def body(self) -> bytes | None:
        """The request's body, read whole; None (and the answer sent) when it is over
        :attr:`limit` (413), chunked (411) or its length is not a number (400)."""
        text = self.headers.get("Content-Length") or "0"
        refusal: tuple[int, str, str] | None = None
        if "Transfer-Encoding" in self.headers:
            refusal = (411, "LengthRequired", "the local harness wants a Content-Length")
        elif not (text.isascii() and text.isdigit()):
            refusal = (400, "BadRequest", f"Content-Length {text!r} is not a number")
        elif int(text) > self.limit:
            refusal = (413, "RequestEntityTooLarge", "Request entity too large: limit is "
                       f"{self.limit}")
        if refusal is not None:
            self.close_connection = True  # the unread body must not be taken for a request
            self.refuse(*refusal)
            return None
        return self.rfile.read(int(text))

    def answer(self, status: int, data: bytes = b"", *, content_type: str = "application/json",
               headers: dict[str, str] | None = None, length: int | None = None) -> None:
        """Send ``status`` with ``data`` (a HEAD's answer: ``length`` and no bytes)."""
        self.answered = True
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data) if length is None else length))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
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
