"""The history API's pure parts and its TLS gate, without a cluster.

What people see through the real API server (RBAC, the SubjectAccessReview, the journal
in a real store) is tests/integration/node/test_journal_history.py; here: who the front
proxy's headers name and when they are trusted (a real TLS handshake on loopback, with
certificates made here), a second request hidden in a body never read, connections
bounded, how a chain is walked and bounded, the limit parsed.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import ssl
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from agentrun.api import journalnodes, names, records
from agentrun.controller import frontproxy, historyserver, journalhistory, servingcerts
from agentrun.controller.frontproxy import FrontProxy, Person
from agentrun.worker import _records as worker_records

NOW = datetime(2026, 12, 4, tzinfo=UTC)
HOSTS = servingcerts.dns_names(namespace=names.OPERATOR_NAMESPACE)


def test_front_proxy_read_from_the_configmap() -> None:
    proxy = FrontProxy.from_configmap({
        "requestheader-client-ca-file": "PEM\n",
        "requestheader-allowed-names": '["front-proxy-client"]',
        "requestheader-username-headers": '["X-Remote-User"]',
        "requestheader-group-headers": '["X-Remote-Group"]',
        "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]'})
    assert proxy is not None
    assert (proxy.ca, proxy.allowed) == ("PEM", ("front-proxy-client",))
    assert FrontProxy.from_configmap({}) is None  # no front proxy: nobody is served
    broken = FrontProxy.from_configmap({"requestheader-client-ca-file": "PEM",
                                        "requestheader-allowed-names": "{not json"})
    assert broken is not None and broken.allowed == ()


@pytest.mark.parametrize(("allowed", "subject", "admitted"), [
    (("front-proxy-client",), "front-proxy-client", True),
    (("front-proxy-client",), "someone-else", False),
    ((), "anyone-from-the-ca", True),  # no names listed: the CA alone decides
])
def test_only_an_allowed_proxy_certificate_is_admitted(
        allowed: tuple[str, ...], subject: str, admitted: bool) -> None:
    proxy = FrontProxy(ca="PEM", allowed=allowed)
    peer = {"subject": ((("commonName", subject),),)}
    assert proxy.admits(peer) is admitted
    assert not proxy.admits({}) and not proxy.admits(None)  # no certificate


def test_the_person_is_read_from_the_configured_headers() -> None:
    proxy = FrontProxy(ca="PEM")
    person = proxy.person([("X-Remote-User", "bob"), ("X-Remote-Group", "team-a"),
                           ("x-remote-group", "system:authenticated"),
                           ("X-Remote-Extra-Scopes", "view"),
                           ("X-Remote-Extra-Some%2fKey", "v"), ("Authorization", "x")])
    assert person == Person(user="bob", groups=("team-a", "system:authenticated"),
                            extra=(("scopes", ("view",)), ("some/key", ("v",))))
    with pytest.raises(frontproxy.Unidentified, match="names no user"):
        proxy.person([("X-Remote-Group", "g")])
    with pytest.raises(frontproxy.Unidentified, match="over 1024 characters"):
        proxy.person([("X-Remote-User", "b" * (frontproxy.HEADER_CHARS + 1))])
    many = [("X-Remote-User", "bob"),
            *[("X-Remote-Group", f"g{i}") for i in range(frontproxy.HEADER_VALUES + 1)]]
    with pytest.raises(frontproxy.Unidentified, match="more than 64 groups"):
        proxy.person(many)  # over the bound: refused whole, never authorized on a part
    # Long headers the proxy did not set (a cookie, a trace) are no reason to refuse.
    assert proxy.person([("X-Remote-User", "bob"), ("Cookie", "c" * 5000)]).user == "bob"


def test_the_user_header_is_the_first_configured_one_present_whatever_the_order() -> None:
    """The API server tries its user headers in order: a later one a client smuggled in
    (the front proxy strips only the names it sets) never wins over the first."""
    proxy = FrontProxy(ca="PEM", users=("X-Remote-User", "X-Forwarded-User"))
    found = proxy.person([("X-Forwarded-User", "system:admin"), ("X-Remote-User", "bob")])
    assert found.user == "bob"


@pytest.mark.parametrize(("text", "expected"), [(None, journalhistory.LIMIT), ("", 200),
                                                 ("1", 1), ("1000", 1000)])
def test_limit_parsed(text: str | None, expected: int) -> None:
    assert journalhistory.parse_limit(text) == expected


@pytest.mark.parametrize("text", ["0", "1001", "-1", "ten", "1e3", "9" * 30])
def test_bad_limit_is_a_bad_request(text: str) -> None:
    with pytest.raises(journalhistory.HistoryError) as raised:
        journalhistory.parse_limit(text)
    assert raised.value.status == 400 and "1 to 1000" in raised.value.message


def _chain(attempt: int, sizes: list[int]) -> tuple[journalnodes.Head, dict[str, bytes]]:
    """An attempt's nodes, one record each, and its head."""
    nodes, prev = {}, None
    for seq, size in enumerate(sizes, start=1):
        record = worker_records.make(key=f"step-{attempt}-{seq}", kind=records.Kind.STEP_RESULT,
                              attempt=attempt, payload="x" * size, store=None)
        data = journalnodes.node(attempt=attempt, seq=seq, prev=prev, entries=[record])
        prev = records.digest(data)
        nodes[prev] = data
    assert prev is not None
    return journalnodes.Head(seq=len(sizes), digest=prev), nodes


def _lease(attempt: int, head: journalnodes.Head | None, *, ended: bool) -> dict[str, Any]:
    annotations = {journalnodes.HEAD: head.text()} if head else {}
    if ended:
        annotations["agentrun.dev/outcome"] = "Failed"
    return {"metadata": {"name": f"lease-{attempt}", "annotations": annotations,
                         "labels": {"agentrun.dev/attempt": str(attempt)}}}


def test_the_walk_is_newest_first_across_attempts_and_bounded() -> None:
    first, first_nodes = _chain(1, [10, 20, 30])
    second, second_nodes = _chain(2, [40, 50])
    nodes = {**first_nodes, **second_nodes}
    reads: list[str] = []

    def read(attempt: int, digest: str) -> bytes:
        reads.append(digest)
        return nodes[digest]

    chain = journalhistory.attempts([_lease(1, first, ended=True), _lease(3, None, ended=False),
                                     _lease(2, second, ended=True)])
    assert [(a.number, a.ended) for a in chain] == [(3, False), (2, True), (1, True)]
    entries, truncated = journalhistory.walk(chain=chain, read=read, limit=10, deadline=1e18)
    assert [e["key"] for e in entries] == ["step-2-2", "step-2-1", "step-1-3", "step-1-2",
                                           "step-1-1"]
    assert not truncated and [e["seq"] for e in entries] == [2, 1, 3, 2, 1]
    assert {e["stored"] for e in entries} == {"inline"}
    reads.clear()
    entries, truncated = journalhistory.walk(chain=chain, read=read, limit=3, deadline=1e18)
    assert truncated and len(entries) == 3 and len(reads) == 3  # reads what it shows
    entries, truncated = journalhistory.walk(chain=chain, read=read, limit=10, deadline=0.0,
                                             clock=lambda: 1.0)
    assert truncated and entries == []  # the deadline passed: shown as truncated


def test_one_record_is_found_newest_first_and_its_bytes_verified() -> None:
    first, first_nodes = _chain(1, [10, 20])
    second, second_nodes = _chain(2, [30])
    nodes = {**first_nodes, **second_nodes}
    chain = journalhistory.attempts([_lease(1, first, ended=True), _lease(2, second, ended=True)])
    found = journalhistory.newest(chain=chain, read=lambda _a, d: nodes[d], key="step-1-1",
                                  deadline=1e18)
    assert found is not None and (found.key, found.attempt) == ("step-1-1", 1)
    # The same key committed again by a later attempt (a payload asked for again): its.
    again = worker_records.make(key="step-1-1", kind=records.Kind.STEP_RESULT, attempt=3,
                                payload="newer", store=None)
    data = journalnodes.node(attempt=3, seq=1, prev=None, entries=[again])
    nodes[records.digest(data)] = data
    newer = journalhistory.attempts([
        _lease(1, first, ended=True), _lease(2, second, ended=True),
        _lease(3, journalnodes.Head(seq=1, digest=records.digest(data)), ended=True)])
    latest = journalhistory.newest(chain=newer, read=lambda _a, d: nodes[d], key="step-1-1",
                                   deadline=1e18)
    assert latest is not None and (latest.attempt, latest.inline) == (3, "newer")
    data = journalhistory.payload_bytes(found, get=lambda _uri, _size: b"")
    assert data == b'"' + b"x" * 10 + b'"' and records.digest(data) == found.digest
    assert journalhistory.newest(chain=chain, read=lambda _a, d: nodes[d], key="nothing",
                                 deadline=1e18) is None
    # A payload stored by reference: read from the journal, and only if it is what its
    # digest names.
    big = worker_records.Record(attempt=1, digest=records.digest(b'"big"'), ref="s3://b/x",
                                key="publish.payload", kind=records.Kind.STEP_RESULT, size=5)
    assert journalhistory.payload_bytes(big, get=lambda _uri, _size: b'"big"') == b'"big"'
    with pytest.raises(journalhistory.HistoryError) as altered:
        journalhistory.payload_bytes(big, get=lambda _uri, _size: b'"bog"')
    assert altered.value.status == 500 and "does not match its digest" in altered.value.message
    huge = big.model_copy(update={"size": journalhistory.RECORD_BYTES + 1})
    with pytest.raises(journalhistory.HistoryError) as large:
        journalhistory.payload_bytes(huge, get=lambda _uri, _size: b"")
    assert large.value.status == 413


@pytest.mark.parametrize("text", ["Publish", "a b", "x" * 64, "-a"])
def test_a_bad_record_key_is_a_bad_request(text: str) -> None:
    with pytest.raises(journalhistory.HistoryError) as raised:
        journalhistory.parse_record(text)
    assert raised.value.status == 400
    assert journalhistory.parse_record(None) is None
    assert journalhistory.parse_record("publish.payload") == "publish.payload"


def test_a_damaged_node_is_an_error_never_a_shorter_history() -> None:
    head, nodes = _chain(1, [10, 20])
    damaged = {digest: data.replace(b"step", b"stop") for digest, data in nodes.items()}
    chain = journalhistory.attempts([_lease(1, head, ended=True)])
    with pytest.raises(journalhistory.HistoryError) as raised:
        journalhistory.walk(chain=chain, read=lambda _a, d: damaged[d], limit=10,
                            deadline=1e18)
    assert raised.value.status == 500 and "does not match its digest" in raised.value.message


def test_the_serving_certificate_names_the_service() -> None:
    serving = servingcerts.self_signed(hosts=HOSTS, now=NOW)
    found = x509.load_pem_x509_certificate(serving.certificate)
    sans = found.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "agentrun-operator-history.agentrun-system.svc" in sans.get_values_for_type(
        x509.DNSName)
    assert found.not_valid_before_utc < NOW < found.not_valid_after_utc
    assert "PRIVATE" not in repr(serving)  # the key never reaches a log


def _issued(tmp: Path, name: str, *, ca: tuple[Any, Any] | None = None,
            common: str) -> tuple[Path, Path, Any, Any]:
    """A certificate (self-signed CA when ``ca`` is None) written to files."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])
    issuer_cert, issuer_key = ca if ca else (None, key)
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(issuer_cert.subject if issuer_cert else subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(NOW - timedelta(days=1))
               .not_valid_after(datetime.now(UTC) + timedelta(days=1)))
    if ca is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None),
                                        critical=True)
    else:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    cert = builder.sign(issuer_key, hashes.SHA256())
    cert_path, key_path = tmp / f"{name}.crt", tmp / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path, cert, key


def _get(port: int, path: str, *, client: tuple[Path, Path] | None,
         method: str = "GET") -> tuple[int, Any]:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    if client:
        context.load_cert_chain(*client)
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_the_server_trusts_only_the_front_proxy_certificate() -> None:
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        ca_path, _, ca_cert, ca_key = _issued(tmp, "proxy-ca", common="proxy-ca")
        proxy_client = _issued(tmp, "proxy", ca=(ca_cert, ca_key), common="front-proxy-client")
        stranger = _issued(tmp, "stranger", ca=(ca_cert, ca_key), common="someone")
        other_ca = _issued(tmp, "other-ca", common="other-ca")
        forged = _issued(tmp, "forged", ca=(other_ca[2], other_ca[3]),
                         common="front-proxy-client")
        proxy = FrontProxy(ca=ca_path.read_text(), allowed=("front-proxy-client",))
        serving = servingcerts.self_signed(hosts=HOSTS, now=NOW)
        history = historyserver.History(client=None, histories=None,  # type: ignore[arg-type]
                                        proxy=proxy, logger=logging.getLogger())
        server = historyserver.serve(address="127.0.0.1", port=0, history=history,
                                     serving=serving)
        try:
            discovery = "/apis/history.agentrun.dev/v1alpha1"
            code, body = _get(server.port, discovery, client=proxy_client[:2])
            assert code == 200 and body["resources"][0]["name"] == "slothistories"
            # Discovery holds no data: anyone (the API server's availability check too).
            assert _get(server.port, discovery, client=None)[0] == 200
            history_path = ("/apis/history.agentrun.dev/v1alpha1/namespaces/a/"
                            "slothistories/s")
            code, body = _get(server.port, history_path, client=None)
            assert code == 401 and "front proxy" in body["message"]
            code, body = _get(server.port, history_path, client=stranger[:2])
            assert code == 401  # the right CA, not an allowed name
            with pytest.raises((ssl.SSLError, ConnectionError)):
                _get(server.port, history_path, client=forged[:2])  # another CA: no handshake
            code, body = _get(server.port, history_path, client=proxy_client[:2])
            assert code == 401 and "no user" in body["message"]  # the proxy names nobody
            assert _get(server.port, "/healthz", client=None)[0] == 200
            # A second request hidden in a GET's body, with forged headers, on the proxy's
            # own connection: refused, the connection closed, the hidden one never read.
            hidden = (f"GET {history_path} HTTP/1.1\r\nHost: x\r\n"
                      "X-Remote-User: system:admin\r\nX-Remote-Group: system:masters\r\n"
                      "\r\n").encode()
            answers = _raw(server.port, client=proxy_client[:2], data=(
                f"GET {discovery} HTTP/1.1\r\nHost: x\r\nX-Remote-User: mallory\r\n"
                f"Content-Length: {len(hidden)}\r\n\r\n").encode() + hidden)
            assert answers.count(b"HTTP/1.1 ") == 1 and answers.startswith(b"HTTP/1.1 400")
            assert b"Connection: close" in answers
            code, body = _get(server.port, discovery, client=proxy_client[:2], method="POST")
            assert code == 405
        finally:
            server.close()


def _raw(port: int, *, client: tuple[Path, Path], data: bytes) -> bytes:
    """``data`` sent as is on one TLS connection; every byte answered until it closes."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.load_cert_chain(*client)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as plain, \
            context.wrap_socket(plain) as tls:
        tls.sendall(data)
        answered = b""
        while chunk := tls.recv(65536):
            answered += chunk
        return answered


def test_more_connections_than_the_bound_are_closed_at_once() -> None:
    serving = servingcerts.self_signed(hosts=HOSTS, now=NOW)
    history = historyserver.History(client=None, histories=None,  # type: ignore[arg-type]
                                    proxy=None, logger=logging.getLogger())
    server = historyserver.serve(address="127.0.0.1", port=0, history=history,
                                 serving=serving)
    held = []
    try:
        for _ in range(historyserver.CONNECTIONS):
            held.append(socket.create_connection(("127.0.0.1", server.port), timeout=10))
        # Each held one's thread waits in its handshake for a hello that never comes; the
        # server accepts in order, so the next one is over the bound.
        extra = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        with extra:
            assert extra.recv(1) == b""  # closed by the server, not served
        for opened in held:
            opened.close()
        held.clear()
        assert _get(server.port, "/healthz", client=None)[0] == 200  # free again
    finally:
        for opened in held:
            opened.close()
        server.close()


class Reviews:
    """The API server as the history server asks it: SubjectAccessReviews answered per
    verb, the verbs asked recorded; the slot, its run (journal deleted) and its Leases."""

    def __init__(self, *, allowed: set[str]) -> None:
        self.allowed, self.asked = allowed, []  # type: ignore[var-annotated]

    def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        verb = body["spec"]["resourceAttributes"]["verb"]
        self.asked.append(verb)
        return {"status": {"allowed": verb in self.allowed}}

    def get(self, path: str, query: Any = None) -> Any:
        if path.endswith("/slots/s"):
            return {"spec": {"run": "r"}}
        if path.endswith("/agentruns/r"):
            return {"status": {"pinned": {"journal": {
                "endpoint": "http://store:8333", "bucket": "journals", "prefix": "p/ns/uid"}},
                "conditions": [{"type": "JournalDeleted", "status": "True",
                                "message": "retention over"}]}}
        return {"items": []}


def _served(reviews: Reviews, query: str) -> tuple[int, Any]:
    proxy = FrontProxy(ca="unused")
    history = historyserver.History(
        client=reviews,  # type: ignore[arg-type]
        histories=journalhistory.Histories(client=reviews,  # type: ignore[arg-type]
                                           stores=None),  # type: ignore[arg-type]
        proxy=proxy, logger=logging.getLogger())
    return history.answer(path=f"/apis/{historyserver.GROUP}/{historyserver.VERSION}/"
                          "namespaces/ns/slothistories/s", query=query,
                          peer={"subject": ()}, headers=[("X-Remote-User", "bob")])


def test_a_records_payload_is_for_approvers_and_a_deleted_journal_is_gone() -> None:
    viewer = Reviews(allowed={"get"})
    code, body = _served(viewer, "record=publish.payload")
    assert code == 403 and "for approvers" in body["message"]
    assert viewer.asked == ["get", "approve"]
    listing = Reviews(allowed={"get"})
    assert _served(listing, "limit=5")[0] == 200 and listing.asked == ["get"]
    approver = Reviews(allowed={"get", "approve"})
    code, body = _served(approver, "record=publish.payload")
    assert code == 410 and "retention over" in body["message"]
    assert _served(approver, "record=Not.A.Key")[0] == 400
