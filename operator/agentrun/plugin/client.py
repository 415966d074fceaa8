"""The plugin's reads and its one write per command, through :mod:`agentrun.rest`.

Connection as kubectl makes it (:mod:`.kubeconfigs`): ``--kubeconfig`` (else $KUBECONFIG,
else ~/.kube/config), ``--context`` (else the current one), ``-n`` (else the context's
namespace, else ``default``). In a pod with no kubeconfig, the service account.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import kubernetes
import urllib3

from agentrun import rest
from agentrun.api import names
from agentrun.plugin import kubeconfigs, requests
from agentrun.plugin.requests import Failure, Object

POLL_SECONDS = 0.5  # between reads of the slot while waiting for the ledger
CONFLICT_RETRIES = 3  # re-reads when the slot changed between our read and our patch
PAGE = 500  # objects a list reads at once (kubectl's --chunk-size)
MAX_PAGES = 200  # pages a list reads at most: 100,000 objects


@dataclass(frozen=True, kw_only=True)
class Connection:
    rest: rest.Rest
    namespace: str


def connect(*, kubeconfig: str | None, context: str | None, namespace: str | None,
            timeout: rest.Timeout = rest.DEFAULT_TIMEOUT) -> Connection:
    """Load the client configuration as kubectl does (:mod:`.kubeconfigs`: a problem with
    what was typed is exit 2, with the environment's configuration exit 3)."""
    configuration = kubernetes.client.Configuration()
    default = kubeconfigs.load(kubeconfig=kubeconfig, context=context,
                               environ=os.environ, configuration=configuration)
    api = kubernetes.client.ApiClient(configuration)
    return Connection(rest=rest.Rest(api, timeout=timeout), namespace=namespace or default)


def resource_path(plural: str, namespace: str, name: str | None = None) -> str:
    return rest.namespaced(group=names.GROUP, version=names.VERSION, plural=plural,
                           namespace=namespace, name=name)


def failure(what: str, error: Exception) -> Failure:
    """The :class:`Failure` for an error answering ``what``: a refusal by admission or RBAC
    (403, 422) is a rejection (exit 1); anything else is an API error (exit 3)."""
    if isinstance(error, rest.ApiError):
        if error.status in (403, 422):
            return Failure(f"{what} was refused by the API server (admission or RBAC): "
                           f"{error.message}", code=requests.REJECTED)
        return Failure(f"{what} failed: {error}", code=requests.FAILED)
    return Failure(f"{what} failed: cannot reach the API server ({error})",
                   code=requests.FAILED)


ERRORS = (rest.ApiError, OSError, urllib3.exceptions.HTTPError, ValueError)


def _call(what: str, action: Callable[[], Object | None]) -> Object | None:
    try:
        return action()
    except ERRORS as error:
        raise failure(what, error) from None


def get(conn: Connection, plural: str, name: str) -> Object:
    """The object, or exit 2 when it does not exist (a name mistyped is bad input)."""
    found = _call(f"reading {plural}/{name}",
                  lambda: conn.rest.get(resource_path(plural, conn.namespace, name)))
    if found is None:
        if namespace_missing(conn):
            raise Failure(f"namespace {conn.namespace!r} does not exist (check -n and "
                          "--context)", code=requests.USAGE)
        raise Failure(f"{plural}/{name} not found in namespace {conn.namespace!r} "
                      "(check the name and -n)", code=requests.USAGE)
    return found


def namespace_missing(conn: Connection) -> bool:
    """Whether the namespace certainly does not exist (the API server's 404): said instead
    of "not found" for an object in it. Anything else (there, or not readable: a person
    bound to one namespace may not get it) is not a certainty, so False."""
    try:
        return conn.rest.get(f"/api/v1/namespaces/{conn.namespace}") is None
    except ERRORS:
        return False


def list_all(conn: Connection, path: str, *,
             query: dict[str, str] | None = None) -> tuple[list[Object], str | None]:
    """Every object of a collection, read in pages of :data:`PAGE` as kubectl reads them,
    and the list's resourceVersion (where a watch of it starts). A 400 (a selector the API
    server cannot parse) is bad input, exit 2."""
    items: list[Object] = []
    token, version = None, None
    for _ in range(MAX_PAGES):
        asked = {**(query or {}), "limit": str(PAGE), **({"continue": token} if token else {})}
        try:
            page = conn.rest.request("GET", path, query=asked)
        except rest.ApiError as error:
            if error.status == 400:
                raise Failure(f"the API server refused the list: {error.message}",
                              code=requests.USAGE) from None
            raise failure(f"listing {path}", error) from None
        except ERRORS as error:
            raise failure(f"listing {path}", error) from None
        items += [item for item in page.get("items") or [] if isinstance(item, dict)]
        metadata = page.get("metadata") or {}
        version = metadata.get("resourceVersion") or version
        token = metadata.get("continue")
        if not token:
            return items, version
    raise Failure(f"listing {path}: more than {MAX_PAGES * PAGE} objects; narrow it with "
                  "-l or -n", code=requests.USAGE)


def journal(conn: Connection, slot_name: str, *, limit: int,
            record: str | None = None) -> Object:
    """The slot's journal from the operator's history API (``SlotHistory``), or
    ``{"error": why}`` when it cannot be read: the rest of ``history`` is shown anyway.
    ``record``: the newest record of that key, its payload's exact bytes (``record``)."""
    path = (f"/apis/{names.HISTORY_GROUP}/{names.HISTORY_VERSION}/namespaces/"
            f"{conn.namespace}/{names.HISTORY_RESOURCE}/{slot_name}")
    try:
        query = {"limit": str(limit), **({"record": record} if record else {})}
        found = conn.rest.request("GET", path, query=query)
    except rest.ApiError as error:
        # The API server's own 404 (no APIService for the group), not the history API's
        # (which names the slot or run it did not find).
        if error.status == 404 and error.message.startswith("the server could not find"):
            why = ("the history API is not installed (the APIService "
                   f"{names.HISTORY_APISERVICE}): install the operator's chart or manifests")
        elif error.status == 403:
            why = f"you may not read it: {error.message}"
        else:
            why = f"the history API answered {error.status}: {error.message}"
        return {"error": why, "status": error.status}
    except ERRORS as error:
        return {"error": f"cannot reach the history API: {error}"}
    return found


def slots_of(conn: Connection, run: str) -> list[Object]:
    listed = _call(f"listing the slots of run {run}", lambda: conn.rest.get(
        resource_path("slots", conn.namespace),
        query={"labelSelector": f"{names.RUN_LABEL}={run}"}))
    return [item for item in (listed or {}).get("items") or [] if isinstance(item, dict)]


def leases(conn: Connection, wanted: set[str]) -> dict[str, Object]:
    """The attempt Leases named ``wanted`` that the caller may read (others are skipped)."""
    found: dict[str, Object] = {}
    for name in sorted(wanted):
        path = rest.namespaced(group="coordination.k8s.io", version="v1", plural="leases",
                               namespace=conn.namespace, name=name)
        try:
            lease = conn.rest.get(path)
        except (rest.ApiError, OSError):
            continue  # a viewer without `get leases` sees the tree without lease notes
        if lease is not None:
            found[name] = lease
    return found


def send(conn: Connection, slot_name: str, request: requests.Request) -> Object:
    """Write ``request`` with one merge patch, preconditioned on the slot as last read.

    A command of the same kind already waiting on the slot is not overwritten (exit 2): it
    would be lost undecided. A conflict (the slot changed in between) re-reads and retries.
    """
    where = resource_path("slots", conn.namespace, slot_name)
    for _ in range(CONFLICT_RETRIES):
        slot = get(conn, "slots", slot_name)
        waiting = requests.pending_id(request.kind, slot)
        if waiting is not None and waiting != request.request_id:
            raise Failure(f"slot {slot_name} already has a {request.kind} command waiting "
                          f"(request id {waiting}); wait for its outcome (history) and retry",
                          code=requests.USAGE)
        body = requests.patch(request, resource_version=(slot.get("metadata") or {}).get(
            "resourceVersion"))
        try:
            answer = conn.rest.request("PATCH", where, body=body, content_type=rest.MERGE_PATCH)
        except rest.ApiError as error:
            if error.status == 409:
                continue
            raise failure(f"writing the {request.kind} command", error) from None
        except ERRORS as error:
            raise failure(f"writing the {request.kind} command", error) from None
        return answer
    raise Failure(f"slot {slot_name} kept changing while the command was written; retry",
                  code=requests.FAILED)


def wait_entry(conn: Connection, slot_name: str, request: requests.Request, *,
               timeout: float) -> Object:
    """The ledger entry for ``request`` once the operator is done with it; exit 3 on timeout.

    Done: the entry is in the ledger and the command's annotations are gone from the slot
    (the operator removes them right after), so a command sent next (the re-send) never
    finds this one still waiting.
    """
    deadline = time.monotonic() + timeout
    while True:
        slot = get(conn, "slots", slot_name)
        found = requests.entry(slot, request.request_id)
        if found is not None and requests.pending_id(request.kind, slot) != request.request_id:
            return found
        left = deadline - time.monotonic()
        if left <= 0:
            raise Failure(f"no decision on request {request.request_id} within {timeout:g}s: "
                          "is the operator running? (the command stays on the slot; see "
                          "`history`)", code=requests.FAILED)
        time.sleep(min(POLL_SECONDS, left))


def put_value(conn: Connection, *, name: str, value: str) -> str:
    """An immutable ConfigMap ``name`` holding ``value`` (a command's value sent by
    reference), created before the command that names it; its name."""
    body = {"apiVersion": "v1", "kind": "ConfigMap", "immutable": True,
            "metadata": {"name": name, "namespace": conn.namespace},
            "data": {names.ANSWERS_FILE: value}}
    _call(f"creating ConfigMap {name} for the value (a value past its field is sent by "
          "reference: that needs create on configmaps, as the edit role has)",
          lambda: conn.rest.request(
              "POST", f"/api/v1/namespaces/{conn.namespace}/configmaps", body=body))
    return name


def delete_values(conn: Connection, names_: Sequence[str]) -> None:
    """Best effort: remove ConfigMaps :func:`put_value` wrote for a command that did not
    land or was rejected (what is left is the person's own, small, and harmless)."""
    for name in names_:
        with contextlib.suppress(*ERRORS):
            conn.rest.request("DELETE", f"/api/v1/namespaces/{conn.namespace}/configmaps/{name}")
