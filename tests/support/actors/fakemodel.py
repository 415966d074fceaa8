"""A fake model service for tests: what the example agent's model client calls
(``agentrun.examples.modelclient``), counting every call it answers.

HTTP on ``host`` (the node bridge's address, so pods reach it, or 127.0.0.1), at
``/complete`` only: a POST with ``{"prompt": "..."}`` is answered ``{"content": "...",
"model": <model>, "usage": {"inputTokens": <input>, "outputTokens": <output>}}``, the
same usage for every call (so a test knows the tokens each call costs). :attr:`prompts`
lists every prompt answered, in order: how a test counts the calls made, at the model.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

PATH: Final = "/complete"
MAX_BODY_BYTES: Final = 64 * 1024


@dataclass
class FakeModel:
    host: str = "127.0.0.1"
    model: str = "fake-large"
    input_tokens: int = 100
    output_tokens: int = 20
    prompts: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        return f"http://{self.host}:{self._server.server_address[1]}"

    def calls(self) -> int:
        with self._lock:
            return len(self.prompts)

    def start(self) -> FakeModel:
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if self.path != PATH or not 0 < length <= MAX_BODY_BYTES:
                    self._answer(404 if self.path != PATH else 400, {"error": "no"})
                    return
                try:
                    prompt = str(json.loads(self.rfile.read(length))["prompt"])
                except (ValueError, KeyError, TypeError):
                    self._answer(400, {"error": "a JSON body with a prompt"})
                    return
                with model._lock:
                    model.prompts.append(prompt)
                    number = len(model.prompts)
                self._answer(200, {"content": f"answer {number} to: {prompt[:80]}",
                                   "model": model.model,
                                   "usage": {"inputTokens": model.input_tokens,
                                             "outputTokens": model.output_tokens}})

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True,
                         name="fake-model").start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
