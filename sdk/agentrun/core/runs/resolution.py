"""Resolving a run's configuration: which ConfigMap revisions it pins, and are they valid.

docs/design/runs-and-configuration.md. A run names its package, workflow and bindings (``{name,
revision?}``). Each is resolved to one source ConfigMap, labelled
``agentrun.dev/config-kind``, ``-config-name``, ``-revision`` (a positive integer) and
``agentrun.dev/accepted: "true"``: the named revision, or the highest accepted one
(numerically: 10 beats 9). The three documents are then validated together (the workflow
is a DAG; the bindings bind every node exactly once).

Errors are values (:class:`Problem`), not exceptions: a missing or not yet accepted
revision can appear later (GitOps may apply the run before its configuration), so the
caller shows the problem on the ``Pinned`` condition and tries again. Resolution runs
only while ``runobjects.needs_pinning`` says so; pinned runs never resolve again.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import yaml
from pydantic import ValidationError

from agentrun.api import bounds, names
from agentrun.api.configs import (
    BindingsDocument,
    PackageDocument,
    WorkflowDocument,
    parse_document,
)
from agentrun.api.runs import AgentRun, ConfigRef

# ``Pinned`` condition reasons when a run cannot be pinned (docs/design/names.md).
CONFIG_NOT_FOUND: Final = "ConfigNotFound"
CONFIG_NOT_ACCEPTED: Final = "ConfigNotAccepted"
CONFIG_INVALID: Final = "ConfigInvalid"
REVISION_INVALID: Final = "RevisionInvalid"
NOT_A_TENANT: Final = "NotATenantNamespace"
TENANT_MISMATCH: Final = "TenantMismatch"
FORK_SOURCE_UNUSABLE: Final = "ForkSourceUnusable"  # gone, another run, unpinned, altered

# A revision label is canonical decimal, no sign and no leading zero, so that "1" and "01"
# can never be two spellings of one revision; at most ``bounds.MAX_REVISION`` (2^53 - 1,
# exact in every JSON number, so the CRD's maximum is exact too).
_REVISION: Final = re.compile(r"[1-9][0-9]{0,15}")
_MAX_DETAIL: Final = 2000
_MAX_NOTES: Final = 5
# libyaml's loader where PyYAML was built with it (its wheels are): a 256-node workflow
# parses about ten times faster, and a run re-reads its documents on every pinning step.
_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Document = PackageDocument | WorkflowDocument | BindingsDocument


@dataclass(frozen=True, kw_only=True)
class Problem:
    """Why a run cannot be pinned: a ``Pinned`` condition reason and an actionable message."""

    reason: str
    message: str


@dataclass(frozen=True, kw_only=True)
class Resolved:
    """One chosen source ConfigMap: what it is, and the exact text the run will pin.

    ``notes`` lists ConfigMaps skipped for malformed labels, so they can be reported even
    when resolution succeeded (a typo in a revision label should not go unnoticed).
    """

    kind: str
    name: str
    source: str
    uid: str
    revision: int
    text: str
    sha256: str
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Resolution:
    """All three configurations chosen and valid together: the run may be pinned."""

    package: Resolved
    workflow: Resolved
    bindings: Resolved
    package_document: PackageDocument
    workflow_document: WorkflowDocument
    bindings_document: BindingsDocument

    def all(self) -> tuple[Resolved, Resolved, Resolved]:
        return (self.package, self.workflow, self.bindings)

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(note for r in self.all() for note in r.notes)


@dataclass(frozen=True, kw_only=True)
class _Candidate:
    source: str
    uid: str
    revision: int
    accepted: bool
    data: Mapping[str, Any]


def sha256_of(text: str) -> str:
    """The digest of a data key's exact text (UTF-8): what the pin and snapshot name carry."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _meta(config_map: Mapping[str, Any]) -> Mapping[str, Any]:
    return config_map.get("metadata") or {}


def _candidates(
    *, kind: str, name: str, config_maps: Sequence[Mapping[str, Any]],
) -> tuple[list[_Candidate], list[str]]:
    """The ConfigMaps that are revisions of ``kind``/``name``, and notes on those skipped.

    Snapshots (labelled ``agentrun.dev/snapshot-of``) carry the same kind and name labels
    but are copies owned by some run, never sources, so they are not candidates.
    """
    found: list[_Candidate] = []
    notes: list[str] = []
    for config_map in config_maps:
        meta = _meta(config_map)
        labels = meta.get("labels") or {}
        if labels.get(names.CONFIG_KIND_LABEL) != kind or labels.get(
                names.CONFIG_NAME_LABEL) != name or names.SNAPSHOT_LABEL in labels:
            continue
        source = str(meta.get("name") or "")
        label = labels.get(names.REVISION_LABEL)
        if label is None or not _REVISION.fullmatch(str(label)) or (
                int(label) > bounds.MAX_REVISION):
            shown = "missing" if label is None else repr(label[:64])
            notes.append(f"ConfigMap {source!r} was skipped: its {names.REVISION_LABEL} label "
                         f"is {shown}, not a positive integer such as \"3\" (at most "
                         f"{bounds.MAX_REVISION})")
            continue
        found.append(_Candidate(
            source=source, uid=str(meta.get("uid") or ""), revision=int(label),
            accepted=labels.get(names.ACCEPTED_LABEL) == "true", data=config_map.get("data") or {}))
    return found, notes


def _revisions(candidates: Sequence[_Candidate]) -> str:
    return ", ".join(str(r) for r in sorted({c.revision for c in candidates})) or "none"


def _revisions_exist(candidates: Sequence[_Candidate]) -> str:
    found = _revisions(candidates)
    return f"revisions {found} exist" if "," in found else f"revision {found} exists"


def _with_notes(message: str, notes: Sequence[str]) -> str:
    """Append the skipped ConfigMaps, the first few by name, so the message stays readable."""
    if not notes:
        return message
    more = f"; and {len(notes) - _MAX_NOTES} more" if len(notes) > _MAX_NOTES else ""
    return f"{message}. {'; '.join(notes[:_MAX_NOTES])}{more}"


def choose(
    *, kind: str, ref: ConfigRef, config_maps: Sequence[Mapping[str, Any]], namespace: str,
) -> Resolved | Problem:
    """Pick the source ConfigMap for one reference: the named revision, else the highest.

    Only accepted revisions (``agentrun.dev/accepted: "true"``, set by GitOps/admin
    identities) can be pinned. Two accepted ConfigMaps claiming the chosen revision is an
    error, not a coin toss: a run must pin one definite text.
    """
    candidates, notes = _candidates(kind=kind, name=ref.name, config_maps=config_maps)
    explicit = ref.revision is not None
    what = f"{kind} {ref.name!r}" + (f" revision {ref.revision}" if explicit else "")
    labels = (f"{names.CONFIG_KIND_LABEL}={kind}, {names.CONFIG_NAME_LABEL}={ref.name}, "
              f"{names.REVISION_LABEL}=<n>, {names.ACCEPTED_LABEL}=\"true\"")
    if explicit:
        chosen = [c for c in candidates if c.revision == ref.revision]
    else:
        accepted = [c for c in candidates if c.accepted]
        top = max((c.revision for c in accepted), default=None)
        chosen = [c for c in accepted if c.revision == top] if accepted else candidates
    if not chosen:
        if notes and not candidates:
            return Problem(reason=REVISION_INVALID, message=_with_notes(
                f"{what}: no ConfigMap in namespace {namespace!r} has a valid revision label; "
                f"fix the labels (expected {labels})", notes))
        tail = ("; create it, or start a new run that names an existing revision"
                if explicit else f"; create one labelled {labels}")
        return Problem(reason=CONFIG_NOT_FOUND, message=_with_notes(
            f"{what}: not found in namespace {namespace!r} (revisions present: "
            f"{_revisions(candidates)}){tail}", notes))
    accepted_chosen = [c for c in chosen if c.accepted]
    if not accepted_chosen:
        return Problem(reason=CONFIG_NOT_ACCEPTED, message=_with_notes(
            f"{what}: {_revisions_exist(chosen)} in namespace {namespace!r} without "
            f"{names.ACCEPTED_LABEL}=\"true\"; the GitOps/admin identity must accept it "
            "before a run can pin it", notes))
    if len(accepted_chosen) > 1:
        sources = ", ".join(sorted(c.source for c in accepted_chosen))
        return Problem(reason=REVISION_INVALID, message=_with_notes(
            f"{what}: revision {accepted_chosen[0].revision} is claimed by more than one "
            f"accepted ConfigMap ({sources}); keep one ConfigMap per revision", notes))
    return _read(kind=kind, name=ref.name, candidate=accepted_chosen[0], notes=tuple(notes))


def _read(*, kind: str, name: str, candidate: _Candidate,
          notes: tuple[str, ...]) -> Resolved | Problem:
    key = names.CONFIG_DATA_KEYS[kind]
    text = candidate.data.get(key)
    if not isinstance(text, str):
        return Problem(reason=CONFIG_INVALID, message=(
            f"{kind} {name!r} revision {candidate.revision} (ConfigMap {candidate.source!r}) "
            f"has no data key {key!r}; put the document there (binaryData is not read)"))
    return Resolved(kind=kind, name=name, source=candidate.source, uid=candidate.uid,
                    revision=candidate.revision, text=text, sha256=sha256_of(text), notes=notes)


def _clip(text: str) -> str:
    flat = " ".join(text.replace('in "<unicode string>", ', "").split())
    return flat if len(flat) <= _MAX_DETAIL else flat[:_MAX_DETAIL] + "…"


def _explain(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"])
        message = str(item["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def parse(*, kind: str, text: str, origin: str) -> Document | Problem:
    """Parse and validate one document; ``origin`` says where it came from, for the message.

    Also used to re-read a pinned snapshot (the operator restarts; the pins stay).
    """
    try:
        data = yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        return Problem(reason=CONFIG_INVALID, message=(
            f"{origin}: {names.CONFIG_DATA_KEYS[kind]} is not valid YAML ({_clip(str(exc))}); "
            "fix the document and publish it as a new revision"))
    try:
        return parse_document(kind, data)
    except ValidationError as exc:
        return Problem(reason=CONFIG_INVALID, message=(
            f"{origin}: {names.CONFIG_DATA_KEYS[kind]} is not a valid {kind} document "
            f"({_clip(_explain(exc))}); fix it and publish it as a new revision"))


def _origin(resolved: Resolved) -> str:
    return (f"{resolved.kind} {resolved.name!r} revision {resolved.revision} "
            f"(ConfigMap {resolved.source!r})")


def _combine(problems: Sequence[Problem]) -> Problem:
    """One condition carries one reason: the first kind's; the message lists every kind's."""
    return Problem(reason=problems[0].reason, message="; ".join(p.message for p in problems))


def resolve(
    *, run: AgentRun, config_maps: Mapping[str, Sequence[Mapping[str, Any]]],
) -> Resolution | Problem:
    """Choose and validate the run's package, workflow and bindings, all or nothing.

    ``config_maps`` holds, per kind, the namespace's ConfigMaps (any extras are filtered
    by label). Every kind's problem is reported at once, so a person fixes them in one go.
    The bindings must cover the workflow exactly: one binding per node, no strangers.
    """
    namespace = run.metadata.namespace or ""
    refs = {"package": run.spec.package, "workflow": run.spec.workflow,
            "bindings": run.spec.bindings}
    chosen: dict[str, Resolved] = {}
    problems: list[Problem] = []
    for kind, ref in refs.items():
        found = choose(kind=kind, ref=ref, config_maps=config_maps.get(kind, ()),
                       namespace=namespace)
        if isinstance(found, Problem):
            problems.append(found)
        else:
            chosen[kind] = found
    if problems:
        return _combine(problems)
    return _validated(chosen)


def _validated(chosen: Mapping[str, Resolved]) -> Resolution | Problem:
    """The three chosen texts parsed, and valid together (or every kind's problem)."""
    problems: list[Problem] = []
    parsed: dict[str, Document] = {}
    for kind, resolved in chosen.items():
        document = parse(kind=kind, text=resolved.text, origin=_origin(resolved))
        if isinstance(document, Problem):
            problems.append(document)
        else:
            parsed[kind] = document
    if problems:
        return _combine(problems)
    package, workflow, bindings = parsed["package"], parsed["workflow"], parsed["bindings"]
    assert isinstance(package, PackageDocument)
    assert isinstance(workflow, WorkflowDocument)
    assert isinstance(bindings, BindingsDocument)
    try:
        bindings.check_covers(workflow)
    except ValueError as exc:
        return Problem(reason=CONFIG_INVALID, message=(
            f"{_origin(chosen['bindings'])} does not fit {_origin(chosen['workflow'])}: "
            f"{exc}; publish bindings that bind every workflow node exactly once"))
    return Resolution(package=chosen["package"], workflow=chosen["workflow"],
                      bindings=chosen["bindings"], package_document=package,
                      workflow_document=workflow, bindings_document=bindings)


def from_source(*, source: AgentRun, snapshots: Mapping[str, Mapping[str, Any]]) -> (
        Resolution | Problem):
    """A fork's configuration: exactly what its ``source`` run pinned, read from the
    source's own snapshots (``snapshots``, by name) and checked against the digests pinned
    on it. Never re-resolved by revision: a revision deleted or republished since does not
    change what the fork runs."""
    pins = source.status.pinned
    assert pins is not None
    chosen: dict[str, Resolved] = {}
    for kind, pin in (("package", pins.package), ("workflow", pins.workflow),
                      ("bindings", pins.bindings)):
        found = snapshots.get(pin.snapshot) or {}
        text = (found.get("data") or {}).get(names.CONFIG_DATA_KEYS[kind])
        if not isinstance(text, str) or sha256_of(text) != pin.sha256:
            return Problem(reason=FORK_SOURCE_UNUSABLE, message=(
                f"run {source.metadata.name}'s pinned {kind} snapshot {pin.snapshot} is "
                "missing or altered, so the fork cannot copy its configuration"))
        name = str(((found.get("metadata") or {}).get("labels") or {}).get(
            names.CONFIG_NAME_LABEL) or pin.source)
        chosen[kind] = Resolved(kind=kind, name=name, source=pin.source, uid=pin.uid,
                                revision=pin.revision, text=text, sha256=pin.sha256)
    return _validated(chosen)


def tenancy(*, run: AgentRun, tenant: str | None) -> Problem | None:
    """A run is served only in a tenant's namespace, and names no other tenant.

    The tenant is the namespace's ``agentrun.dev/tenant`` label, set by a cluster admin;
    ``spec.tenant``, where written for readability, must agree with it.
    """
    namespace = run.metadata.namespace or ""
    if tenant is None:
        return Problem(reason=NOT_A_TENANT, message=(
            f"namespace {namespace!r} has no {names.TENANT_LABEL} label, so it belongs to "
            "no tenant and agentrun serves no run in it; ask a cluster admin to label it"))
    if run.spec.tenant is not None and run.spec.tenant != tenant:
        return Problem(reason=TENANT_MISMATCH, message=(
            f"spec.tenant is {run.spec.tenant!r} but namespace {namespace!r} belongs to "
            f"tenant {tenant!r}; remove spec.tenant or set it to {tenant!r}"))
    return None
