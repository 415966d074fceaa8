"""``agentrun-worker sidecar``: the worker SDK served on 127.0.0.1 to a main container.

It runs as a native sidecar (an init container with ``restartPolicy: Always``, added by
the operator when the LaunchSpec sets ``spec.sidecar``): ``Worker.from_env()``, then it
listens on 127.0.0.1:``--port`` only (never the pod's IP: other pods must not speak for
this attempt), renews once, and keeps renewing while the main container checks in within
``--check-in-seconds`` (:class:`sidecar.CheckIns`, the keeper's renew gate). The protocol
is :mod:`agentrun.worker._sidecar`; docs/worker-sidecar.md its reference.

It exits 0 on SIGTERM (the kubelet's, once the main containers have ended). It does not
exit when the lease is lost: it answers 410 to every request instead, so a sidecar that
restarts cannot make a loop of failed first renewals; the operator deletes the pod.
``agentrun-worker ready`` is its startup probe (:mod:`agentrun.worker._sidecarprobe`):
exit 0 once the first renewal succeeded, so the kubelet starts the main containers only
then.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType

from agentrun import rest
from agentrun.worker import _artifacts as artifacts
from agentrun.worker import _keeper as keeper
from agentrun.worker import _sdk as sdk
from agentrun.worker import _sidecarstreams as streams
from agentrun.worker._context import WorkerContextError
from agentrun.worker._sidecar import CheckIns, Sidecar
from agentrun.worker._sidecarprobe import HOST
from agentrun.worker._sidecarsessions import MAX_BODY_BYTES, Reply, error

logger = logging.getLogger("agentrun.worker")
READ_TIMEOUT_SECONDS = 10.0  # a client that stops sending its body mid-way is dropped
EXIT_NO_CONTEXT = 2  # not in a worker pod the operator made (the message says what is missing)
EXIT_NOT_OURS = 3
EXIT_NO_FIRST_RENEWAL = 4


class Server(ThreadingHTTPServer):
    daemon_threads = True  # a request waiting for an instruction must not block the exit

    def __init__(self, *, port: int, sidecar: Sidecar) -> None:
        self.sidecar = sidecar
        super().__init__((HOST, port), Handler)


class Handler(BaseHTTPRequestHandler):
    """Moves bytes between a socket and :meth:`Sidecar.handle`; decides nothing."""

    server: Server
    timeout = READ_TIMEOUT_SECONDS

    def _serve(self) -> None:
        if self.path.split("?", 1)[0].startswith(streams.PATH_PREFIX):
            self._artifact(self.path.split("?", 1)[0].removeprefix(streams.PATH_PREFIX))
            return
        length = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding"):
            reply = error(400, "BadRequest", "send the body with a Content-Length")
        elif length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            reply = error(400, "BadRequest", f"the body is at most {MAX_BODY_BYTES} bytes")
        else:
            body = self.rfile.read(int(length)) if length else b""
            try:
                reply = self.server.sidecar.handle(self.command, self.path, body)
            except Exception as bug:  # a bug answers, rather than dropping the connection
                logger.exception("sidecar: %s %s failed", self.command, self.path)
                reply = error(500, "InternalError", f"{type(bug).__name__}: {bug}")
        self._send(reply)

    def _artifact(self, key: str) -> None:
        """An artifact's PUT (its body streamed in) or GET (streamed out, maybe ranged)."""
        sidecar = self.server.sidecar
        if self.command == "PUT":
            body: streams.Body | None = None

            def put() -> Reply:
                nonlocal body
                body = streams.Body(self.rfile, streams.content_length(
                    self.headers.get("Content-Length"),
                    chunked=bool(self.headers.get("Transfer-Encoding"))))
                return sidecar.put_artifact(key, body)

            reply = self._answered(put)
            if body is None or not body.whole:
                self.close_connection = True  # the rest of a refused body is never read
            self._send(reply)
            return
        if self.command != "GET":
            self.close_connection = True
            self._send(error(405, "MethodNotAllowed", f"use GET or PUT here, not "
                             f"{self.command}"))
            return
        found: list[tuple[artifacts.Artifact, int | None]] = []

        def find() -> Reply:
            artifact = sidecar.find_artifact(key)
            if isinstance(artifact, Reply):
                return artifact
            start = streams.range_start(self.headers.get("Range"), size=artifact.size)
            found.append((artifact, start))
            return Reply(status=200)

        reply = self._answered(find)
        if not found:
            self._send(reply)
            return
        artifact, start = found[0]
        self.send_response(200 if start is None else 206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(artifact.size - (start or 0)))
        if start is not None:
            self.send_header("Content-Range",
                             f"bytes {start}-{artifact.size - 1}/{artifact.size}")
        self.send_header("X-Agentrun-Sha256", artifact.sha256)
        self.end_headers()
        held = b""  # the last chunk waits for the digest check at the end of the read
        try:
            for chunk in artifact.open(offset=start or 0):
                self.wfile.write(held)
                held = chunk
            self.wfile.write(held)
        except Exception as failed:  # headers are sent: a body cut short is the error
            logger.warning("sidecar: artifact %s cut short: %s", key, failed)
            self.close_connection = True

    def _answered(self, call: Callable[[], Reply]) -> Reply:
        try:
            return self.server.sidecar.guarded(call)
        except Exception as bug:  # a bug answers, rather than dropping the connection
            logger.exception("sidecar: %s %s failed", self.command, self.path)
            return error(500, "InternalError", f"{type(bug).__name__}: {bug}")

    def _send(self, reply: Reply) -> None:
        data = b"" if reply.body is None else json.dumps(reply.body).encode()
        self.send_response(reply.status)
        if data:
            self.send_header("Content-Type", "application/json")
        if reply.status == 503:
            self.send_header("Retry-After", "1")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = _serve

    def log_message(self, format: str, *args: object) -> None:
        logger.debug("sidecar: " + format, *args)


def serve(*, port: int, check_in_seconds: int, start_timeout: float) -> int:
    """Run the sidecar until SIGTERM; its exit code."""
    check_ins = CheckIns(window_seconds=check_in_seconds)
    try:
        worker = sdk.Worker.from_env(should_renew=check_ins.overdue)
    except WorkerContextError as missing:
        logger.error("not starting: %s", missing)
        return EXIT_NO_CONTEXT
    sidecar = Sidecar(worker=worker, check_ins=check_ins)
    server = Server(port=port, sidecar=sidecar)
    stopping, terminated = threading.Event(), threading.Event()

    def stop(signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGTERM:
            terminated.set()
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    threading.Thread(target=server.serve_forever, name="sidecar-http", daemon=True).start()
    try:
        try:
            worker.start(timeout=start_timeout)
        except keeper.LeaseLost as lost:
            logger.error("refusing to serve: %s", lost)
            return EXIT_NOT_OURS
        except keeper.LeaseLapsed as lapsed:
            logger.error("%s", lapsed)
            return EXIT_NO_FIRST_RENEWAL
        try:  # the prefix, read once now, before requests and effect threads share it
            _ = worker.steps
        except (rest.ApiError, OSError) as failed:
            logger.warning("the recoverable prefix could not be read yet (%s); the first "
                           "request that needs it reads it", failed)
        logger.info("serving %s:%d for attempt %d; renewing while the main container checks "
                    "in every %ds", HOST, port, worker.context.attempt, check_in_seconds)
        stopping.wait()
        logger.info("stopping (SIGTERM)")
        return 0
    finally:
        server.shutdown()
        server.server_close()
        try:  # flushes the staged steps first; releases only as the pod ends: on SIGTERM
            # once its startup probe passed (before that, or when it failed, the kubelet
            # starts it again, and it must renew then)
            worker.stop(release=terminated.is_set() and sidecar.told_ready)
        except Exception as failed:
            logger.error("steps staged by the main container could not be made durable: %s",
                         failed)

