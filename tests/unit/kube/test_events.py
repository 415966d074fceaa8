"""Folding Events (the bookkeeping; the API's answer is in test_queue_runtime.py): a repeat
within the window is a PATCH, after it a new Event; a folded Event that expired on the
server (404) is posted anew; an Event that cannot be posted is dropped, not raised."""

from __future__ import annotations

import logging
import unicodedata
from datetime import UTC, datetime, timedelta
from typing import Any

from agentrun import rest
from agentrun.core.base.events import Event
from agentrun.kube import events

T0 = datetime(2030, 1, 1, tzinfo=UTC)
SUBJECT = {"apiVersion": "agentrun.dev/v1alpha1", "kind": "Slot",
           "metadata": {"name": "s", "namespace": "ns", "uid": "u1"}}
EVENT = Event(type="Warning", reason="ClaimFailed", message="no")


class Recording:
    """Stands in for the REST client: records requests, answers with ``fail`` if set."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, Any]] = []
        self.fail: rest.ApiError | None = None

    def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> dict[str, Any]:
        self.requests.append((method, path, body))
        if self.fail is not None:
            error, self.fail = self.fail, None
            raise error
        return {}


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def poster() -> tuple[events.Poster, Recording, Clock]:
    client, clock = Recording(), Clock()
    made = events.Poster(client, logger=logging.getLogger("test"),  # type: ignore[arg-type]
                         clock=clock)
    return made, client, clock


def test_a_repeat_within_the_window_patches_the_count() -> None:
    made, client, clock = poster()
    made.post(SUBJECT, EVENT)
    clock.now += timedelta(minutes=5)
    made.post(SUBJECT, EVENT)
    (_, _, first), (method, path, patch) = client.requests
    assert first["count"] == 1 and first["involvedObject"]["uid"] == "u1"
    assert method == "PATCH" and path.endswith(first["metadata"]["name"])
    assert patch["count"] == 2 and patch["series"]["count"] == 2


def test_after_the_window_a_repeat_is_a_new_event() -> None:
    made, client, clock = poster()
    made.post(SUBJECT, EVENT)
    clock.now += events.WINDOW + timedelta(seconds=1)
    made.post(SUBJECT, EVENT)
    assert [m for m, _, _ in client.requests] == ["POST", "POST"]


def test_a_folded_event_gone_from_the_server_is_posted_anew() -> None:
    made, client, _ = poster()
    made.post(SUBJECT, EVENT)
    client.fail = rest.ApiError(404, '{"reason": "NotFound"}')
    made.post(SUBJECT, EVENT)
    assert [m for m, _, _ in client.requests] == ["POST", "PATCH", "POST"]
    assert client.requests[-1][2]["count"] == 1


def test_an_event_that_cannot_be_posted_is_dropped() -> None:
    made, client, _ = poster()
    client.fail = rest.ApiError(403, '{"message": "forbidden"}')
    made.post(SUBJECT, EVENT)  # no exception: an Event is a notice, not state
    made.post(SUBJECT, EVENT)
    assert [m for m, _, _ in client.requests] == ["POST", "POST"]


def test_the_memory_is_bounded() -> None:
    made, _, _ = poster()
    for index in range(events.REMEMBERED + 10):
        made.post(SUBJECT, Event(type="Normal", reason="Ready", message=str(index)))
    assert len(made._posted) == events.REMEMBERED


def test_control_characters_in_a_message_are_posted_and_logged_escaped(caplog: Any) -> None:
    """A reason a person wrote cannot break a line of `kubectl describe` or of the log,
    paint a terminal or reorder what is read (bidirectional overrides)."""
    made, client, _ = poster()
    sent = "reassigned: disk\nFAKE: Normal Succeeded\x1b[2J \u202eevil\u2028 é 👩‍💻"
    with caplog.at_level(logging.INFO, logger="test"):
        made.post(SUBJECT, Event(type="Warning", reason="Reassigned", message=sent))
    (_, _, body), = client.requests
    assert body["message"] == ("reassigned: disk\\x0aFAKE: Normal Succeeded\\x1b[2J "
                               "\\u202eevil\\u2028 é 👩‍💻")
    assert not [c for c in body["message"]
                if unicodedata.category(c) in ("Cc", "Zl", "Zp") or c == "\u202e"]
    assert "\n" not in caplog.text.rstrip("\n") and "\x1b" not in caplog.text



def test_the_log_line_of_an_event_carries_its_object_as_fields_at_its_severity() -> None:
    """Through Kopf's JSON formatter, as the operator logs (``cli.configure_logging``)."""
    import io
    import json

    from kopf._core.actions.loggers import ObjectJsonFormatter

    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(ObjectJsonFormatter())
    logger = logging.getLogger("test.events.json")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    made = events.Poster(Recording(), logger=logger, clock=Clock())  # type: ignore[arg-type]
    slot = {**SUBJECT, "status": {"attemptCount": 2}}
    try:
        made.post(slot, Event(type="Normal", reason="Claimed", message="attempt 2 claimed"))
        made.post(SUBJECT, EVENT)
    finally:
        logger.removeHandler(handler)
    claimed, failed = (json.loads(line) for line in out.getvalue().splitlines())
    assert claimed["object"] == {"apiVersion": "agentrun.dev/v1alpha1", "kind": "Slot",
                                 "namespace": "ns", "name": "s", "uid": "u1", "attempt": 2}
    assert (claimed["severity"], failed["severity"]) == ("info", "warn")
    assert claimed["message"] == "Normal Claimed: attempt 2 claimed"
    assert "attempt" not in failed["object"]  # no attempt counted yet: none named
