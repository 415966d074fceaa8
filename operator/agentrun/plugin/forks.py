"""``kubectl agentrun fork``: create a run that starts from another's journal.

Not a command on a slot (those are annotations the operator decides on, from the
registry): a fork is a new AgentRun, created by the person with their own credentials,
so RBAC (``create`` on agentruns) and admission's creator stamp decide who may, and the
new run's ``spec.fork`` says from what (``core.runs.runforks``). The plugin copies the
source's spec (its configuration names; the operator pins the source's snapshots by
digest, whatever these say), names the source's uid so a run recreated under its name is
not taken for it, then waits for the operator's ``Forked`` condition and prints it.

Exit codes as for the other commands: 0 forked (the journal copied), 1 refused (the name
taken, admission, RBAC, or the operator's Forked/Pinned False: it says why), 2 bad input
(no such source run), 3 timeout or API error.
"""

from __future__ import annotations

import time
from typing import Any

from agentrun import rest
from agentrun.api import names
from agentrun.core.runs import runforks
from agentrun.plugin import client, requests
from agentrun.plugin.requests import Object

COPIED_SPEC = ("tenant", "package", "workflow", "bindings", "claimPolicy", "retry", "budget",
               "activeDeadlineSeconds", "maxActive")


def body(source: Object, *, name: str, at: str | None, reason: str) -> Object:
    """The new run: the source's spec (not ``suspend``: a fork starts) and ``spec.fork``."""
    metadata = source.get("metadata") or {}
    spec = {key: value for key, value in (source.get("spec") or {}).items()
            if key in COPIED_SPEC}
    fork: dict[str, Any] = {"run": metadata.get("name"), "uid": metadata.get("uid"),
                            "reason": reason}
    if at is not None:
        fork["at"] = at
    return {"apiVersion": names.API_VERSION, "kind": "AgentRun",
            "metadata": {"name": name, "namespace": metadata.get("namespace")},
            "spec": {**spec, "fork": fork}}


def _verdict(run: Object) -> tuple[int, str] | None:
    """(exit code, the condition's words) once the operator said how the fork went; None
    while it copies (``ForkCopying``: a copy longer than one look goes on)."""
    conditions = {c.get("type"): c for c in (run.get("status") or {}).get("conditions") or []}
    forked, pinned = conditions.get("Forked"), conditions.get("Pinned")
    if forked is not None and forked.get("status") == "True":
        return requests.ACCEPTED, str(forked.get("message") or "")
    for found in (forked, pinned):
        if found is not None and found.get("status") == "False" and (
                found.get("reason") != runforks.COPYING):
            said = f"{found.get('reason')}: {found.get('message')}"
            return requests.REJECTED, said + (
                "" if found.get("reason") in runforks.FINAL else
                " (the run stays and tries again every 15 s; delete it to give up)")
    return None


def fork(conn: client.Connection, *, source_name: str, name: str, at: str | None,
         reason: str, timeout: float) -> tuple[int, str]:
    """Create the fork and wait for the operator's word: (exit code, what it said). A
    refusal the operator may lift (a source slot still running) leaves the run, which
    tries again by itself: the message says so."""
    source = client.get(conn, "agentruns", source_name)
    made = body(source, name=name, at=at, reason=reason)
    path = rest.namespaced(group=names.GROUP, version=names.VERSION, plural="agentruns",
                           namespace=conn.namespace)
    try:
        conn.rest.request("POST", path, body=made)
    except rest.ApiError as error:
        if error.status == 409:
            raise requests.Failure(f"run {name} already exists in namespace {conn.namespace}: "
                                   "choose another --name", code=requests.REJECTED) from None
        raise client.failure(f"creating run {name}", error) from None
    except client.ERRORS as error:
        raise client.failure(f"creating run {name}", error) from None
    deadline = time.monotonic() + timeout
    while True:
        run = client.get(conn, "agentruns", name)
        found = _verdict(run)
        if found is not None:
            return found
        if time.monotonic() >= deadline:
            raise requests.Failure(f"run {name} was created, and the operator has not copied "
                                   f"its journal within {timeout:g}s: is it running? (see "
                                   f"kubectl describe agentrun {name})", code=requests.FAILED)
        time.sleep(min(client.POLL_SECONDS, max(deadline - time.monotonic(), 0)))
