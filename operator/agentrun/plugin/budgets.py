"""``kubectl agentrun budget``: raise a run's budget (a command sent to the run).

Written as the run's annotations (``core.runs.runcommands``: the same words the operator
reads and admission checks), with one merge patch preconditioned on the run as read; the
plugin checks the amounts and the reason as the operator will before writing anything
(exit 2), then waits for the run's ledger entry and prints it (exit 0 accepted, 1
rejected: the operator's words; 3 timeout or API error). A budget command already waiting
on the run is never overwritten.
"""

from __future__ import annotations

import re
import time

from agentrun import rest
from agentrun.api import bounds, modelusage
from agentrun.core.commands.spec import BUDGET
from agentrun.core.runs import runcommands
from agentrun.plugin import client, requests
from agentrun.plugin.requests import Object

ADD, ADD_COST, REASON = runcommands.ADD, runcommands.ADD_COST, runcommands.REASON


def check(*, add: str | None, add_cost: str | None, reason: str) -> None:
    """The raise as the operator parses it (:class:`requests.BadInput` says what is wrong)."""
    if add is None and add_cost is None:
        raise requests.BadInput("give --add TOKENS, --add-cost AMOUNT, or both")
    if add is not None and not (len(add) <= runcommands.ADD_CHARS and re.fullmatch(
            runcommands.TOKENS_PATTERN, add)):
        raise requests.BadInput(f"--add is a whole number of tokens, 1 to "
                                f"{modelusage.MAX_TOKENS - 1}, not {add[:40]!r}")
    if add_cost is not None and not (len(add_cost) <= runcommands.ADD_CHARS and re.fullmatch(
            runcommands.COST_PATTERN, add_cost) and modelusage.micros(add_cost) > 0):
        raise requests.BadInput(f"--add-cost is a positive decimal amount of the run's "
                                f"currency (at most 6 places), not {add_cost[:40]!r}")
    if not reason.strip() or len(reason.encode()) > bounds.REASON_BYTES:
        raise requests.BadInput(f"--reason is required: why, non-blank, at most "
                                f"{bounds.REASON_BYTES} bytes")


def send(conn: client.Connection, run_name: str, *, add: str | None, add_cost: str | None,
         reason: str, timeout: float) -> Object:
    """Write the raise and wait for the run's ledger entry (see the module docstring)."""
    check(add=add, add_cost=add_cost, reason=reason)
    request_id = requests.new_request_id()
    fields = {ADD: add, ADD_COST: add_cost, REASON: reason}
    path = client.resource_path("agentruns", conn.namespace, run_name)
    for _ in range(client.CONFLICT_RETRIES):
        run = client.get(conn, "agentruns", run_name)
        metadata = run.get("metadata") or {}
        waiting = (metadata.get("annotations") or {}).get(BUDGET.id)
        if waiting is not None:
            raise requests.Failure(f"run {run_name} already has a budget command waiting "
                                   f"(request id {waiting}); wait for its outcome and retry",
                                   code=requests.USAGE)
        body = {"metadata": {"resourceVersion": metadata.get("resourceVersion"),
                             "annotations": {BUDGET.id: request_id, **{
                                 k: v for k, v in fields.items() if v is not None}}}}
        try:
            conn.rest.request("PATCH", path, body=body, content_type=rest.MERGE_PATCH)
        except rest.ApiError as error:
            if error.status == 409:
                continue
            raise client.failure("writing the Budget command", error) from None
        except client.ERRORS as error:
            raise client.failure("writing the Budget command", error) from None
        return wait(conn, run_name, request_id, timeout=timeout)
    raise requests.Failure(f"run {run_name} kept changing while the command was written; retry",
                           code=requests.FAILED)


def wait(conn: client.Connection, run_name: str, request_id: str, *, timeout: float) -> Object:
    """The run's ledger entry for ``request_id`` once the operator removed the command."""
    deadline = time.monotonic() + timeout
    while True:
        run = client.get(conn, "agentruns", run_name)
        found = requests.entry(run, request_id)
        pending = ((run.get("metadata") or {}).get("annotations") or {}).get(BUDGET.id)
        if found is not None and pending != request_id:
            return dict(found)
        left = deadline - time.monotonic()
        if left <= 0:
            raise requests.Failure(f"no decision on request {request_id} within {timeout:g}s: "
                                   "is the operator running? (the command stays on the run)",
                                   code=requests.FAILED)
        time.sleep(min(client.POLL_SECONDS, left))
