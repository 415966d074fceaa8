"""Reading the local API server's audit log: which writes a user made, in order.

The local control plane (``tests/support/cluster/localcluster.py``) logs every request except
get/list/watch (those only for the ``operator`` user) at level ``Metadata`` (no bodies)
as JSON lines. A *write* here is a
request with verb create, update, patch or delete. Each one is reported once, at stage
``ResponseComplete`` (``RequestReceived`` is omitted by the policy).

The API server rotates the log at 100 MB (its writer's default size, lumberjack's: the
local control plane sets no ``--audit-log-maxsize``), into ``audit-<time>.log`` beside it;
a session's log is therefore the rotated files, oldest first, then ``audit.log``
(:func:`lines`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

WRITE_VERBS = frozenset({"create", "update", "patch", "delete"})


@dataclass(frozen=True)
class Write:
    verb: str
    resource: str
    subresource: str
    name: str
    namespace: str
    user: str
    code: int
    at: datetime  # requestReceivedTimestamp (the API server's clock: this machine's)

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.verb, self.resource, self.subresource, self.name)

    def row(self) -> str:
        what = self.resource + (f"/{self.subresource}" if self.subresource else "")
        return f"{self.at:%H:%M:%S.%f}  {self.verb:<7} {what:<22} {self.name:<40} {self.code}"


def lines(log: Path) -> Iterator[str]:
    """Every line of the audit log at ``log``: its rotated files first (oldest first:
    their names carry the time of the rotation), then ``log`` itself."""
    rotated = sorted(log.parent.glob(f"{log.stem}-*{log.suffix}"))
    for path in [*rotated, log]:
        with open(path, encoding="utf-8", errors="replace") as found:
            yield from found


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def writes(log: Path, *, namespace: str, user: str | None = None,
           since: datetime | None = None) -> list[Write]:
    """Writes in ``namespace`` (by ``user`` if given, received at or after ``since``)."""
    found = []
    for line in lines(log):
        if namespace not in line:  # cheap pre-filter; the log holds the whole session
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:  # a line being written right now
            continue
        if event.get("stage") != "ResponseComplete" or event.get("verb") not in WRITE_VERBS:
            continue
        ref = event.get("objectRef") or {}
        if ref.get("namespace") != namespace:
            continue
        who = (event.get("user") or {}).get("username", "")
        if user is not None and who != user:
            continue
        at = _time(event["requestReceivedTimestamp"])
        if since is not None and at < since:
            continue
        found.append(Write(verb=event["verb"], resource=ref.get("resource", ""),
                           subresource=ref.get("subresource", ""),
                           name=ref.get("name", ""), namespace=namespace, user=who,
                           code=int((event.get("responseStatus") or {}).get("code", 0)),
                           at=at))
    found.sort(key=lambda w: w.at)
    return found
