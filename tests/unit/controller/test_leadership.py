"""``controller.leadership.Elector`` over an in-memory API (no cluster, a fake clock).

The fake keeps the leader Lease and the fencing token with resourceVersions (a PUT under
a stale one is a 409, a POST of an existing one a 409) and plays admission's fence: the
dry-run probe is refused (403 ``fenced``) unless the token names the prober, and a token
write at a term not above the stored one is refused. Covers: a first candidate creates
the Lease, writes the token at term 0 and leads once the probe passes; a second waits
while the first renews, takes once the first stopped renewing for the lease duration
(term 1), and the first, on its next pass, finds another holder and stops at once; a
leader that cannot renew for the renew deadline stops; a graceful stop releases the
Lease, and the standby takes it on its next pass; a probe refused (admission not caught
up) keeps the lead unset until it passes; a Lease made anew starts its term above the
token an earlier install left.
"""

from __future__ import annotations

import copy
import json
import logging
from datetime import UTC, datetime
from typing import Any

from agentrun import rest
from agentrun.api import names
from agentrun.controller import leadership
from agentrun.core.policies import fencing
from agentrun.core.policies import leadership as rules

TIMING = rules.Timing(lease=15, renew_deadline=10, retry=2)
NAMESPACE = "agentrun-ops"  # the operator's, wherever it is installed (not the default)
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
SECRETS = f"/api/v1/namespaces/{NAMESPACE}/secrets"
EVENTS = f"/api/v1/namespaces/{NAMESPACE}/events"


class Api:
    """The two objects, by path, with resourceVersions; admission's fence on probes."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.down = False
        self.lagging = False  # admission's cache behind: every probe refused

    def _error(self, status: int, message: str) -> rest.ApiError:
        return rest.ApiError(status, json.dumps({"message": message, "reason": "x"}))

    def get(self, path: str, **_: Any) -> dict[str, Any] | None:
        if self.down:
            raise self._error(503, "down")
        found = self.objects.get(path)
        return copy.deepcopy(found) if found else None

    def request(self, method: str, path: str, *, body: dict[str, Any] | None = None,
                query: dict[str, str] | None = None, **_: Any) -> dict[str, Any]:
        if self.down:
            raise self._error(503, "down")
        assert body is not None
        if path == EVENTS:
            assert query == {"dryRun": "All"}
            prober = body["message"].split()[0]
            who, _term = fencing.token_names(self.objects.get(f"{SECRETS}/"
                                                              f"{names.LEADER_SECRET}"))
            if self.lagging or who != prober:
                raise self._error(403, f"fenced: pod {prober} is not the leader")
            return {}
        target = path if method == "PUT" else f"{path}/{body['metadata']['name']}"
        held = self.objects.get(target)
        if method == "POST" and held is not None:
            raise self._error(409, "exists")
        if method == "PUT":
            if held is None or held["metadata"]["resourceVersion"] != body["metadata"].get(
                    "resourceVersion"):
                raise self._error(409, "conflict")
            if target.startswith(SECRETS) and fencing.token_names(body)[1] <= \
                    fencing.token_names(held)[1]:
                raise self._error(403, "fenced: the fencing token is at a later term")
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.objects[target] = stored
        return copy.deepcopy(stored)

    def holder(self) -> str:
        return str(self.objects[f"{LEASES}/{names.LEADER_LEASE}"]["spec"]["holderIdentity"])

    def token(self) -> tuple[str, int]:
        return fencing.token_names(self.objects.get(f"{SECRETS}/{names.LEADER_SECRET}"))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(api: Api, clock: Clock, name: str, lost: list[str]) -> leadership.Elector:
    return leadership.Elector(client=api, identity=name,  # type: ignore[arg-type]
                              timing=TIMING, logger=logging.getLogger("test"), clock=clock,
                              wall=lambda: datetime(2026, 12, 5, tzinfo=UTC),
                              on_lost=lambda: lost.append(name), namespace=NAMESPACE)


def test_the_first_leads_the_second_takes_over_once_the_first_stops_renewing() -> None:
    api, clock, lost = Api(), Clock(), []
    a, b = elector(api, clock, "a", lost), elector(api, clock, "b", lost)
    led: list[str] = []
    a.on_lead = lambda: led.append("a")
    a.step()
    assert a.leading.is_set() and led == ["a"]
    assert api.holder() == "a" and api.token() == ("a", 0)
    for _ in range(20):  # 40 s of a renewing: b never takes
        clock.now += TIMING.retry
        a.step()
        b.step()
        assert not b.leading.is_set() and api.holder() == "a"
    clock.now += TIMING.lease - 0.5  # a paused: b has seen no change for 14.5 s
    b.step()
    assert not b.leading.is_set()
    clock.now += 0.5
    b.step()
    assert b.leading.is_set() and api.holder() == "b" and api.token() == ("b", 1)
    assert lost == []
    a.step()  # a wakes up: another holds the Lease: it stops at once
    assert lost == ["a"] and not a.leading.is_set()


def test_a_leader_that_cannot_renew_stops_after_the_renew_deadline() -> None:
    api, clock, lost = Api(), Clock(), []
    a = elector(api, clock, "a", lost)
    a.step()
    api.down = True
    clock.now += TIMING.renew_deadline
    assert not a.overdue()
    clock.now += 0.1
    assert a.overdue()


def test_a_graceful_stop_releases_and_the_standby_takes_at_once() -> None:
    api, clock, lost = Api(), Clock(), []
    a, b = elector(api, clock, "a", lost), elector(api, clock, "b", lost)
    a.step()
    b.step()
    a.stop()
    assert api.holder() == "" and not a.leading.is_set()
    b.step()  # no waiting out the lease
    assert b.leading.is_set() and api.token() == ("b", 1)


def test_the_lead_waits_until_admission_sees_the_token() -> None:
    api, clock, lost = Api(), Clock(), []
    a = elector(api, clock, "a", lost)
    api.lagging = True
    a.step()
    assert api.holder() == "a" and api.token() == ("a", 0) and not a.leading.is_set()
    clock.now += TIMING.retry
    api.lagging = False
    a.step()  # renews, finds the token already its own, probes: admitted
    assert a.leading.is_set() and api.token() == ("a", 0)


def test_a_lease_made_anew_starts_above_the_token_an_earlier_install_left() -> None:
    """The Lease deleted (the token kept, at term 7): the next leader's term is 8, so
    the fence lets it lead; a term below the token's would be refused forever."""
    api, clock, lost = Api(), Clock(), []
    a = elector(api, clock, "a", lost)
    left = fencing.token_body(identity="z", term=7, resource_version=None,
                              namespace=NAMESPACE)
    left["metadata"]["resourceVersion"] = "0"
    api.objects[f"{SECRETS}/{names.LEADER_SECRET}"] = left
    a.step()
    assert a.leading.is_set() and api.token() == ("a", 8)
    assert api.objects[f"{LEASES}/{names.LEADER_LEASE}"]["spec"]["leaseTransitions"] == 8
