"""The harness's Leases: stored as the API server stores them, kept in a file.

What the SDK relies on of the API server, and so what this keeps: a ``resourceVersion``
that changes on every write, a write under a stale one refused with 409 Conflict (a PUT's
``metadata.resourceVersion``, a merge patch's when it names one: the record commits and
the journal's head advance depend on it), a create of an existing name refused with 409
AlreadyExists, a missing Lease a 404, ``null`` dropped (a merge patch's ``null`` deletes,
as RFC 7386 says), the 256 KiB bound on an object's annotations and etcd's 1.5 MiB on a
whole object (422), a malformed metadata or spec refused (400), and list by label
selector (equality, inequality and existence; set-based ones are refused, not guessed).

And of admission, the part a worker can trip over: a worker may not write a Lease after
its attempt ended (tombstoned) nor change its holder (403, as the policy refuses). The
operator's own writes (the claim, the tombstone) go through :meth:`Leases.operate`.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentrun.core.attempts import observations
from agentrun.worker._local import settings

Object = dict[str, Any]
API_VERSION = "coordination.k8s.io/v1"


class ApiFailure(Exception):
    """An answer other than success: its HTTP status, the Status ``reason`` and why."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message

    def body(self) -> Object:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.status}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: a mapping merges key by key, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def pruned(value: Any) -> Any:
    """``value`` without ``null`` fields, as the API server decodes and stores an object."""
    if isinstance(value, dict):
        return {key: pruned(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [pruned(item) for item in value]
    return value


def selector(text: str) -> Callable[[Mapping[str, str]], bool]:
    """A label selector's test; set-based requirements (``in``, ``notin``) are a 400."""
    wanted: list[tuple[str, str, str]] = []  # (operator, key, value)
    for requirement in (part.strip() for part in text.split(",")):
        if not requirement:
            continue
        if "(" in requirement or " " in requirement:
            raise ApiFailure(400, "BadRequest", f"label selector {text!r}: set-based "
                             "requirements are not served by the local harness")
        if "!=" in requirement:
            key, _, value = requirement.partition("!=")
            wanted.append(("!=", key, value))
        elif "=" in requirement:
            key, _, value = requirement.replace("==", "=").partition("=")
            wanted.append(("=", key, value))
        elif requirement.startswith("!"):
            wanted.append(("!", requirement[1:], ""))
        else:
            wanted.append(("", requirement, ""))

    def test(labels: Mapping[str, str]) -> bool:
        return all({"!=": labels.get(key) != value, "=": labels.get(key) == value,
                    "!": key not in labels, "": key in labels}[operator]
                   for operator, key, value in wanted)
    return test


def shaped(body: Object) -> Object:
    """``body``, if its ``metadata`` and ``spec`` are objects (or null) and its labels and
    annotations objects of strings, as the API server decodes a Lease (400 otherwise)."""
    metadata = body.get("metadata")
    for where, value in (("metadata", metadata), ("spec", body.get("spec"))):
        if value is not None and not isinstance(value, dict):
            raise ApiFailure(400, "BadRequest", f"{where} must be an object")
    for field in ("labels", "annotations"):
        value = (metadata or {}).get(field)
        if value is not None and not (isinstance(value, dict) and all(
                isinstance(item, str | None) for item in value.values())):
            raise ApiFailure(400, "BadRequest", f"metadata.{field} must be an object of "
                             "strings")
    return body


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Leases:
    """Every Lease, by (namespace, name), saved to ``path`` (JSON) after each write so a
    later run of the harness finds the attempts of earlier ones."""

    def __init__(self, *, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        saved = json.loads(path.read_text()) if path.is_file() else {}
        self._version: int = int(saved.get("resourceVersion", 0))
        self._items: dict[tuple[str, str], Object] = {
            (item["metadata"]["namespace"], item["metadata"]["name"]): item
            for item in saved.get("items", [])}

    def _save(self, items: dict[tuple[str, str], Object], version: int) -> None:
        """(Under the lock.) Write the file whole, then rename: never half a file; only
        once it is written are ``items`` the Leases (a disk error changes nothing)."""
        staged = self.path.with_suffix(".tmp")
        staged.write_text(json.dumps({"resourceVersion": version,
                                      "items": list(items.values())}, indent=1))
        os.replace(staged, self.path)
        self._items, self._version = items, version

    def _stored(self, namespace: str, name: str, body: Object, *,
                previous: Object | None) -> Object:
        """(Under the lock.) Check ``body`` as the API server would, store it with a new
        resourceVersion (the metadata the server owns kept), save; a copy of it."""
        body = pruned(shaped(body))
        metadata = body.setdefault("metadata", {})
        if metadata.get("name", name) != name or metadata.get("namespace",
                                                               namespace) != namespace:
            raise ApiFailure(400, "BadRequest", "the body's name or namespace is not the "
                             "request's")
        annotations = metadata.get("annotations") or {}
        size = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
        if size > settings.MAX_ANNOTATION_BYTES:
            raise ApiFailure(422, "Invalid", f"metadata.annotations: Too long: must have at "
                             f"most {settings.MAX_ANNOTATION_BYTES} bytes (has {size})")
        version = self._version + 1
        kept = (previous or {}).get("metadata") or {}
        metadata.update(name=name, namespace=namespace, resourceVersion=str(version),
                        uid=kept.get("uid") or str(uuid.uuid4()),
                        creationTimestamp=kept.get("creationTimestamp") or _now())
        body.update(apiVersion=API_VERSION, kind="Lease")
        size = len(json.dumps(body).encode())
        if size > settings.MAX_LEASE_OBJECT_BYTES:
            raise ApiFailure(422, "Invalid", f"the Lease is {size} bytes, over the "
                             f"{settings.MAX_LEASE_OBJECT_BYTES} etcd stores in one object")
        self._save({**self._items, (namespace, name): body}, version)
        return copy.deepcopy(body)

    def get(self, namespace: str, name: str) -> Object:
        with self._lock:
            return copy.deepcopy(self._existing(namespace, name))

    def _existing(self, namespace: str, name: str) -> Object:
        found = self._items.get((namespace, name))
        if found is None:
            raise ApiFailure(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
        return found

    def list(self, namespace: str, *, labels: str = "") -> Object:
        test = selector(labels)
        with self._lock:
            items = [copy.deepcopy(item) for (space, _), item in sorted(self._items.items())
                     if space == namespace and test(item["metadata"].get("labels") or {})]
            version = str(self._version)
        return {"apiVersion": API_VERSION, "kind": "LeaseList",
                "metadata": {"resourceVersion": version}, "items": items}

    def create(self, namespace: str, body: Object) -> Object:
        body = shaped(body)
        name = str((body.get("metadata") or {}).get("name") or "")
        with self._lock:
            if (namespace, name) in self._items:
                raise ApiFailure(409, "AlreadyExists",
                                 f'leases.coordination.k8s.io "{name}" already exists')
            if not name:
                raise ApiFailure(422, "Invalid", "metadata.name: Required value")
            body = copy.deepcopy(body)
            body.setdefault("metadata", {}).pop("resourceVersion", None)
            return self._stored(namespace, name, body, previous=None)

    def replace(self, namespace: str, name: str, body: Object) -> Object:
        """A worker's PUT: conditional on the resourceVersion it names, if any."""
        body = shaped(body)
        with self._lock:
            current = self._existing(namespace, name)
            self._conditional(current, (body.get("metadata") or {}).get("resourceVersion"))
            self._admit(current, body)
            return self._stored(namespace, name, copy.deepcopy(body), previous=current)

    def patch(self, namespace: str, name: str, patch: Object) -> Object:
        """A worker's merge patch: conditional when it names a resourceVersion."""
        patch = shaped(patch)
        with self._lock:
            current = self._existing(namespace, name)
            self._conditional(current, (patch.get("metadata") or {}).get("resourceVersion"))
            body = merge_patch(copy.deepcopy(current), patch)
            self._admit(current, body)
            return self._stored(namespace, name, body, previous=current)

    def operate(self, namespace: str, name: str, change: Callable[[Object], Object]) -> Object:
        """The operator's own write (no admission checks): ``change`` of the Lease as it is."""
        with self._lock:
            current = self._existing(namespace, name)
            return self._stored(namespace, name, change(copy.deepcopy(current)),
                                previous=current)

    @staticmethod
    def _conditional(current: Object, version: Any) -> None:
        if version is not None and str(version) != current["metadata"]["resourceVersion"]:
            raise ApiFailure(409, "Conflict", "Operation cannot be fulfilled on "
                             f'leases.coordination.k8s.io "{current["metadata"]["name"]}": '
                             "the object has been modified; please apply your changes to "
                             "the latest version and try again")

    @staticmethod
    def _admit(current: Object, body: Object) -> None:
        """The admission policy's refusals a worker can meet (see the module)."""
        before = observations.lease_view(current)
        if before.tombstoned:
            raise ApiFailure(403, "Forbidden", "admission: the attempt of this Lease has "
                             "ended (tombstoned): its worker may not write it")
        if (body.get("spec") or {}).get("holderIdentity") != before.holder:
            raise ApiFailure(403, "Forbidden", "admission: a worker may not change its "
                             "Lease's holderIdentity")
