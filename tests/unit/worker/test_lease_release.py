"""Releasing the attempt's Lease as the worker ends: what the keeper writes, when, and that
admission's shape check takes exactly that.

Covers: the release is the keeper's last write (it stops first), adds
``agentrun.dev/released`` under the version read and changes nothing else, reads again on
a 409, happens once; nothing is written by a keeper that never renewed or has lapsed, for
a lease no longer ours, or when the API server fails (the lease then expires as before).
Bad input: the admission policy's shape refuses what the SDK never writes. What the API
server and the operator make of it: ``tests/integration/operator/test_lease_policy.py``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from agentrun.api import names
from agentrun.core.policies import leasepolicy
from agentrun.worker import _renewals as renewals
from agentrun.worker._renewals import Standing
from tests.unit.worker.test_keeper import DURATION, Clock, ScriptedApi, error, lease, make, started


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_release_is_the_last_write_and_only_of_a_lease_still_ours(clock: Clock) -> None:
    """Release: stop, then one write that adds agentrun.dev/released (under the version
    read; a 409 reads again); nothing for a keeper that never renewed or has lapsed, a
    lease no longer ours, or an API server that fails (the lease then expires as before)."""
    api = ScriptedApi(clock, puts=[None, error(409), None])
    kept = started(clock, api)
    kept.release()
    kept.release()  # once: a second Worker.stop() writes nothing
    assert kept.standing() is Standing.LOST
    assert [m for m, _, _ in api.sent] == ["GET", "PUT", "GET", "PUT", "GET", "PUT"]
    for _, _, body in api.sent[3::2]:
        assert body["metadata"]["resourceVersion"] == "7"
        assert body["metadata"]["annotations"][names.RELEASED_ANNOTATION].endswith("Z")
        assert body["spec"] == lease()["spec"]  # nothing else changed
    never = ScriptedApi(clock)
    make(clock, never).release()
    assert never.sent == []
    for reading in (lease(holderIdentity="another-pod"), error(503)):
        api = ScriptedApi(clock)
        kept = started(clock, api)
        api.reading = reading
        kept.release()
        assert [m for m, _, _ in api.sent] == ["GET", "PUT", "GET"]
    failing = ScriptedApi(clock, puts=[None, error(500)])
    kept = started(clock, failing)
    kept.release()
    assert [m for m, _, _ in failing.sent] == ["GET", "PUT", "GET", "PUT"]
    lapsed = ScriptedApi(clock)
    kept = started(clock, lapsed)
    clock.now += DURATION  # past the lapse point: it vouches for nothing, so no release
    assert kept.standing() is Standing.LAPSED
    kept.release()
    assert [m for m, _, _ in lapsed.sent] == ["GET", "PUT"]


@pytest.mark.parametrize("value", ["yesterday", "2026-12-06T12:00:00Z ", "2026-12-06",
                                   "2026-12-06T12:00:00+01:00", "2026-12-06T12:00:00.1234567890Z",
                                   "x" * 300])
def test_the_policy_refuses_a_release_in_any_shape_but_the_sdks(value: str) -> None:
    shape = re.compile(leasepolicy.RELEASED_SHAPE)
    written = renewals.released(lease(), now=datetime(2026, 12, 6, 12, tzinfo=UTC))
    assert shape.match(written["metadata"]["annotations"][names.RELEASED_ANNOTATION])
    assert not shape.match(value)
    assert "[.]" in leasepolicy.RELEASED_SHAPE  # no backslash: CEL strings would refuse it
