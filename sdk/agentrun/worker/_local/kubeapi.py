"""A minimal Kubernetes API: the Lease calls a worker makes, and nothing else.

The SDK reads and renews its attempt's Lease (GET, PUT), commits records and advances its
journal's head on it (merge PATCH under the resourceVersion read), lists its slot's and
its run's attempt Leases by label (the recoverable prefix, the run's budget). That is all
a worker's ServiceAccount may do in a cluster, so it is all this serves; any other path
is a 404 that says so. Requests must carry the kubeconfig's bearer token (401 otherwise,
decided before the body is read), as the API server would want the pod's; a body over
the API server's 3 MiB is a 413, a Lease over etcd's 1.5 MiB a 422 (:mod:`.leases`).
"""

from __future__ import annotations

import json
import re
import secrets
from typing import cast

from agentrun.worker._local import servers, settings
from agentrun.worker._local.leases import ApiFailure, Leases, Object

_LEASES = re.compile(r"/apis/coordination\.k8s\.io/v1/namespaces/(?P<namespace>[a-z0-9-]+)"
                     r"/leases(?:/(?P<name>[a-z0-9.-]+))?/?")
MERGE_PATCHES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


class LeaseHandler(servers.Handler):
    """One request to the fake API server (:func:`handler` binds the store and token)."""

    leases: Leases
    token: str

    limit = settings.MAX_LEASE_REQUEST_BYTES

    def refuse(self, status: int, reason: str, message: str) -> None:
        self.answer(status, json.dumps(ApiFailure(status, reason, message).body()).encode())

    def serve(self) -> None:
        path, query = self.route
        try:
            if not secrets.compare_digest(self.headers.get("Authorization") or "",
                                          f"Bearer {self.token}"):
                self.close_connection = True  # its body is not read
                raise ApiFailure(401, "Unauthorized", "Unauthorized")
            data = self.body()
            if data is None:
                return
            match = _LEASES.fullmatch(path)
            if match is None:
                raise ApiFailure(404, "NotFound", f"the local harness serves only "
                                 f"coordination.k8s.io/v1 Leases, not {path}")
            body = self._json(data)
            status, answer = self._route(self.command, match["namespace"], match["name"],
                                         query=query, body=body)
        except ApiFailure as failure:
            status, answer = failure.status, failure.body()
        self.answer(status, json.dumps(answer).encode())

    def _json(self, data: bytes) -> Object | None:
        if not data:
            return None
        try:
            loaded = json.loads(data)
        except ValueError as error:
            raise ApiFailure(400, "BadRequest", f"the body is not JSON: {error}") from None
        if not isinstance(loaded, dict):
            raise ApiFailure(400, "BadRequest", "the body is not a JSON object")
        return cast(Object, loaded)

    def _route(self, verb: str, namespace: str, name: str | None, *,
               query: dict[str, str], body: Object | None) -> tuple[int, Object]:
        if name is None:
            if verb == "GET":
                return 200, self.leases.list(namespace, labels=query.get("labelSelector", ""))
            if verb == "POST" and body is not None:
                return 201, self.leases.create(namespace, body)
        elif verb == "GET":
            return 200, self.leases.get(namespace, name)
        elif verb == "PUT" and body is not None:
            return 200, self.leases.replace(namespace, name, body)
        elif verb == "PATCH" and body is not None:
            kind = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            if kind not in MERGE_PATCHES:
                raise ApiFailure(415, "UnsupportedMediaType", f"the local harness takes "
                                 f"merge patches only, not {kind or 'no content type'}")
            return 200, self.leases.patch(namespace, name, body)
        bare = "with no body " if body is None else ""
        raise ApiFailure(405, "MethodNotAllowed", f"{verb} {bare}is not served here")


def handler(*, leases: Leases, token: str) -> type[LeaseHandler]:
    """The handler class bound to ``leases`` and the bearer ``token`` it wants."""
    return cast(type[LeaseHandler], type("LocalLeaseApi", (LeaseHandler,),
                                         {"leases": leases, "token": token}))
