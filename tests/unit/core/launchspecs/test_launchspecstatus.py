"""``launchspecstatus.derive``: validity from the dry run's answer, pins per generation.

Covers: 201 → Valid True, 400/422 → False InvalidTemplate with the server's words, a
quota's 403 "must specify" → False QuotaRequiresResources, a LimitRange's 403 (a maximum,
a minimum, a limit-to-request ratio) → False LimitRangeRefused, Pod Security admission's
403 → False PodSecurityRefused, another 403 (a full quota
among them) → Unknown DryRunRefused; slots pinning this uid counted per generation, newest first, at
most ``GENERATIONS_KEPT``; a same-name spec's pins (another uid) not counted.
"""

from __future__ import annotations

import pytest

from agentrun.api import conditions
from agentrun.api.launchspecs import GENERATIONS_KEPT
from agentrun.core.launchspecs import launchspecstatus
from tests.unit.core import corefakes as f


def pinning(generation: int, uid: str = "uid-cpu-spec") -> object:
    pin = f.PINNED.model_copy(update={"generation": generation, "uid": uid})
    return f.slot(f.ready().model_copy(update={"launch_spec": pin}))


MUST_SPECIFY = ("spec.containers[0].name: failed quota: compute: must specify limits.cpu "
                "for: agentrun-worker")
FULL = "spec.containers[0].name: exceeded quota: compute, requested: pods=1"
LIMIT_MAX = ("spec.containers[0].name: maximum cpu usage per Container is 500m, but limit "
             "is 1")
LIMIT_RATIO = ("spec.containers[0].name: cpu max limit to request ratio per Container is 2, "
               "but provided ratio is 20.000000")
POD_SECURITY = ('pods "dry-run-x" is forbidden: violates PodSecurity "restricted:latest": '
                'allowPrivilegeEscalation != false (container "main" must set '
                'securityContext.allowPrivilegeEscalation=false) spec.containers[0].name')
LIMIT_MIN = ("spec.containers[0].name: minimum memory usage per Pod is 128Mi, but request "
             "is 64Mi")


@pytest.mark.parametrize(("status", "message", "value", "reason"), [
    (201, "", "True", "DryRunSucceeded"), (422, "", "False", "InvalidTemplate"),
    (400, "", "False", "InvalidTemplate"), (403, "", "Unknown", "DryRunRefused"),
    (403, MUST_SPECIFY, "False", "QuotaRequiresResources"),
    (403, FULL, "Unknown", "DryRunRefused"),
    (403, LIMIT_MAX, "False", "LimitRangeRefused"),
    (403, LIMIT_RATIO, "False", "LimitRangeRefused"),
    (403, LIMIT_MIN, "False", "LimitRangeRefused"),
    (403, POD_SECURITY, "False", "PodSecurityRefused")])
def test_validity_follows_the_dry_run(status: int, message: str, value: str,
                                      reason: str) -> None:
    derived = launchspecstatus.derive(
        spec=f.CPU_SPEC, slots=[], now=f.T0, dry_run=launchspecstatus.DryRun(
            status=status, message=message or "spec.containers[0].name"))
    valid = conditions.find(derived.conditions, launchspecstatus.VALID)
    assert valid is not None and (valid.status, valid.reason) == (value, reason)
    assert valid.observed_generation == f.CPU_SPEC.metadata.generation
    if status != 201:
        assert "spec.containers[0].name" in valid.message


def test_pins_are_counted_per_generation_newest_first() -> None:
    slots = [pinning(g) for g in (1, 1, 2, *range(3, 3 + GENERATIONS_KEPT))]
    slots.append(pinning(9, uid="uid-of-a-deleted-spec"))
    derived = launchspecstatus.derive(spec=f.CPU_SPEC, slots=slots,  # type: ignore[arg-type]
                                      now=f.T0, dry_run=launchspecstatus.DryRun(status=201))
    assert derived.pinned_by == len(slots) - 1
    assert [g.generation for g in derived.generations] == list(
        range(2 + GENERATIONS_KEPT, 2, -1))
    assert len(derived.generations) == GENERATIONS_KEPT
