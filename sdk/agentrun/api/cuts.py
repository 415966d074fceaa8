"""Cuts: what a rerun takes out of a slot's recoverable prefix, in the journal's commit order.

Pure, and shared: the operator decides a cut when it accepts a rerun and writes every cut
the slot has on each later attempt's Lease (``journal.agentrun.dev/cuts``, the operator's
alone: admission refuses a holder that touches it); the worker SDK applies them when it
reads its prefix (``agentrun.worker._prefix``). Terms:

- a *position* is where a record was committed: ``(attempt, seq, index)``, the attempt's
  ``seq``-th journal node and the record's place in it; a record on a Lease (a run with no
  journal) is at ``(attempt, 0, 0)``, before anything its attempt put in a journal. The
  *commit order* is the order of positions: attempt by attempt, node by node.
- a *cut* ``<attempt>.<seq>.<index>-<through>`` discards every record at a position from
  its start onwards that an attempt numbered at most ``through`` committed: the steps at
  and after the step a person reran from, up to the last attempt before the rerun. The
  attempts after it build a new prefix on what is left, and a later rerun adds a cut of
  its own. Nothing is deleted: the discarded records stay in the journal and its history.
- *kept* whatever the cut: an effect's records (its intent, outcome and payload, an
  approval asked and decided) and every record trusted only on a Lease (a question and its
  answer, an unresolved effect and its resolution). An effect that was applied is never
  sent again because a step before it is redone: its recorded result is reused. An answer
  stays the answer.

A *re-send* (``<key>=<generation>@<through>``) is the one way to send an applied effect
again: a rerun names the effect, with its own reason, and the effect's records (every
``<key>.<suffix>`` of :data:`EFFECT_SUFFIXES`) that attempts up to ``through`` committed
are left out of the prefix, so the next attempt sends it as a new effect: a new
idempotency key (its generation is part of it), a new intent, approved again where
approval is required. The operator writes a slot's re-sends on each later Lease
(``journal.agentrun.dev/resends``) beside its cuts.

A slot keeps at most :data:`MAX_CUTS` cuts (cuts that overlap merge into one), so the Lease
annotation and ``status.cuts`` stay small; past that a rerun is refused (fork the run).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from agentrun.api import bounds, names
from agentrun.api.records import Kind, Record

MAX_CUTS = 32  # cuts a slot keeps (disjoint: overlapping ones merge)
CUT_CHARS = 40  # "1000.4294967295.1023-1000" fits
CUT_PATTERN = r"^(0|[1-9][0-9]{0,3})[.][0-9]{1,10}[.][0-9]{1,4}-[1-9][0-9]{0,3}$"
ANNOTATION = names.JOURNAL_CUTS_ANNOTATION
_PARSE = re.compile(r"(?P<a>[0-9]+)[.](?P<s>[0-9]+)[.](?P<i>[0-9]+)-(?P<n>[0-9]+)")
KEPT_KINDS = frozenset({Kind.EFFECT_INTENT, Kind.EFFECT_OUTCOME})
KEPT_SUFFIXES = (*names.LEASE_ONLY_SUFFIXES, names.PAYLOAD_SUFFIX)
RESENDS_ANNOTATION = names.JOURNAL_RESENDS_ANNOTATION
MAX_RESENDS = 16  # effects a slot keeps a re-send generation for
RESEND_CHARS = bounds.STEP_KEY_CHARS + 10
RESEND_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?=[1-9][0-9]{0,3}@[1-9][0-9]{0,3}$"
# Every record of one effect: its intent and outcome, the worker's unresolved record and the
# operator's resolution, the payload and the approval asked and decided.
EFFECT_SUFFIXES = (".intent", ".outcome", names.UNRESOLVED_SUFFIX, names.RESOLVED_SUFFIX,
                   names.PAYLOAD_SUFFIX, names.APPROVAL_SUFFIX, names.APPROVED_SUFFIX)
Position = tuple[int, int, int]  # (attempt, seq, index)
START: Position = (0, 0, 0)  # before every record (a fork's inherited ones included)


class CutError(ValueError):
    """A cut's text that does not parse, or is out of its bounds."""


@dataclass(frozen=True, order=True)
class Cut:
    """Discard records at ``start`` and after, of attempts up to ``through``."""

    start: Position
    through: int

    def text(self) -> str:
        attempt, seq, index = self.start
        return f"{attempt}.{seq}.{index}-{self.through}"

    def covers(self, position: Position) -> bool:
        return self.start <= position and position[0] <= self.through

    @classmethod
    def parse(cls, text: str) -> Cut:
        if len(text) > CUT_CHARS or not re.fullmatch(CUT_PATTERN, text):
            raise CutError(f"cut {text[:CUT_CHARS]!r} is not <attempt>.<seq>.<index>-<attempt>")
        found = _PARSE.fullmatch(text)
        assert found is not None
        start = (int(found["a"]), int(found["s"]), int(found["i"]))
        through = int(found["n"])
        if start[0] > through or through > bounds.MAX_ATTEMPT_NUMBER:
            raise CutError(f"cut {text!r} ends before it starts, or past the last attempt")
        return cls(start=start, through=through)


@dataclass(frozen=True)
class Resend:
    """Effect ``key`` is sent again as generation ``generation``: its records of attempts
    up to ``through`` are left out."""

    key: str
    generation: int
    through: int

    def text(self) -> str:
        return f"{self.key}={self.generation}@{self.through}"

    @classmethod
    def parse(cls, text: str) -> Resend:
        if len(text) > RESEND_CHARS or not re.fullmatch(RESEND_PATTERN, text):
            raise CutError(f"re-send {text[:RESEND_CHARS]!r} is not <effect key>="
                           "<generation>@<attempt>")
        key, rest = text.split("=")
        generation, through = rest.split("@")
        if int(generation) < 2:
            raise CutError(f"re-send {text!r}: generation 1 is the effect's first sending")
        return cls(key=key, generation=int(generation), through=int(through))


def effect_of(record_key: str) -> str | None:
    """The effect a record belongs to (``publish`` for ``publish.intent``), or None."""
    return next((record_key.removesuffix(s) for s in EFFECT_SUFFIXES
                 if record_key.endswith(s)), None)


def resent(resends: Iterable[Resend], *, record: Record, attempt: int) -> bool:
    """A record of an effect sent again, committed by an attempt before the re-send."""
    effect = effect_of(record.key)
    return effect is not None and any(r.key == effect and attempt <= r.through
                                      for r in resends)


def resends_of(texts: Sequence[str]) -> dict[str, int]:
    """Effect key -> the last attempt whose records of it a re-send leaves out
    (``status.resends``, as the operator wrote them)."""
    return {r.key: r.through for r in (Resend.parse(t) for t in texts)}


def resends_on_lease(annotation: str | None) -> tuple[Resend, ...]:
    if not annotation:
        return ()
    parts = annotation.split(",")
    if len(parts) > MAX_RESENDS:
        raise CutError(f"{RESENDS_ANNOTATION} holds {len(parts)} re-sends; at most "
                       f"{MAX_RESENDS}")
    return tuple(Resend.parse(p) for p in parts)


def kept(record: Record) -> bool:
    """A record no cut discards (see the module docstring)."""
    return record.kind in KEPT_KINDS or record.key.endswith(KEPT_SUFFIXES)


def discarded(cuts: Iterable[Cut], *, record: Record, position: Position) -> bool:
    return not kept(record) and any(cut.covers(position) for cut in cuts)


@dataclass(frozen=True)
class Discards:
    """What one attempt leaves out of its prefix: the slot's cuts and re-sends, as the
    operator wrote them on the attempt's own Lease (:func:`on_attempt_lease`)."""

    cuts: tuple[Cut, ...] = ()
    resends: tuple[Resend, ...] = ()
    # A fork's cut (``core.runs.runforks``): everything from its start is left out, effects
    # too: what the source did from the fork's step on, the fork does as its own.
    hard: tuple[Cut, ...] = ()

    def out(self, record: Record, *, position: Position) -> bool:
        return (discarded(self.cuts, record=record, position=position)
                or resent(self.resends, record=record, attempt=position[0])
                or any(cut.covers(position) for cut in self.hard))

    def generation(self, effect: str) -> int:
        """The sending of ``effect`` this attempt makes: 1, or a re-send's generation."""
        return next((r.generation for r in self.resends if r.key == effect), 1)


NONE = Discards()


def on_attempt_lease(annotations: Mapping[str, str]) -> Discards:
    """The cuts and re-sends an attempt's Lease carries; :class:`CutError` if they do not
    parse."""
    return Discards(cuts=on_lease(annotations.get(ANNOTATION)),
                    resends=resends_on_lease(annotations.get(RESENDS_ANNOTATION)))


def merged(cuts: Iterable[Cut]) -> tuple[Cut, ...]:
    """The same discards with overlapping cuts made one, in commit order.

    Two cuts overlap when one starts within the other's reach (at or before its last
    attempt); their union is then one cut from the earlier start through the later end.
    """
    out: list[Cut] = []
    for cut in sorted(cuts):
        if out and cut.start[0] <= out[-1].through:
            last = out[-1]
            out[-1] = Cut(start=last.start, through=max(last.through, cut.through))
        else:
            out.append(cut)
    return tuple(out)


def parse_all(texts: Sequence[str]) -> tuple[Cut, ...]:
    return tuple(Cut.parse(t) for t in texts)


def on_lease(annotation: str | None) -> tuple[Cut, ...]:
    """The cuts a Lease carries (comma-separated), none when it has no annotation."""
    if not annotation:
        return ()
    parts = annotation.split(",")
    if len(parts) > MAX_CUTS:
        raise CutError(f"{ANNOTATION} holds {len(parts)} cuts; at most {MAX_CUTS}")
    return parse_all(parts)


def annotation(cuts: Sequence[str], resends: Sequence[str] = ()) -> dict[str, str]:
    """The Lease annotations for ``status.cuts`` and ``status.resends`` (none when empty)."""
    return {**({ANNOTATION: ",".join(cuts)} if cuts else {}),
            **({RESENDS_ANNOTATION: ",".join(resends)} if resends else {})}


def earliest(positions: Iterable[Position], *, cuts: Iterable[Cut]) -> Position | None:
    """The first position not already discarded: where a rerun from that step cuts."""
    standing = tuple(cuts)
    return min((p for p in positions if not any(c.covers(p) for c in standing)),
               default=None)
