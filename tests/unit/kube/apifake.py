"""An in-memory API server for driving the real applier (``Reader``/``Writer``) in unit tests.

Between the pure core and the real API server: the objects by path, each write with the
API server's preconditions (``resourceVersion`` on PUT and merge PATCH, "must not exist"
on POST, a uid on DELETE), so that the operator's own reads and writes run unchanged.
Two faults can be injected: ``conflict_next`` makes the next PUT or PATCH answer 409 (another
writer moved first), ``crash_after`` makes the process "die" (:class:`Crashed`, not an
``Exception``, so no handler catches it) right after that many more writes succeeded.
It serves what a slot's reconcile reads and writes, nothing more (no watch, no field
selectors, label selectors of ``k=v`` terms only).
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from agentrun import rest

Object = dict[str, Any]
COLLECTIONS = ("slots", "agentruns", "launchspecs", "pods", "leases", "configmaps")


class Crashed(BaseException):
    """The operator was SIGKILLed right after a write (a BaseException: nothing catches it)."""


class FakeApi:
    """Objects by path; ``writes`` is the log of successful writes (method, path)."""

    def __init__(self) -> None:
        self.objects: dict[str, Object] = {}
        self.versions = itertools.count(1)
        self.uids = itertools.count(1)
        self.writes: list[tuple[str, str]] = []
        self.created: dict[str, int] = {}  # path: the resourceVersion it was created at
        self.conflict_next = False
        self.crash_after: int | None = None

    # --- what the tests set up ------------------------------------------------------------

    def put_object(self, path: str, body: Object) -> Object:
        """Store ``body`` at ``path`` as the API would (uid, resourceVersion), no log."""
        stored = copy.deepcopy(body)
        meta = stored.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{next(self.uids)}")
        meta["resourceVersion"] = str(next(self.versions))
        meta.setdefault("generation", 1)
        self.objects[path] = stored
        self.created[path] = int(meta["resourceVersion"])
        return stored

    # --- the rest.Rest interface ----------------------------------------------------------

    def get(self, path: str, *, query: dict[str, str] | None = None) -> Object | None:
        try:
            return self.request("GET", path, query=query)
        except rest.ApiError as error:
            if error.status == 404:
                return None
            raise

    def request(self, method: str, path: str, *, body: Object | None = None,
                query: dict[str, str] | None = None, content_type: str = rest.JSON) -> Object:
        del content_type
        if method == "GET":
            return self._get(path, query or {})
        assert body is not None
        if method in ("PUT", "PATCH") and self.conflict_next:
            self.conflict_next = False
            raise rest.ApiError(409, "the object has been modified (injected)")
        result = getattr(self, f"_{method.lower()}")(path, body)
        self.writes.append((method, path))
        if self.crash_after is not None:
            self.crash_after -= 1
            if self.crash_after <= 0:
                self.crash_after = None
                raise Crashed(f"after {method} {path}")
        return copy.deepcopy(result)

    # --- the verbs ------------------------------------------------------------------------

    def _get(self, path: str, query: dict[str, str]) -> Object:
        if path in self.objects:
            return copy.deepcopy(self.objects[path])
        if path.rsplit("/", 1)[-1] in COLLECTIONS:
            wanted = dict(term.split("=", 1) for term in
                          (query.get("labelSelector") or "").split(",") if term)
            items = [copy.deepcopy(o) for p, o in sorted(self.objects.items())
                     if p.rsplit("/", 1)[0] == path and all(
                         (o["metadata"].get("labels") or {}).get(k) == v
                         for k, v in wanted.items())]
            return {"items": items}
        raise rest.ApiError(404, f"{path} not found")

    def _post(self, path: str, body: Object) -> Object:
        where = f"{path}/{body['metadata']['name']}"
        if where in self.objects:
            raise rest.ApiError(409, f"{where} already exists (AlreadyExists)")
        return self.put_object(where, body)

    def _current(self, path: str, body: Object) -> Object:
        found = self.objects.get(path)
        if found is None:
            raise rest.ApiError(404, f"{path} not found")
        version = (body.get("metadata") or {}).get("resourceVersion")
        if version is not None and version != found["metadata"]["resourceVersion"]:
            raise rest.ApiError(409, f"{path}: resourceVersion {version} is not the latest")
        return found

    def _put(self, path: str, body: Object) -> Object:
        if path.endswith("/status"):
            path = path.removesuffix("/status")
            found = self._current(path, body)
            found["status"] = copy.deepcopy(body.get("status") or {})
        else:
            found = self._current(path, body)
            keep = {k: found["metadata"][k] for k in ("uid", "generation")
                    if k in found["metadata"]}
            found = copy.deepcopy(body)
            found["metadata"].update(keep)
            self.objects[path] = found
        found["metadata"]["resourceVersion"] = str(next(self.versions))
        return found

    def _patch(self, path: str, body: Object) -> Object:
        found = self._current(path, body)
        meta = found["metadata"]
        for key in ("annotations", "labels"):
            for name, value in ((body.get("metadata") or {}).get(key) or {}).items():
                values = meta.setdefault(key, {})
                if value is None:
                    values.pop(name, None)
                else:
                    values[name] = value
        meta["resourceVersion"] = str(next(self.versions))
        return found

    def _delete(self, path: str, body: Object) -> Object:
        found = self.objects.get(path)
        if found is None:
            raise rest.ApiError(404, f"{path} not found")
        uid = (body.get("preconditions") or {}).get("uid")
        if uid is not None and uid != found["metadata"]["uid"]:
            raise rest.ApiError(409, f"{path}: uid precondition failed")
        del self.objects[path]
        return {}
