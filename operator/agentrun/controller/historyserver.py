"""The history API: a slot's journal served to people through the API server, under RBAC.

People have no store credentials (they are the platform's), so the operator reads a
journal for them. It does so as an *aggregated API* (group ``history.agentrun.dev``,
resource ``slothistories``, verb ``get``) registered by an APIService: the API server
authenticates the person (any way it knows: certificates, tokens, OIDC, impersonation),
checks RBAC on ``slothistories``, and forwards the request over TLS with the person's
identity in headers, which it vouches for with its front-proxy client certificate. This
server then:

1. trusts those headers only on a connection whose client certificate chains to the
   API server's request-header CA and names an allowed front proxy (both read from the
   ConfigMap ``kube-system/extension-apiserver-authentication``, as every aggregated API
   does); anything else is 401;
2. asks the API server whether that person may ``get`` the slot itself (a
   SubjectAccessReview): reading a slot's journal needs what reading the slot needs, so
   a role that grants the history but not the slot grants nothing (403);
3. reads the history (:mod:`agentrun.controller.journalhistory`) and answers it as a
   Kubernetes object, or a ``Status`` naming what is wrong.

``kubectl get slothistory NAME -o yaml`` and ``kubectl agentrun history`` read it. One
request reads at most :data:`journalhistory.MOST` nodes; at most :data:`CONCURRENT` are
served at once, more are told 429 (the operator's reconciling comes first).
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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentrun.api import names
from agentrun.controller import journalhistory, journalstores, servingcerts
from agentrun.kube import clients, reads, rest

GROUP, VERSION, RESOURCE = names.HISTORY_GROUP, names.HISTORY_VERSION, names.HISTORY_RESOURCE
AUTHENTICATION = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
CONCURRENT = 4
HEADER_CHARS = 1024  # a user name, group or extra value (the API server's own are short)
HEADER_VALUES = 64  # groups or extra values a request may carry
SOCKET_SECONDS = 30.0  # a client that sends nothing for this long is dropped
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


@dataclass(frozen=True)
class Person:
    """Who the API server says is asking (its user, groups and extra attributes)."""

    user: str
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, kw_only=True)
class FrontProxy:
    """What the API server's front proxy is, from ``extension-apiserver-authentication``:
    the CA its client certificate chains to, the names it may have (empty: any), and the
    headers it puts the person in."""

    ca: str
    allowed: tuple[str, ...] = ()
    users: tuple[str, ...] = ("X-Remote-User",)
    groups: tuple[str, ...] = ("X-Remote-Group",)
    extras: tuple[str, ...] = ("X-Remote-Extra-",)

    @classmethod
    def from_configmap(cls, data: dict[str, str]) -> FrontProxy | None:
        """None when the API server names no request-header CA (no front proxy: nobody
        can be authenticated here)."""
        ca = data.get("requestheader-client-ca-file", "").strip()
        if not ca:
            return None

        def listed(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
            try:
                found = json.loads(data.get(key) or "null")
            except ValueError:
                return default
            return tuple(str(v) for v in found) if isinstance(found, list) else default

        return cls(ca=ca, allowed=listed("requestheader-allowed-names", ()),
                   users=listed("requestheader-username-headers", cls.users),
                   groups=listed("requestheader-group-headers", cls.groups),
                   extras=listed("requestheader-extra-headers-prefix", cls.extras))

    def admits(self, peer: dict[str, Any] | None) -> bool:
        """Whether a verified client certificate (``ssl.getpeercert()``) is the proxy's."""
        if not peer:
            return False
        if not self.allowed:
            return True
        common = [value for rdn in peer.get("subject", ()) for key, value in rdn
                  if key == "commonName"]
        return any(name in self.allowed for name in common)

    def person(self, headers: list[tuple[str, str]]) -> Person | None:
        """The person the headers name (None: no user); values over the bounds are cut
        off, never trusted in part: a header too long or too many makes it None."""
        lowered = [(k.lower(), v) for k, v in headers]
        users = {h.lower() for h in self.users}
        groups = {h.lower() for h in self.groups}
        extras = tuple(p.lower() for p in self.extras)
        if any(len(v) > HEADER_CHARS for _, v in lowered) or len(lowered) > 4 * HEADER_VALUES:
            return None
        user = next((v for k, v in lowered if k in users), "")
        if not user:
            return None
        found_groups = tuple(v for k, v in lowered if k in groups)
        extra: dict[str, list[str]] = {}
        for key, value in lowered:
            prefix = next((p for p in extras if key.startswith(p)), None)
            if prefix is not None:
                extra.setdefault(urllib.parse.unquote(key[len(prefix):]), []).append(value)
        if len(found_groups) > HEADER_VALUES or len(extra) > HEADER_VALUES:
            return None
        return Person(user=user, groups=found_groups,
                      extra=tuple((k, tuple(v)) for k, v in sorted(extra.items())))


def may_read(client: rest.Rest, person: Person, *, namespace: str, slot: str) -> bool:
    """Whether ``person`` may ``get`` the slot, by the API server's own answer."""
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": person.user, "groups": list(person.groups),
                       "extra": {k: list(v) for k, v in person.extra},
                       "resourceAttributes": {"namespace": namespace, "verb": "get",
                                              "group": names.GROUP, "version": names.VERSION,
                                              "resource": "slots", "name": slot}}}
    answer = client.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                            body=review)
    return bool((answer.get("status") or {}).get("allowed"))


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
        if self.proxy is None or not self.proxy.admits(peer):
            return 401, status(401, "Unauthorized", "only the API server's front proxy is "
                               "served here: use kubectl get slothistory (or kubectl agentrun "
                               "history), not this address")
        if path in DISCOVERY:
            return 200, DISCOVERY[path]
        found = _PATH.fullmatch(path)
        if found is None:
            return 404, status(404, "NotFound", f"{path[:200]} is not served here")
        namespace, name = found["namespace"], found["name"]
        if not (_NAME.fullmatch(namespace) and _NAME.fullmatch(name)):
            return 404, status(404, "NotFound", "not a namespace and slot name")
        person = self.proxy.person(headers)
        if person is None:
            return 401, status(401, "Unauthorized", "the request names no user")
        if not self.slots.acquire(blocking=False):
            return 429, status(429, "TooManyRequests", "the operator is serving other "
                               "histories; try again in a few seconds")
        try:
            limits = urllib.parse.parse_qs(query).get("limit")
            limit = journalhistory.parse_limit(limits[0] if limits else None)
            if not may_read(self.client, person, namespace=namespace, slot=name):
                return 403, status(403, "Forbidden", f"{person.user} cannot get slot "
                                   f"{name} in {namespace}: reading a slot's journal needs "
                                   "get on the slot (the view role grants it)")
            return 200, self.histories.history(namespace=namespace, slot=name, limit=limit)
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
        parsed = urllib.parse.urlsplit(self.path)
        self._send(*self.server.history.answer(
            path=parsed.path, query=parsed.query, peer=self.request.getpeercert(),
            headers=list(self.headers.items())))

    def _refuse(self) -> None:
        self._send(405, status(405, "MethodNotAllowed", "the history is read only"))

    def _send(self, code: int, body: Object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_PUT = do_PATCH = do_DELETE = _refuse

    def log_message(self, format: str, *args: Any) -> None:
        self.server.history.logger.debug("history: " + format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], history: History,
                 context: ssl.SSLContext) -> None:
        self.history = history
        self.context = context
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = self.socket.accept()
        return self.context.wrap_socket(conn, server_side=True,
                                        do_handshake_on_connect=False), address

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


def front_proxy(client: rest.Rest) -> FrontProxy | None:
    """The API server's front proxy, or None when it has none (or it cannot be read)."""
    found = client.get(AUTHENTICATION) or {}
    return FrontProxy.from_configmap(found.get("data") or {})


@dataclass
class Server:
    """A running history server (:func:`serve`)."""

    server: _Server
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve(*, address: str, port: int, history: History, certificate: bytes,
          key: bytes) -> Server:
    """Serve the history on ``address:port`` in a thread; ``OSError`` if it cannot bind."""
    server = _Server((address, port), history,
                     context(certificate=certificate, key=key, proxy=history.proxy))
    thread = threading.Thread(target=server.serve_forever, name="history", daemon=True)
    thread.start()
    return Server(server=server, thread=thread)


def start(*, context: str | None, address: str, port: int,
          logger: logging.Logger) -> tuple[Server, servingcerts.Registration]:
    """The history served and registered: a certificate made, the front proxy read, the
    server bound (``OSError`` if it cannot be), the APIService kept trusting it."""
    client = rest.Rest(clients.configure(context=context))
    serving = servingcerts.self_signed(hosts=servingcerts.dns_names(),
                                       now=datetime.now(UTC))
    try:
        proxy = front_proxy(client)
    except rest.ApiError as error:
        logger.warning("cannot read %s: %s", AUTHENTICATION, error)
        proxy = None
    if proxy is None:
        logger.warning("the API server names no front proxy (requestheader-client-ca-file): "
                       "nobody can read journals through it")
    histories = journalhistory.Histories(
        client=client, stores=journalstores.JournalStores(reader=reads.Reader(client)))
    server = serve(address=address, port=port, certificate=serving.certificate,
                   key=serving.key,
                   history=History(client=client, histories=histories, proxy=proxy,
                                   logger=logger))
    registration = servingcerts.Registration(client=client, serving=serving, logger=logger)
    registration.keep()
    return server, registration
