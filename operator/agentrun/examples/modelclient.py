"""The example's client of a model service (HTTP + JSON): the stand-in for a provider's API.

``POST <url>/complete`` with ``{"prompt": "..."}`` answers ``{"content": "...", "model":
"<name>", "usage": {"inputTokens": n, "outputTokens": n}}``: the content and the provider's
own report of the call's usage, which the agent hands to ``worker.usage`` (priced by the
run's price table). Where the service is, the pinned bindings say (``model: {url: ...}``);
``tests/support/actors/fakemodel.py`` is such a service, and counts the calls it answers.

Errors are raised: a call that failed used nothing the agent can report, and the step
fails (a later attempt calls again).
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from typing import Any

REQUEST_TIMEOUT_SECONDS = 30.0
MAX_ANSWER_BYTES = 64 * 1024
PATH = "/complete"


class ModelError(RuntimeError):
    """The service refused the call or answered something that is not an answer."""


@dataclass(frozen=True, kw_only=True)
class Completion:
    content: str
    model: str
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, kw_only=True)
class ModelService:
    url: str

    def complete(self, prompt: str) -> Completion:
        request = urllib.request.Request(self.url.rstrip("/") + PATH, method="POST",
                                         data=json.dumps({"prompt": prompt}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_SECONDS) as answer:
            data = answer.read(MAX_ANSWER_BYTES + 1)
        try:
            found: Any = json.loads(data)
            usage = found["usage"]
            completion = Completion(content=str(found["content"]), model=str(found["model"]),
                                    input_tokens=int(usage["inputTokens"]),
                                    output_tokens=int(usage["outputTokens"]))
        except (ValueError, KeyError, TypeError) as error:
            raise ModelError(f"the model service at {self.url} answered no completion: "
                             f"{error}") from None
        if len(data) > MAX_ANSWER_BYTES:
            raise ModelError(f"the model service's answer is over {MAX_ANSWER_BYTES} bytes")
        return completion
