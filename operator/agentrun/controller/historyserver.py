"""The history API: a slot's journal served to people through the API server, under RBAC.

People have no store credentials (they are the platform's), so the operator reads a
journal for them. It does so as an *aggregated API* (group ``history.agentrun.dev``,
resource ``slothistories``, verb ``get``) registered by an APIService: the API server
authenticates the person (any way it knows: certificates, tokens, OIDC, impersonation),
checks RBAC on ``slothistories``, and forwards the request over TLS with the person's
identity in headers, which it vouches for with its front-proxy client certificate. This
server then:

1. believes those headers only on a connection whose client certificate is the front
   proxy's (:mod:`agentrun.controller.frontproxy`); anything else is 401. A request with
   a body is refused and its connection closed: a body is where a second request with
   forged headers would hide on a connection the front proxy opened;
2. asks the API server whether that person may ``get`` the slot itself (a
   SubjectAccessReview): reading a slot's journal needs what reading the slot needs, so
   a role that grants the history but not the slot grants nothing (403);
3. reads the history (:mod:`agentrun.controller.journalhistory`) and answers it as a
   Kubernetes object, or a ``Status`` naming what is wrong.

Discovery (what the group serves) and health are answered to anyone: they hold no data,
and the API server must find the APIService available whenever the operator runs, or
its discovery (and every namespace's deletion) waits. ``kubectl get slothistory NAME -o
yaml`` and ``kubectl agentrun history`` read it. One request reads at most
:data:`journalhistory.MOST` nodes; at most :data:`CONCURRENT` histories are read at once
(more are told 429 with ``Retry-After``) and at most :data:`CONNECTIONS` connections are
open (more are closed at once): the operator's reconciling shares the process.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentrun import rest
from agentrun.api import names
from agentrun.controller import frontproxy, journalhistory, journalstores, metrics, servingcerts
from agentrun.controller.frontproxy import FrontProxy
from agentrun.kube import clients, reads
from agentrun.rest import throttle

GROUP, VERSION, RESOURCE = names.HISTORY_GROUP, names.HISTORY_VERSION, names.HISTORY_RESOURCE
CONCURRENT = 4  # histories read at once
CONNECTIONS = 64  # connections open at once (the API server keeps a few, reused)
SOCKET_SECONDS = 30.0  # a client that sends nothing for this long is dropped
RETRY_AFTER_SECONDS = 2
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_PATH = re.compile(rf"/apis/{re.escape(GROUP)}/{VERSION}/namespaces/(?P<namespace>[^/]+)/"
                   rf"{RESOURCE}/(?P<name>[^/]+)")
Object = dict[str, Any]

GROUP_VERSION = {"groupVersion": f"{GROUP}/{VERSION}", "version": VERSION}
RESOURCES = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/{VERSION}",
             "resources": [{"name": RESOURCE, "singularName": "slothistory", "namespaced": True,
                            "kind": names.HISTORY_KIND, "verbs": ["get"],
                            "categories": [names.CATEGORY]}]}
API_GROUP = {"kind": "APIGroup", "apiVersion": "v1", "name": GROUP, "versions": [GROUP_VERSION],
             "preferredVersion": GROUP_VERSION}
DISCOVERY: dict[str, Object] = {
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [API_GROUP]},
    f"/apis/{GROUP}": API_GROUP,
    f"/apis/{GROUP}/{VERSION}": RESOURCES,
    # The API server gathers every aggregated API's OpenAPI; an empty one says "no schema".
    "/openapi/v2": {"swagger": "2.0", "info": {"title": GROUP, "version": VERSION},
                    "paths": {}},
    "/openapi/v3": {"paths": {}},
}


def status(code: int, reason: str, message: str) -> Object:
    """A Kubernetes ``Status``: what kubectl prints for a failed request."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


@dataclass(kw_only=True)
class History:
    """What the handler needs: the API client, the histories, the front proxy."""

    client: rest.Rest
    histories: journalhistory.Histories
    proxy: FrontProxy | None
    logger: logging.Logger
    slots: threading.BoundedSemaphore = field(
        default_factory=lambda: threading.BoundedSemaphore(CONCURRENT))

    def answer(self, *, path: str, query: str, peer: dict[str, Any] | None,
               headers: list[tuple[str, str]]) -> tuple[int, Object]:
        """The HTTP status and body for a GET of ``path``."""
        if path in ("/healthz", "/livez", "/readyz"):
            return 200, {"status": "ok"}
        if path in DISCOVERY:
            return 200, DISCOVERY[path]
        proxy = self.proxy
        if proxy is None or not proxy.admits(peer):
            return 401, status(401, "Unauthorized", "only the API server's front proxy is "
                               "served here: use kubectl get slothistory (or kubectl agentrun "
                               "history), not this address")
        found = _PATH.fullmatch(path)
        if found is None:
            return 404, status(404, "NotFound", f"{path[:200]} is not served here")
        namespace, name = found["namespace"], found["name"]
        if not (_NAME.fullmatch(namespace) and _NAME.fullmatch(name)):
            return 404, status(404, "NotFound", "not a namespace and slot name")
        try:
            person = proxy.person(headers)
        except frontproxy.Unidentified as error:
            return 401, status(401, "Unauthorized", str(error))
        if not self.slots.acquire(blocking=False):
            return 429, status(429, "TooManyRequests", "the operator is serving other "
                               "histories; try again in a few seconds")
        try:
            limits = urllib.parse.parse_qs(query).get("limit")
            limit = journalhistory.parse_limit(limits[0] if limits else None)
            named = urllib.parse.parse_qs(query).get("record")
            record = journalhistory.parse_record(named[0] if named else None)
            if not frontproxy.may_read(self.client, person, namespace=namespace, slot=name):
                return 403, status(403, "Forbidden", f"{person.user} cannot get slot "
                                   f"{name} in {namespace}: reading a slot's journal needs "
                                   "get on the slot (the view role grants it)")
            if record is not None and not frontproxy.may_read(
                    self.client, person, namespace=namespace, slot=name,
                    verb=names.VERB_APPROVE):
                return 403, status(403, "Forbidden", f"{person.user} cannot read slot "
                                   f"{name}'s records in {namespace}: a record's payload is "
                                   "for approvers (the verb 'approve' on the slot, the role "
                                   "agentrun-approver); the history without --record needs "
                                   "only get")
            return 200, self.histories.history(namespace=namespace, slot=name, limit=limit,
                                               record=record)
        except journalhistory.HistoryError as error:
            return error.status, status(error.status, error.reason, error.message)
        except rest.ApiError as error:
            self.logger.warning("a history of %s/%s failed: %s", namespace, name, error)
            return 503, status(503, "ServiceUnavailable",
                               f"the operator could not ask the API server: {error.message}")
        finally:
            self.slots.release()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.request.settimeout(SOCKET_SECONDS)
        self.request.do_handshake()  # here, in this connection's thread, not the acceptor's
        super().setup()

    def do_GET(self) -> None:
        if self.headers.get("Transfer-Encoding") or self.headers.get(
                "Content-Length", "0").strip() != "0":
            self.close_connection = True  # what follows is never read as a request
            self._send(400, status(400, "BadRequest", "a GET of the history has no body"))
            return
        parsed = urllib.parse.urlsplit(self.path)
        code, body = self.server.history.answer(
            path=parsed.path, query=parsed.query, peer=self.request.getpeercert(),
            headers=list(self.headers.items()))
        self._send(code, body)

    def _refuse(self) -> None:
        self.close_connection = True  # its body is never read as a request
        self._send(405, status(405, "MethodNotAllowed", "the history is read only"))

    def _send(self, code: int, body: Object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if code == 429:
            self.send_header("Retry-After", str(RETRY_AFTER_SECONDS))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _refuse

    def log_message(self, format: str, *args: Any) -> None:
        self.server.history.logger.debug("history: " + format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], *, history: History,
                 context: ssl.SSLContext) -> None:
        self.history = history
        self.context = context  # replaced whole when the front proxy's CA changes
        self.connections = threading.BoundedSemaphore(CONNECTIONS)
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = self.socket.accept()
        return self.context.wrap_socket(conn, server_side=True,
                                        do_handshake_on_connect=False), address

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.connections.acquire(blocking=False):
            self.shutdown_request(request)  # too many open: this one is closed at once
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.history.logger.debug("history: a connection from %s failed", client_address,
                                  exc_info=True)


def context(*, certificate: bytes, key: bytes, proxy: FrontProxy | None) -> ssl.SSLContext:
    """TLS for the server: its certificate, and client certificates verified against the
    front proxy's CA when there is one (optional: a health check brings none)."""
    made = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    made.minimum_version = ssl.TLSVersion.TLSv1_2
    # ssl loads a key only from a path: an in-memory file's, so the key never touches a
    # disk (and the operator's root filesystem stays read-only).
    descriptors = [os.memfd_create(name) for name in ("certificate", "key")]
    try:
        for descriptor, data in zip(descriptors, (certificate, key), strict=True):
            os.write(descriptor, data)
        made.load_cert_chain(*(f"/proc/self/fd/{d}" for d in descriptors))
    finally:
        for descriptor in descriptors:
            os.close(descriptor)
    if proxy is not None:
        made.verify_mode = ssl.CERT_OPTIONAL
        made.load_verify_locations(cadata=proxy.ca)
    return made


@dataclass
class Server:
    """A running history server (:func:`serve`)."""

    server: _Server
    serving: servingcerts.Serving  # the certificate new connections get

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def use(self, serving: servingcerts.Serving) -> None:
        """Serve ``serving`` to new connections from now on (the front proxy kept)."""
        self.server.context = context(certificate=serving.certificate, key=serving.key,
                                      proxy=self.server.history.proxy)
        self.serving = serving

    def refresh(self, client: rest.Rest) -> None:
        """Read the front proxy again; a new CA (or one where there was none) replaces
        the TLS context new connections get. A failed read keeps what was there."""
        history = self.server.history
        try:
            found = frontproxy.read(client)
        except Exception as error:  # an API server not answering: the next round tries
            history.logger.warning("cannot read %s: %s", frontproxy.AUTHENTICATION, error)
            return
        if found == history.proxy:
            return
        history.proxy = found
        self.use(self.serving)
        if found is None:
            history.logger.warning("the API server names no front proxy "
                                   "(requestheader-client-ca-file): nobody can read "
                                   "journals through it")
        else:
            history.logger.info("the history API trusts the front proxy of %s",
                                frontproxy.AUTHENTICATION)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve(*, address: str, port: int, history: History,
          serving: servingcerts.Serving) -> Server:
    """Serve the history on ``address:port`` in a thread; ``OSError`` if it cannot bind."""
    server = _Server((address, port), history=history,
                     context=context(certificate=serving.certificate, key=serving.key,
                                     proxy=history.proxy))
    threading.Thread(target=server.serve_forever, name="history", daemon=True).start()
    return Server(server=server, serving=serving)


@dataclass(kw_only=True)
class HistoryService:
    """The history served (:func:`start`): the server and its registration."""

    server: Server
    registration: servingcerts.Registration

    def close(self) -> None:
        self.registration.stop()
        self.server.close()


def start(*, context: str | None, address: str, port: int, logger: logging.Logger,
          operator_namespace: str, bucket: throttle.Bucket | None = None,
          may_write: Callable[[], bool] = lambda: True,
          meters: metrics.Metrics | None = None) -> HistoryService:
    """The history served and registered: the server bound (``OSError`` if it cannot be),
    then kept current (:class:`servingcerts.Registration`): serving the shared
    certificate, made and registered on the APIService while ``may_write`` (this replica
    leads), the front proxy as the API server names it. Until the shared certificate is
    read the server has a provisional one no API server trusts; ``meters``' readiness
    waits for the first read. ``bucket``: the process's client-side rate limit;
    ``operator_namespace``: where the certificate's Secret and the Service are (the one
    the operator resolved at start; required, as no install's namespace can be assumed)."""
    client = rest.Rest(clients.configure(context=context), throttle=bucket)
    histories = journalhistory.Histories(
        client=client, stores=journalstores.JournalStores(
            reader=reads.Reader(client, operator_namespace=operator_namespace)))
    server = serve(address=address, port=port,
                   serving=servingcerts.self_signed(hosts=servingcerts.dns_names(
                                                        namespace=operator_namespace),
                                                    now=datetime.now(UTC)),
                   history=History(client=client, histories=histories, proxy=None,
                                   logger=logger))
    registration = servingcerts.Registration(client=client, logger=logger, use=server.use,
                                             may_write=may_write,
                                             namespace=operator_namespace,
                                             also=lambda: server.refresh(client))
    if meters is not None:
        meters.require(lambda: None if registration.looked else (
            f"the history API's certificate ({operator_namespace}/"
            f"{names.HISTORY_TLS_SECRET}) is not read yet"))
    registration.keep()
    return HistoryService(server=server, registration=registration)
