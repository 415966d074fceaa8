"""Why the API server refused to create a Pod, as far as the operator acts on it.

One rule for the LaunchSpec's dry run (``core.launchspecs.launchspecstatus``) and for a claim's Pod
(``core.slots.attemptlife``), so that what makes a LaunchSpec ``Valid`` False is exactly what
a claim does not spend an attempt on:

- *full*: a ResourceQuota has no room now (403 "exceeded quota"). Room may come when
  other pods end: the claim waits (``QuotaExceeded``).
- *the LaunchSpec's*: the pod as the LaunchSpec makes it can never be created here:
  invalid (400, 422: the template, or the sidecar, breaks the pod's rules), or a
  ResourceQuota requires what a container of it does not set (403 "must specify": the
  quota counts limits or requests of a resource, and every container must then give
  them), or a LimitRange refuses a container's or the pod's resources (403 "maximum
  cpu usage per Container is 500m, but limit is 1", "minimum ... per Pod ...", "cpu max
  limit to request ratio per Container is 2, but provided ratio is 20.000000"). Waiting
  for room would not help; changing the LaunchSpec (or the namespace's quota or
  LimitRange) does.
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
# The LimitRanger's words: "<bound> <resource> usage per <Container|Pod> is ..." for a
# minimum or maximum, "<resource> max limit to request ratio per <...> is ..." for a ratio.
LIMIT_RANGE_SCOPES = ("per Container", "per Pod")
LIMIT_RANGE_BOUNDS = ("maximum", "minimum", "limit to request ratio")


def of(*, status: int, message: str) -> Refusal:
    """The kind of refusal an answer to a Pod's create is (see the module docstring)."""
    if status in INVALID:
        return Refusal.LAUNCH_SPEC
    if status == 403 and QUOTA_FULL_WORDS in message:
        return Refusal.QUOTA_FULL
    if requires_resources(status=status, message=message):
        return Refusal.LAUNCH_SPEC
    if limit_range(status=status, message=message):
        return Refusal.LAUNCH_SPEC
    return Refusal.OTHER


def requires_resources(*, status: int, message: str) -> bool:
    """A 403 of a ResourceQuota that counts resources a container of the pod does not set."""
    return (status == 403 and QUOTA_FULL_WORDS not in message and "quota" in message
            and QUOTA_REQUIRES_WORDS in message)


def pod_security(*, status: int, message: str) -> bool:
    """A 403 of Pod Security admission: the namespace's enforced level refuses a container
    or the pod (its words: ``violates PodSecurity "restricted:latest": ...``). A claim
    treats it as *other* (``ClaimFailed``: the namespace's label may change); a
    LaunchSpec's dry run says which fields to set."""
    return status == 403 and "violates PodSecurity" in message


def limit_range(*, status: int, message: str) -> bool:
    """A 403 of a LimitRange: a container's (or the pod's) resources are outside its bounds,
    or their limit-to-request ratio is; told by the LimitRanger's own words, since the
    API server names no plugin in its answer."""
    return (status == 403 and QUOTA_FULL_WORDS not in message
            and any(scope in message for scope in LIMIT_RANGE_SCOPES)
            and any(bound in message for bound in LIMIT_RANGE_BOUNDS))
