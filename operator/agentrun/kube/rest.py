"""Plain REST over the kubernetes client's connection: paths in, JSON dicts out.

Why not the client's generated API classes: the decisions work on the wire form
(camelCase dicts), every resource here (custom, core, coordination, admission) is read
and written the same way, and the generated classes would convert each object into
typed models only for us to convert it back. The client still provides what matters:
configuration, authentication, TLS and connection pooling.
"""

from __future__ import annotations

import json
from typing import Any

import kubernetes

from agentrun.kube import throttle as throttles

Object = dict[str, Any]
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"


class ApiError(Exception):
    """A non-2xx answer: ``status`` and the server's ``message`` (and ``reason``)."""

    def __init__(self, status: int, body: str) -> None:
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = {}
        self.status = status
        self.reason = str(parsed.get("reason") or "")
        self.message = str(parsed.get("message") or body[:500])
        super().__init__(f"{status} {self.reason}: {self.message}")


class Rest:
    def __init__(self, api: kubernetes.client.ApiClient, *,
                 throttle: throttles.Bucket | None = None) -> None:
        self.api = api
        self.throttle = throttle  # shared with Kopf's session: see kube.throttle

    def request(self, method: str, path: str, *, body: Object | None = None,
                query: dict[str, str] | None = None, content_type: str = JSON) -> Object:
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        params = self.api.param_serialize(
            method=method, resource_path=path, query_params=list((query or {}).items()),
            header_params=headers, body=body, auth_settings=["BearerToken"])
        throttles.take(self.throttle)  # a token first (blocks while the bucket is empty)
        response = self.api.call_api(*params)
        response.read()  # type: ignore[no-untyped-call]
        data = response.data.decode() if isinstance(response.data, bytes) else response.data
        if not 200 <= response.status < 300:
            raise ApiError(response.status, data or "")
        result: Object = json.loads(data) if data else {}
        return result

    def get(self, path: str, *, query: dict[str, str] | None = None) -> Object | None:
        """GET, with 404 as None."""
        try:
            return self.request("GET", path, query=query)
        except ApiError as error:
            if error.status == 404:
                return None
            raise


def namespaced(*, group: str, version: str, plural: str, namespace: str,
               name: str | None = None, subresource: str | None = None) -> str:
    base = f"/api/{version}" if group == "" else f"/apis/{group}/{version}"
    path = f"{base}/namespaces/{namespace}/{plural}"
    if name is not None:
        path += f"/{name}"
    if subresource is not None:
        path += f"/{subresource}"
    return path
