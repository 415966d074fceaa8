"""The writer: every write the operator makes, each with its precondition.

The steps the core decides are mapped to these calls in one place, the applier
(``agentrun.controller.applier``); the writes themselves:

- status: PUT to the status subresource carrying ``metadata.resourceVersion`` (the server
  takes only ``status`` from it, and answers 409 if the object changed since it was read);
- command removal: a merge patch carrying ``metadata.resourceVersion``;
- creation: "must not exist" is create's own precondition; on AlreadyExists the caller
  decides from the object found whether it is its own (deterministic names);
- pod deletion: with a uid precondition, so a later pod of the same name is safe;
- lease tombstone, and a claim's Lease re-annotated: PUT with the resourceVersion read.

A :class:`Conflict` means "re-read and decide again"; :class:`Rejected` is the API server
refusing the object itself (403, 422, 400), which a claim records as ClaimFailed.

*Write-through*: with :class:`stores.Stores`, every successful answer (the object as the
server stored it) goes into the stores before the writer returns, and so does the object
found on AlreadyExists, so the next read of the same step never sees a state older than
this process's own last write (the stores drop an older state, should the watch deliver
one late); after a conflict (409, or 404) the object is read (one quorum GET) into the
stores, so the step that reads again does not read the state that lost. A DELETE
removes the object when the answer says it is gone; a pod answered with a grace period
is still there (it may still run) and is kept as answered.
"""

from __future__ import annotations

from typing import Any

from agentrun import rest
from agentrun.api import names
from agentrun.api.slots import Slot, SlotStatus
from agentrun.kube import crashpoints, stores

Object = dict[str, Any]


class Conflict(Exception):
    """The object changed (409) or vanished (404) since it was read: decide again."""


class Exists(Exception):
    """AlreadyExists on create; ``found`` is the object under that name (None if gone)."""

    def __init__(self, found: Object | None) -> None:
        super().__init__("already exists")
        self.found = found


class Rejected(Exception):
    """The API server refused the object (forbidden, invalid): a person must act."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def path(kind: str, namespace: str, name: str | None = None,
         subresource: str | None = None) -> str:
    return stores.path(kind, namespace, name, subresource)


def gone(answer: Object) -> bool:
    """Does a DELETE's answer say the object no longer exists (a Status, or deleted at
    once: no grace period left and no finalizer holding it)?"""
    meta = answer.get("metadata") or {}
    return answer.get("kind") == "Status" or (
        meta.get("deletionGracePeriodSeconds") == 0 and not meta.get("finalizers"))


def translated(error: rest.ApiError) -> Exception:
    if error.status in (404, 409):
        return Conflict(error.message)
    if error.status in (400, 403, 422):
        return Rejected(error.status, error.message)
    return error


class Writer:
    def __init__(self, client: rest.Rest, *, stores: stores.Stores | None = None) -> None:
        self.rest = client
        self.stores = stores

    def _write(self, method: str, where: str, body: Object, *, point: str,
               content_type: str = rest.JSON, kind: str | None = None,
               target: tuple[str, str] | None = None) -> Object:
        """One write; ``kind`` writes its answer through, ``target`` (namespace, name) is
        refreshed after a conflict."""
        try:
            result = self.rest.request(method, where, body=body, content_type=content_type)
        except rest.ApiError as error:
            if kind is not None and target is not None and error.status in (404, 409):
                self._refresh(kind, *target)
            raise translated(error) from error
        if kind is not None:
            self._through(kind, result)
        crashpoints.reached(point)
        return result

    def _refresh(self, kind: str, namespace: str, name: str) -> None:
        """After a conflict, read the object (a quorum GET) into the stores: the caller reads
        again and decides again, and must not read the state that just lost (another
        writer's change may not have come through the watch yet). One GET per conflict."""
        if self.stores is None:
            return
        found = self.rest.get(path(kind, namespace, name))
        if found is None:
            self._gone(kind, namespace, name)
        else:
            self._through(kind, found)

    def _through(self, kind: str, answer: Object) -> None:
        if self.stores is not None:
            self.stores.observe(kind=kind, event_type="MODIFIED", body={"kind": kind, **answer})

    def _gone(self, kind: str, namespace: str, name: str) -> None:
        if self.stores is not None:
            self.stores.observe(kind=kind, event_type="DELETED",
                                body={"metadata": {"namespace": namespace, "name": name}})

    def slot_status(self, slot: Slot, status: SlotStatus, *, point: str) -> Object:
        """Replace the slot's status, preconditioned on the resourceVersion read."""
        return self.custom_status({
            "apiVersion": names.API_VERSION, "kind": "Slot",
            "metadata": {"name": slot.metadata.name, "namespace": slot.metadata.namespace,
                         "resourceVersion": slot.metadata.resource_version},
            "status": status.wire()}, point=point)

    def custom_status(self, body: Object, *, point: str) -> Object:
        """Replace a custom object's status; ``body.metadata.resourceVersion`` is the guard."""
        meta = body["metadata"]
        return self._write("PUT", path(body["kind"], meta["namespace"], meta["name"], "status"),
                           body, point=point, kind=body["kind"],
                           target=(meta["namespace"], meta["name"]))

    def remove_annotations(self, *, kind: str, namespace: str, name: str,
                           resource_version: str | None, keys: tuple[str, ...],
                           point: str, labels: dict[str, str] | None = None) -> None:
        """Remove annotations ``keys`` (and set ``labels``) in one preconditioned patch."""
        metadata: dict[str, Any] = {"resourceVersion": resource_version,
                                    "annotations": dict.fromkeys(keys)}
        if labels:
            metadata["labels"] = labels
        patch = {"metadata": metadata}
        self._write("PATCH", path(kind, namespace, name), patch, point=point,
                    content_type=rest.MERGE_PATCH, kind=kind, target=(namespace, name))

    def set_finalizers(self, *, kind: str, namespace: str, name: str,
                       resource_version: str | None, finalizers: tuple[str, ...],
                       point: str) -> None:
        """Replace ``metadata.finalizers`` in one patch preconditioned on the version read
        (a merge patch replaces the list whole: another writer's change meanwhile is a 409,
        never lost)."""
        patch = {"metadata": {"resourceVersion": resource_version,
                              "finalizers": list(finalizers) or None}}
        self._write("PATCH", path(kind, namespace, name), patch, point=point,
                    content_type=rest.MERGE_PATCH, kind=kind, target=(namespace, name))

    def create(self, body: Object, *, point: str) -> Object:
        """Create ``body``; raises :class:`Exists` with the object found under its name."""
        meta, kind = body["metadata"], body["kind"]
        try:
            return self._write("POST", path(kind, meta["namespace"]), body, point=point,
                               kind=kind)
        except Conflict:
            found = self.rest.get(path(kind, meta["namespace"], meta["name"]))
            if found is not None:
                self._through(kind, found)
            raise Exists(found) from None

    def delete_pod(self, *, namespace: str, name: str, uid: str | None, point: str) -> None:
        """Delete a pod (fencing its attempt); already gone counts as done."""
        options: Object = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            options["preconditions"] = {"uid": uid}
        try:
            answer = self.rest.request("DELETE", path("Pod", namespace, name), body=options)
        except rest.ApiError as error:
            failure = translated(error)
            if not isinstance(failure, Conflict):
                raise failure from error
            found = self.rest.get(path("Pod", namespace, name))
            if found is not None:  # another pod of that name (the uid precondition)
                self._through("Pod", found)
                raise failure from error
            self._gone("Pod", namespace, name)  # already gone counts as done
        else:
            if gone(answer):
                self._gone("Pod", namespace, name)
            else:
                self._through("Pod", answer)  # terminating: it may still run
        crashpoints.reached(point)

    def tombstone(self, *, lease: Object, annotations: dict[str, str], point: str) -> None:
        """Clear the holder and record the end; the lease stays as the attempt's record."""
        meta = lease["metadata"]
        body = {**lease,
                "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}),
                                                     **annotations}},
                "spec": {**(lease.get("spec") or {}), "holderIdentity": None}}
        self._write("PUT", path("Lease", meta["namespace"], meta["name"]), body, point=point,
                    kind="Lease", target=(meta["namespace"], meta["name"]))

    def annotate_lease(self, *, lease: Object, annotations: dict[str, str],
                       point: str) -> None:
        """Set ``annotations`` on the lease as read (its holder kept), under its version."""
        meta = lease["metadata"]
        body = {**lease, "metadata": {**meta, "annotations": {
            **(meta.get("annotations") or {}), **annotations}}}
        self._write("PUT", path("Lease", meta["namespace"], meta["name"]), body, point=point,
                    kind="Lease", target=(meta["namespace"], meta["name"]))

    def stamping_secret(self, body: Object) -> None:
        """Create the stamping epoch Secret, or replace it under the resourceVersion read
        (``body.metadata.resourceVersion``; two operators minting at once: one wins)."""
        meta = body["metadata"]
        where = rest.namespaced(group="", version="v1", plural="secrets",
                                namespace=meta["namespace"])
        if meta.get("resourceVersion") is None:
            self._write("POST", where, body, point="stamping-epoch")
        else:
            self._write("PUT", f"{where}/{meta['name']}", body, point="stamping-epoch")
