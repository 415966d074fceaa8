"""The example's client of its effect's owner: the publishing service (HTTP + JSON).

The owner is what the SDK's effect ledger expects of one (:meth:`agentrun.worker.Worker.effect`):
``POST <url>/effects`` with ``{"key", "token", "fence", "payload"}`` applies the effect
once per idempotency ``key`` and rejects (409) a fencing ``token`` lower than the highest
it has seen within ``fence``; ``GET <url>/effects/<key>`` answers a reconcile. The
*fence* here is ``<run uid>/<slot>``: the scope in which the slot's attempt numbers (the
tokens) grow. ``tests/support/actors/effectowner.py`` is such an owner.

Errors are raised, never turned into an answer: an owner that cannot be reached has not
said "unknown" (that would stop retries until a person resolves the effect); the
attempt fails and a later one asks again.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from agentrun.worker import Answer, Reconciled

REQUEST_TIMEOUT_SECONDS = 10.0
# A POST waits while the owner applies (an owner may take long); bounded all the same.
CALL_TIMEOUT_SECONDS = 150.0
MAX_ANSWER_BYTES = 64 * 1024


class PublishError(RuntimeError):
    """The owner refused the request or gave an answer that is not one (message: which)."""


@dataclass(frozen=True, kw_only=True)
class Publisher:
    """Calls and reconciles one effect at the owner at ``url`` for ``fence``."""

    url: str
    fence: str

    def _request(self, method: str, path: str, *, body: Any = None,
                 timeout: float) -> tuple[int, dict[str, Any]]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url.rstrip("/") + path, data=data,
                                         method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status, raw = response.status, response.read(MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read(MAX_ANSWER_BYTES + 1)
        try:
            answer = json.loads(raw) if len(raw) <= MAX_ANSWER_BYTES else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise PublishError(f"{method} {self.url}{path}: answered {status} with no JSON "
                               f"object (at most {MAX_ANSWER_BYTES} bytes)")
        return status, answer

    def call(self, idempotency_key: str, fencing_token: int, payload: Any) -> Any:
        """Send the effect; the owner's result once it is applied."""
        status, answer = self._request(
            "POST", "/effects", timeout=CALL_TIMEOUT_SECONDS,
            body={"key": idempotency_key, "token": fencing_token, "fence": self.fence,
                  "payload": payload})
        if status == 200 and "result" in answer:
            return answer["result"]
        if status == 409:
            raise PublishError(f"the owner fenced this attempt off (token {fencing_token}, "
                               f"highest seen {answer.get('highest')}): a later attempt "
                               "has spoken to it")
        raise PublishError(f"the owner answered {status}: {str(answer)[:200]}")

    def reconcile(self, idempotency_key: str) -> Reconciled:
        """The owner's answer about ``idempotency_key``."""
        status, answer = self._request("GET", "/effects/" + quote(idempotency_key, safe=""),
                                       timeout=REQUEST_TIMEOUT_SECONDS)
        try:
            said = Answer(str(answer.get("answer")))
        except ValueError:
            said = None
        if status != 200 or said is None:
            raise PublishError(f"the owner's reconcile answer ({status}) is not one of "
                               f"{', '.join(a.value for a in Answer)}: "
                               f"{str(answer)[:200]}")
        return Reconciled(answer=said, result=answer.get("result"))
