"""``agentrun-owner-check URL``: does the service at URL keep the effect protocol?

It sends, to ``URL`` (``--method``, POST by default, with a JSON body), requests with
reserved test keys: the scope is ``agentrun-owner-check/<random nonce>`` (an owner may
tell test traffic by that prefix, and must treat it like any other), each key the sha256
of ``agentrun-owner-check/<nonce>/<n>``, each body ``{"agentrunOwnerCheck": <n>, ...}``.
The checks, in order, each sent on its own keys:

1. ``applies``: key K1, token 1 → a 2xx reply;
2. ``deduplicates``: K11, token 1, then K11 again with another body → the first reply
   again (status and body), marked ``Agentrun-Replayed: true``;
3. ``answers-applied``: a status query of K1 → ``{"answer": "applied"}``;
4. ``answers-not-applied``: a status query of K2, never sent → ``"not-applied"``;
5. ``fences``: K3 with token 2 → 2xx; then K4 with token 1 → 409; then a status query of
   K4 → ``"not-applied"`` (nothing applied for the stale attempt);
6. ``checks-approval``: K5, token 2, an ``Agentrun-Approval-Digest`` of another body → 422,
   and a status query of K5 → ``"not-applied"``; then K5 with the approved body (sent with
   spaces: the digest is of its canonical JSON, not of its bytes) → 2xx.

Each prints ``ok`` or ``FAIL`` with what was expected and what came. Exit 0: all passed;
1: a check failed; 2: the service could not be reached or did not speak HTTP, or the
arguments are wrong. Nothing is retried and no redirect is followed: each request is one
exchange.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import secrets
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Final

from agentrun.owner._protocol import REPLAYED, Effect, canonical

TIMEOUT_SECONDS: Final = 30.0


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is answered as it came (a 3xx fails its check), never followed."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER: Final = urllib.request.build_opener(_NoRedirects)
MAX_REPLY_BYTES: Final = 1 << 20


class Unreachable(Exception):
    """The service did not answer at all."""


@dataclass(frozen=True)
class Answer:
    """What the service answered: status, body (at most 1 MiB), headers by lower name."""

    status: int
    body: bytes
    headers: dict[str, str]

    def json(self) -> Any:
        """The body as JSON, None if it is not (or nests deeper than the parser goes)."""
        try:
            return json.loads(self.body)
        except (ValueError, RecursionError):
            return None


@dataclass(kw_only=True)
class Checker:
    """The requests of the checks, on reserved keys of one random scope."""

    url: str
    method: str = "POST"
    nonce: str = ""

    def __post_init__(self) -> None:
        """A random nonce unless one is given (a test that sends the same keys twice)."""
        self.nonce = self.nonce or secrets.token_hex(8)

    @property
    def scope(self) -> str:
        """The reserved scope of this run's requests."""
        return f"agentrun-owner-check/{self.nonce}"

    def key(self, n: int) -> str:
        """Reserved key ``n``: the sha256 of ``<scope>/<n>``."""
        return hashlib.sha256(f"{self.scope}/{n}".encode()).hexdigest()

    def send(self, effect: Effect, body: Any = None, *, spaced: bool = False) -> Answer:
        """One exchange (``spaced``: the body's JSON not in canonical form)."""
        data = None if effect.query else (
            json.dumps(body, indent=1).encode() if spaced else canonical(body))
        request = urllib.request.Request(
            self.url, data=data, method="GET" if effect.query else self.method,
            headers={**effect.headers(), "Content-Type": "application/json"})
        try:
            with _OPENER.open(request, timeout=TIMEOUT_SECONDS) as reply:
                return Answer(reply.status, reply.read(MAX_REPLY_BYTES),
                              {k.lower(): v for k, v in reply.headers.items()})
        except urllib.error.HTTPError as error:
            return Answer(error.code, error.read(MAX_REPLY_BYTES),
                          {k.lower(): v for k, v in error.headers.items()})
        except (urllib.error.URLError, OSError, http.client.HTTPException,
                ValueError) as error:
            raise Unreachable(f"{self.url}: {error}") from None

    def effect(self, n: int, *, token: int, digest: str | None = None) -> Effect:
        """Key ``n``'s effect fields with ``token`` in this run's scope."""
        return Effect(key=self.key(n), token=token, scope=self.scope, digest=digest)

    def answer_of(self, n: int) -> Any:
        """What a status query of key ``n`` answers (its ``answer`` field)."""
        found = self.send(Effect(key=self.key(n), query=True)).json()
        return found.get("answer") if isinstance(found, dict) else found

    def body(self, n: int, **more: Any) -> dict[str, Any]:
        """Key ``n``'s request body."""
        return {"agentrunOwnerCheck": n, **more}


def _applies(c: Checker) -> str | None:
    got = c.send(c.effect(1, token=1), c.body(1))
    return None if 200 <= got.status < 300 else f"expected a 2xx reply, got {got.status}"


def _deduplicates(c: Checker) -> str | None:
    first = c.send(c.effect(11, token=1), c.body(11))
    again = c.send(c.effect(11, token=1), c.body(11, phrased="otherwise"))
    if (again.status, again.body) != (first.status, first.body):
        return (f"expected the first reply again ({first.status}, {first.body[:80]!r}), got "
                f"({again.status}, {again.body[:80]!r})")
    if again.headers.get(REPLAYED.lower()) != "true":
        return f"expected {REPLAYED}: true on the re-send's reply"
    return None


def _answers_applied(c: Checker) -> str | None:
    found = c.answer_of(1)
    return None if found == "applied" else f"expected answer 'applied', got {found!r}"


def _answers_not_applied(c: Checker) -> str | None:
    found = c.answer_of(2)
    return None if found == "not-applied" else f"expected answer 'not-applied', got {found!r}"


def _fences(c: Checker) -> str | None:
    newer = c.send(c.effect(3, token=2), c.body(3))
    if not 200 <= newer.status < 300:
        return f"expected token 2 applied (2xx), got {newer.status}"
    stale = c.send(c.effect(4, token=1), c.body(4))
    if stale.status != 409:
        return f"expected token 1 after token 2 refused with 409, got {stale.status}"
    found = c.answer_of(4)
    return None if found == "not-applied" else (
        f"expected the stale request's key 'not-applied', got {found!r}")


def _checks_approval(c: Checker) -> str | None:
    approved = hashlib.sha256(canonical(c.body(5, approved=True))).hexdigest()
    other = c.send(c.effect(5, token=2, digest=approved), c.body(5, approved=False))
    if other.status != 422:
        return f"expected a body other than the approved one refused with 422, got {other.status}"
    if (found := c.answer_of(5)) != "not-applied":
        return f"expected the refused key 'not-applied', got {found!r}"
    same = c.send(c.effect(5, token=2, digest=approved), c.body(5, approved=True),
                  spaced=True)
    return None if 200 <= same.status < 300 else (
        f"expected the approved body applied (2xx), got {same.status}")


CHECKS: Final[Sequence[tuple[str, Callable[[Checker], str | None]]]] = (
    ("applies", _applies), ("deduplicates", _deduplicates),
    ("answers-applied", _answers_applied), ("answers-not-applied", _answers_not_applied),
    ("fences", _fences), ("checks-approval", _checks_approval))


def version() -> str:
    """The installed distribution's version (``agentrun.api.distributions``'s twin: this
    kit imports nothing else of ``agentrun``, so a service can vendor it, and then no
    distribution is installed to ask)."""
    try:
        return metadata.version("agentrun-worker")
    except metadata.PackageNotFoundError:
        return "unknown (not installed as a distribution)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="agentrun-owner-check",
        description="Check that the service at URL keeps the effect protocol "
                    "(docs/effect-owners.md), with reserved test keys.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    parser.add_argument("url", help="where the service takes effect requests")
    parser.add_argument("--method", default="POST", choices=["POST", "PUT", "PATCH"])
    given = parser.parse_args(argv)
    if not given.url.startswith(("http://", "https://")):
        parser.error("URL must be http:// or https://")
    checker = Checker(url=given.url, method=given.method)
    failed = 0
    print(f"agentrun-owner-check: {given.url}, scope {checker.scope}")
    for name, check in CHECKS:
        try:
            why = check(checker)
        except Unreachable as error:
            print(f"unreachable: {error}", file=sys.stderr)
            return 2
        print(f"{'ok  ' if why is None else 'FAIL'} {name}" + ("" if why is None else f": {why}"))
        failed += why is not None
    print(f"{len(CHECKS) - failed} of {len(CHECKS)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
