"""A TCP proxy that cuts a connection at a byte count: a fault placed exactly, not timed.

:mod:`tests.support.faults.netfaults` cuts whatever is live when the test says so; a
streamed upload or read needs the cut in the middle of a given body, which only a count
of the bytes carried can place. :meth:`CutProxy.arm` (``"up"``: client to store,
``"down"``: store to client) lets exactly ``after`` more bytes through in that direction,
then closes the connection carrying them: ``rst`` (the client sees "connection reset")
or ``fin`` (an orderly close: the client reads an early end). Once per arm; other
connections, and new ones, are served throughout. :meth:`CutProxy.cut_all` closes every
live connection now. Plain bytes: no HTTP is read.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from types import TracebackType

CHUNK = 65536
POLL = 0.2  # seconds: how often a blocked thread looks whether the proxy is stopping


def _close(sock: socket.socket, *, how: str) -> None:
    with contextlib.suppress(OSError):
        if how == "rst":  # SO_LINGER 0: close sends a RST
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class CutProxy:
    """``with CutProxy(("127.0.0.1", port)) as proxy:`` serves at ``proxy.url``."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.accepted = 0  # connections, in all
        self.cuts = 0  # connections closed by an armed cut or cut_all
        self._armed: tuple[str, int, str] | None = None  # direction, bytes left, how
        self._links: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(POLL)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._threads = [threading.Thread(target=self._accept, daemon=True)]

    def __enter__(self) -> CutProxy:
        self._threads[0].start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        self.cut_all(how="fin", counted=False)
        self._listener.close()
        for thread in list(self._threads):
            thread.join(timeout=5)

    def arm(self, *, direction: str, after: int, how: str = "rst") -> None:
        """Cut the connection that carries the ``after``-th next byte ``direction``."""
        if direction not in ("up", "down") or how not in ("rst", "fin") or after < 0:
            raise ValueError(f"arm({direction!r}, {after}, {how!r})")
        with self._lock:
            self._armed = (direction, after, how)

    @property
    def armed(self) -> bool:
        with self._lock:
            return self._armed is not None

    def cut_all(self, *, how: str = "rst", counted: bool = True) -> int:
        """Close every live connection now; how many."""
        with self._lock:
            links, self._links = self._links, []
            self.cuts += len(links) if counted else 0
        for pair in links:
            for sock in pair:
                _close(sock, how=how)
        return len(links)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(self.upstream, timeout=5)
            for sock in (client, upstream):
                sock.settimeout(POLL)
            with self._lock:
                self._links.append((client, upstream))
                self.accepted += 1
            for direction, source, sink in (("up", client, upstream),
                                            ("down", upstream, client)):
                thread = threading.Thread(target=self._copy, daemon=True,
                                          args=(direction, source, sink, (client, upstream)))
                self._threads.append(thread)
                thread.start()

    def _take(self, direction: str, size: int) -> tuple[int, str | None]:
        """How many of ``size`` bytes may pass, and how to cut after them (None: no cut)."""
        with self._lock:
            if self._armed is None or self._armed[0] != direction:
                return size, None
            _, left, how = self._armed
            if size < left:
                self._armed = (direction, left - size, how)
                return size, None
            self._armed = None
            return left, how

    def _send(self, sink: socket.socket, data: bytes) -> bool:
        """All of ``data`` sent, however slowly the peer reads (False: the socket broke,
        or the proxy is stopping)."""
        view = memoryview(data)
        while view:
            try:
                view = view[sink.send(view):]
            except TimeoutError:
                if self._stop.is_set():
                    return False
            except OSError:
                return False
        return True

    def _copy(self, direction: str, source: socket.socket, sink: socket.socket,
              pair: tuple[socket.socket, socket.socket]) -> None:
        while not self._stop.is_set():
            try:
                data = source.recv(CHUNK)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:
                break
            passing, how = self._take(direction, len(data))
            if not self._send(sink, data[:passing]):
                break
            if how is not None:
                with self._lock:
                    if pair in self._links:
                        self._links.remove(pair)
                    self.cuts += 1
                for sock in pair:
                    _close(sock, how=how)
                return
        with self._lock:
            if pair not in self._links:
                return  # closed by a cut already
            self._links.remove(pair)
        for sock in pair:
            _close(sock, how="fin")
