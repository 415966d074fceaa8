"""The example's client of its effect's owner: the publishing service (HTTP + JSON).

It speaks the effect protocol of the owner's kit (:mod:`agentrun.owner`,
docs/effect-owners.md), so the owner can be any service behind the kit
(``EffectMiddleware``, or ``Owner`` in a handler of its own): ``POST <url>/effects`` with
the payload as the JSON body and the headers of :class:`agentrun.owner.Effect`
(``Idempotency-Key``, ``Agentrun-Fencing-Token``, ``Agentrun-Fencing-Scope``) applies the
effect once per idempotency key and refuses (409 ``StaleFencingToken``) a fencing token
lower than the highest the owner has seen within the scope; its 2xx reply's JSON is the
result. ``GET <url>/effects`` with ``Idempotency-Key`` and ``Agentrun-Query: status`` (a
status query) answers a reconcile. The scope (``fence``) is ``<run uid>/<slot>``, where
the slot's attempt numbers (the tokens) grow. ``tests/support/actors/effectowner.py`` is
such an owner.

Errors are raised, never turned into an answer: an owner that cannot be reached, or that
refuses the request (fenced, the key being applied already, its outcome unknown), has not
said "unknown" (that would stop retries until a person resolves the effect); the attempt
fails and a later one asks again.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from agentrun.owner import Effect
from agentrun.worker import Answer, Reconciled

REQUEST_TIMEOUT_SECONDS = 10.0
# A POST waits while the owner applies (an owner may take long); bounded all the same.
CALL_TIMEOUT_SECONDS = 150.0
MAX_ANSWER_BYTES = 64 * 1024
PATH = "/effects"


class PublishError(RuntimeError):
    """The owner refused the request or gave an answer that is not one (message: which)."""


@dataclass(frozen=True, kw_only=True)
class Publisher:
    """Calls and reconciles one effect at the owner at ``url`` for ``fence`` (the fencing
    scope, ``<run uid>/<slot>``)."""

    url: str
    fence: str

    @property
    def endpoint(self) -> str:
        """Where effects and status queries go."""
        return self.url.rstrip("/") + PATH

    def _request(self, method: str, *, headers: dict[str, str], body: Any = None,
                 timeout: float) -> tuple[int, Any]:
        """One exchange: the status and the reply's JSON (None for an empty body)."""
        data = None if method == "GET" else json.dumps(body).encode()
        typed = {} if data is None else {"Content-Type": "application/json"}
        request = urllib.request.Request(self.endpoint, data=data, method=method,
                                         headers={**headers, **typed})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status, raw = response.status, response.read(MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read(MAX_ANSWER_BYTES + 1)
        if not raw.strip():
            return status, None
        try:
            if len(raw) <= MAX_ANSWER_BYTES:
                return status, json.loads(raw)
        except (ValueError, RecursionError):
            pass
        raise PublishError(f"{method} {self.endpoint}: answered {status} with no JSON "
                           f"(at most {MAX_ANSWER_BYTES} bytes)")

    def call(self, idempotency_key: str, fencing_token: int, payload: Any, *,
             digest: str | None = None) -> Any:
        """Send the effect; the owner's result (its 2xx reply's JSON, the first reply's
        again on a re-send) once it is applied. ``digest``: the approved payload's sha256
        (hex), sent for the owner to check the body against."""
        effect = Effect(key=idempotency_key, token=fencing_token, scope=self.fence,
                        digest=digest)
        status, answer = self._request("POST", headers=effect.headers(), body=payload,
                                       timeout=CALL_TIMEOUT_SECONDS)
        if 200 <= status < 300:
            return answer
        error = answer.get("error") if isinstance(answer, dict) else None
        if status == 409 and error == "StaleFencingToken":
            raise PublishError(f"the owner fenced this attempt off (token {fencing_token}, "
                               f"highest seen {answer.get('highest')}): a later attempt "
                               "has spoken to it")
        if status == 409 and error == "EffectInProgress":
            raise PublishError("the owner is applying this key already (EffectInProgress): "
                               "an earlier attempt's request; a later attempt asks it "
                               "how that ended")
        if status == 409 and error == "EffectOutcomeUnknown":
            raise PublishError("the owner does not know whether this key was applied "
                               "(EffectOutcomeUnknown: it restarted while applying it) and "
                               "will not apply it again: a person resolves the effect")
        raise PublishError(f"the owner answered {status}: {str(answer)[:200]}")

    def reconcile(self, idempotency_key: str) -> Reconciled:
        """The owner's answer about ``idempotency_key`` (a status query)."""
        status, answer = self._request(
            "GET", headers=Effect(key=idempotency_key, query=True).headers(),
            timeout=REQUEST_TIMEOUT_SECONDS)
        try:
            said = Answer(str(answer.get("answer"))) if isinstance(answer, dict) else None
        except ValueError:
            said = None
        if status != 200 or said is None:
            raise PublishError(f"the owner's reconcile answer ({status}) is not one of "
                               f"{', '.join(a.value for a in Answer)}: "
                               f"{str(answer)[:200]}")
        return Reconciled(answer=said, result=answer.get("result"))
