"""Why the API server refused to create a Pod, as far as the operator acts on it.

One rule for the LaunchSpec's dry run (``core.launchspecstatus``) and for a claim's Pod
(``core.attemptlife``), so that what makes a LaunchSpec ``Valid`` False is exactly what
a claim does not spend an attempt on:

- *full*: a ResourceQuota has no room now (403 "exceeded quota"). Room may come when
  other pods end: the claim waits (``QuotaExceeded``).
- *the LaunchSpec's*: the pod as the LaunchSpec makes it can never be created here:
  invalid (400, 422: the template, or the sidecar, breaks the pod's rules), or a
  ResourceQuota requires what a container of it does not set (403 "must specify": the
  quota counts limits or requests of a resource, and every container must then give
  them). Waiting for room would not help; changing the LaunchSpec (or the namespace's
  quota) does.
- anything else (a policy's 403, a missing ServiceAccount): *other*, as before.
"""

from __future__ import annotations

import enum


class Refusal(enum.Enum):
    QUOTA_FULL = "QuotaFull"
    LAUNCH_SPEC = "LaunchSpec"
    OTHER = "Other"


INVALID = frozenset({400, 422})
QUOTA_FULL_WORDS = "exceeded quota"
QUOTA_REQUIRES_WORDS = "must specify"


def of(*, status: int, message: str) -> Refusal:
    """The kind of refusal an answer to a Pod's create is (see the module docstring)."""
    if status in INVALID:
        return Refusal.LAUNCH_SPEC
    if status == 403 and QUOTA_FULL_WORDS in message:
        return Refusal.QUOTA_FULL
    if status == 403 and "quota" in message and QUOTA_REQUIRES_WORDS in message:
        return Refusal.LAUNCH_SPEC
    return Refusal.OTHER


def requires_resources(*, status: int, message: str) -> bool:
    """A 403 of a ResourceQuota that counts resources a container of the pod does not set."""
    return of(status=status, message=message) is Refusal.LAUNCH_SPEC and status == 403
