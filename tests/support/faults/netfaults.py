"""A TCP proxy between one operator process and the API server, with network faults.

The operator is given a kubeconfig whose server is the proxy (:func:`proxied_kubeconfig`);
TLS passes through untouched: the proxy copies bytes, it never reads them. It listens on
the upstream's own host (another port), so the server's certificate still names the
address the operator dials. Faults, on the test's command:

- :meth:`Proxy.cut` (``how="rst"`` or ``"fin"``): every live connection closed at once,
  mid-stream, watches included. ``rst``: both sockets closed with ``SO_LINGER`` 0, so the
  kernel sends a RST (the client sees "connection reset"); ``fin``: an orderly shutdown of
  both directions (the client reads EOF mid-answer). New connections are served after it.
- :meth:`Proxy.black_hole`: the connections stay open but nothing is forwarded in either
  direction (no FIN, no RST: a silent partition, the half-open connection seen from
  both ends), and new connections are accepted but held the same way. Bytes already read
  are kept. Then :meth:`Proxy.heal` (forwarding resumes, what was kept is delivered) or
  :meth:`Proxy.cut`.
- :meth:`Proxy.strand`: the connections live now go silent for good (as when a NAT or a
  load balancer forgets them: the client's socket stays open, nothing arrives, nothing
  it sends gets through), while new connections are served. Only the client's own
  timeouts get it out: a request's read timeout, a watch's inactivity timeout.

Threads and blocking sockets: two copying threads per connection, a ``threading.Event``
that the copiers wait on while the hole is open. Bounded: at most :data:`MAX_CONNECTIONS`
connections at once (beyond that a new one is refused with a RST).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import yaml

MAX_CONNECTIONS = 256
THEN = ("heal", "rst", "fin", "strand")  # how a black hole ends
CHUNK = 65536
POLL = 0.2  # seconds: how often a blocked copier looks whether it was told to stop


def _rst(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


def _fin(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class _Link:
    """One client connection and its upstream, copied both ways by two threads."""

    def __init__(self, proxy: Proxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy, self.client, self.upstream = proxy, client, upstream
        self.closed = threading.Event()
        self.stranded = False
        for sock in (client, upstream):
            sock.settimeout(POLL)

    def start(self) -> None:
        """Copy both ways: called once the proxy knows the link, so a byte the link copies
        (a client's first answer) never precedes the link being counted live or cut."""
        for source, sink in ((self.client, self.upstream), (self.upstream, self.client)):
            threading.Thread(target=self._copy, args=(source, sink), daemon=True).start()

    def forwarding(self) -> bool:
        """Forward now? (Waits up to :data:`POLL` while not.)"""
        if self.stranded:
            self.closed.wait(POLL)
            return False
        return self.proxy.forwarding.wait(POLL)

    def _copy(self, source: socket.socket, sink: socket.socket) -> None:
        while not self.closed.is_set():
            if not self.forwarding():
                continue  # the black hole: read nothing, send nothing, close nothing
            try:
                data = source.recv(CHUNK)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:
                break
            while data and not self.closed.is_set():
                if not self.forwarding():
                    continue  # held mid-copy: kept until the heal (or dropped by a cut)
                try:
                    sent = sink.send(data)
                except TimeoutError:
                    continue
                except OSError:
                    self.close(how="fin")
                    return
                data = data[sent:]
        self.close(how="fin")

    def close(self, *, how: str) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for sock in (self.client, self.upstream):
            (_rst if how == "rst" else _fin)(sock)
        self.proxy.forget(self)


class Proxy:
    """``with Proxy(upstream=("127.0.0.1", 6443)) as proxy:`` serves on ``proxy.port``."""

    def __init__(self, *, upstream: tuple[str, int], host: str | None = None) -> None:
        self.upstream = upstream
        self.host = host or upstream[0]
        self.forwarding = threading.Event()
        self.forwarding.set()
        self.accepted = 0  # connections accepted, in all
        self.cuts = 0  # connections closed by cut()
        self._links: set[_Link] = set()
        self._lock = threading.Lock()
        self._listener = socket.create_server((self.host, 0))
        self._listener.settimeout(POLL)
        self.port: int = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def live(self) -> int:
        with self._lock:
            return len(self._links)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                full = len(self._links) >= MAX_CONNECTIONS
            if full:
                _rst(client)
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _rst(client)  # the upstream is down: say so at once, as a refused connect
                continue
            link = _Link(self, client, upstream)
            with self._lock:
                self._links.add(link)
                self.accepted += 1
            link.start()

    def forget(self, link: _Link) -> None:
        with self._lock:
            self._links.discard(link)

    def cut(self, *, how: str = "rst") -> int:
        """Close every live connection now (``rst`` or ``fin``); forwarding resumes for
        new ones. How many were closed."""
        if how not in ("rst", "fin"):
            raise ValueError(f"how must be 'rst' or 'fin', not {how!r}")
        with self._lock:
            links = list(self._links)
        for link in links:
            link.close(how=how)
        self.cuts += len(links)
        self.forwarding.set()
        return len(links)

    def black_hole(self) -> None:
        """Stop forwarding in both directions, closing nothing (a silent partition)."""
        self.forwarding.clear()

    def strand(self) -> int:
        """Silence every live connection for good (never closed by the proxy until a cut
        or the end), serving new ones. How many."""
        with self._lock:
            links = [link for link in self._links if not link.stranded]
        for link in links:
            link.stranded = True
        return len(links)

    def heal(self) -> None:
        """Forward again, on the held connections too."""
        self.forwarding.set()

    def __enter__(self) -> Proxy:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._listener.close()
        self.forwarding.set()
        self.cut(how="fin")


def upstream_of(kubeconfig: Path, *, context: str) -> tuple[str, int]:
    """The (host, port) that ``context``'s cluster in ``kubeconfig`` serves on."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = next(c["context"]["cluster"] for c in config["contexts"] if c["name"] == context)
    server = next(c["cluster"]["server"] for c in config["clusters"] if c["name"] == cluster)
    parts = urlsplit(server)
    assert parts.hostname and parts.port, server
    return parts.hostname, parts.port


def proxied_kubeconfig(kubeconfig: Path, *, proxy: Proxy, into: Path) -> Path:
    """A copy of ``kubeconfig`` with every cluster's server the proxy (same credentials)."""
    config = yaml.safe_load(kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = proxy.url
    into.write_text(yaml.safe_dump(config))
    return into


def hold_black_hole(proxy: Proxy, *, seconds: float, then: str) -> float:
    """The hole open for ``seconds`` (a fault's duration, not a synchronisation), then
    ``then``: ``"heal"``, ``"rst"``/``"fin"`` (a cut), or ``"strand"`` (the connections
    that lived through it silent for good, new ones served). The monotonic moment it
    ended."""
    if then not in THEN:
        raise ValueError(f"then must be one of {', '.join(THEN)}, not {then!r}")
    proxy.black_hole()
    time.sleep(seconds)
    if then == "strand":
        proxy.strand()
        proxy.heal()
    elif then == "heal":
        proxy.heal()
    else:
        proxy.cut(how=then)
    return time.monotonic()
