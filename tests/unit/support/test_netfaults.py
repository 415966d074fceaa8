"""The fault proxy (tests/support/faults/netfaults.py) against a plain echo server on loopback:
each fault does what the network scenarios say it does, so their findings are the
operator's, not the proxy's."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

from tests.support.faults.netfaults import Proxy

REPLY = 2.0  # seconds: an answer that did not come by then is not coming


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # a cut resets this side too
            while data := conn.recv(4096):
                conn.sendall(data)

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[:2]
    stop.set()
    thread.join()
    server.close()


def client(proxy: Proxy) -> socket.socket:
    sock = socket.create_connection((proxy.host, proxy.port), timeout=REPLY)
    sock.sendall(b"ping")
    assert sock.recv(4) == b"ping"
    return sock


def wait_live(proxy: Proxy, count: int) -> None:
    for _ in range(100):
        if proxy.live == count:
            return
        threading.Event().wait(0.02)  # the proxy's accept thread registers the link
    assert proxy.live == count


def test_bytes_pass_through_unchanged(echo: tuple[str, int]) -> None:
    with Proxy(upstream=echo) as proxy:
        sock = client(proxy)
        sock.sendall(bytes(range(256)) * 100)
        got = b""
        while len(got) < 25600:
            got += sock.recv(65536)
        assert got == bytes(range(256)) * 100
        assert proxy.accepted == 1


def test_a_rst_cut_resets_and_a_fin_cut_ends_every_connection(echo: tuple[str, int]) -> None:
    with Proxy(upstream=echo) as proxy:
        reset, ended = client(proxy), client(proxy)
        wait_live(proxy, 2)
        assert proxy.cut(how="rst") == 2
        with pytest.raises(ConnectionResetError):
            reset.recv(4)
        ended.close()
        ended = client(proxy)  # served after the cut
        wait_live(proxy, 1)
        assert proxy.cut(how="fin") == 1
        assert ended.recv(4) == b""  # EOF, no reset


def test_a_black_hole_forwards_nothing_until_healed(echo: tuple[str, int]) -> None:
    with Proxy(upstream=echo) as proxy:
        sock = client(proxy)
        proxy.black_hole()
        sock.sendall(b"held")
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(4)  # neither an answer nor a close: silence
        late = socket.create_connection((proxy.host, proxy.port), timeout=REPLY)
        late.sendall(b"late")
        late.settimeout(0.5)
        with pytest.raises(TimeoutError):
            late.recv(4)  # a new connection is held too
        proxy.heal()
        sock.settimeout(REPLY)
        late.settimeout(REPLY)
        assert sock.recv(4) == b"held"  # what was held is delivered
        assert late.recv(4) == b"late"


def test_a_black_hole_then_a_cut(echo: tuple[str, int]) -> None:
    with Proxy(upstream=echo) as proxy:
        sock = client(proxy)
        proxy.black_hole()
        sock.sendall(b"lost")
        assert proxy.cut(how="rst") == 1
        with pytest.raises(ConnectionResetError):
            sock.recv(4)
        client(proxy)  # forwarding again


def test_a_stranded_connection_stays_silent_and_new_ones_are_served(
        echo: tuple[str, int]) -> None:
    with Proxy(upstream=echo) as proxy:
        old = client(proxy)
        wait_live(proxy, 1)
        assert proxy.strand() == 1
        old.sendall(b"gone")
        old.settimeout(0.5)
        with pytest.raises(TimeoutError):
            old.recv(4)
        client(proxy)  # a new connection works
        with pytest.raises(TimeoutError):
            old.recv(4)  # and the old one is still silent, still open


def test_a_cut_must_say_how(echo: tuple[str, int]) -> None:
    with Proxy(upstream=echo) as proxy, pytest.raises(ValueError, match="rst"):
        proxy.cut(how="both")
