"""What a command is, declared once: the shape every per-command module fills in.

A :class:`CommandSpec` says everything the operator, admission and the plugin need to know
about one kind of command, so that none of them compares kinds:

- the *kind* (:class:`~agentrun.api.slots.CommandKind`, the ledger's ``kind``) and the
  resource it is sent to (``target``: ``slots`` today; a Run's commands name ``agentruns``);
- its *word*, from which every annotation name is derived (``agentrun.dev/<word>-id``,
  ``-actor``, ``-epoch``, ``-override`` and ``-<suffix>`` of each field): a name is never
  spelt twice;
- its *fields* (:class:`Field`): the bound each is parsed with, its admission check, and
  the plugin flag that fills it;
- the *Python check* (``check``: the first failed predicate, or None) and the *apply*
  (``apply``: the decision of a command that passed its check);
- the *admission* fragments: the states that may accept it, further checks, and whose
  attempt it acts on (``owner``: that is also what makes admission stamp ``-override``);
- what the slot's step does around it (``selects``, ``claims``, ``opens``).

Admission's expressions are built by :mod:`agentrun.core.policies`; the helpers here that
write one validation (:func:`validation`, :func:`matches`) are below them, so a field
can carry its own check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentrun.api import names
from agentrun.api.slots import CommandKind, SlotStatus
from agentrun.core.commands.ledger import Command, Context, Decision, Failure

Object = dict[str, Any]
TERMINAL = "['Succeeded', 'Failed']"  # CEL: the states a slot leaves only by a rerun


def validation(expression: str, message: str) -> Object:
    return {"expression": expression, "message": message, "reason": "Invalid"}


def dynamic_validation(expression: str, message_expression: str, *,
                       reason: str = "Invalid") -> Object:
    return {"expression": expression, "messageExpression": message_expression,
            "reason": reason}


def matches(value: str, pattern: str) -> str:
    """CEL: ``value`` matches ``pattern``, as the operator's parsing checks it.

    RE2 searches, but the bounds' patterns are anchored (``^...$``), so this is Python's
    ``re.fullmatch``. They hold no quote or backslash to escape in a CEL string.
    """
    assert "'" not in pattern and "\\" not in pattern, pattern
    return f"{value}.matches('{pattern}')"


def key(word: str, suffix: str) -> str:
    """The annotation ``agentrun.dev/<word>-<suffix>``: every command name is made here."""
    return f"{names.GROUP}/{word}-{suffix}"


@dataclass(frozen=True, kw_only=True)
class Bound:
    """The bound on one command field: characters or UTF-8 bytes, a pattern, and whether
    it must be JSON text (``json``: checked where it is parsed, and by the plugin)."""

    chars: int
    pattern: str | None = None
    in_bytes: bool = False
    json: bool = False


@dataclass(frozen=True, kw_only=True)
class Field:
    """One value a command carries in an annotation.

    ``name``: the :class:`~agentrun.core.commands.ledger.Command` attribute it fills;
    ``suffix``: its annotation is ``agentrun.dev/<word>-<suffix>``; ``bound``: what the
    operator parses it with (out of bound: ``Malformed``); ``admission``: its admission
    check, given the annotation and the "this request writes the command" guard.
    ``flag``: the plugin's flag (None: the plugin fills it, ``from_run``), ``label``: how
    the plugin names it in an error; ``required``: the flag must be given (or
    ``file_flag``, the plugin's other flag that reads the value from a file).
    """

    name: str
    suffix: str
    bound: Bound
    admission: Callable[[str, str], Object] | None
    label: str
    flag: str | None = None
    required: bool = False
    help: str | None = None
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    file_flag: str | None = None
    # The plugin's value when the flag is not given: from the slot it read and the other
    # fields (None: none), so the command is bound to what the person was shown.
    fill: Callable[[Mapping[str, Any], Mapping[str, str]], str | None] | None = None
    # A value over ``bound`` but within this travels by reference (the registry's way for
    # large values): the plugin writes it to a ConfigMap and sends ``<name>_from``
    # (``<configmap>/<key>@sha256:<hex>``) instead; the operator reads it when deciding.
    by_reference: Bound | None = None


class Worded:
    """The annotations every command derives from its ``word`` (``agentrun.dev/<word>-id``,
    ``-actor``, ``-epoch``): a slot's command (:class:`CommandSpec`) or a run's
    (:class:`RunCommandKeys`)."""

    word: str

    @property
    def id(self) -> str:
        return key(self.word, "id")

    @property
    def actor(self) -> str:
        return key(self.word, "actor")

    @property
    def epoch(self) -> str:
        return key(self.word, "epoch")


@dataclass(frozen=True, kw_only=True)
class CommandSpec(Worded):
    """One kind of command (see the module docstring). Its per-name properties keep the
    shape :mod:`.parsing` always had (``id``, ``actor``, ``epoch``, ``override``,
    ``fields``, ``stamped``, ``keys``), now derived from ``word``."""

    kind: CommandKind
    word: str
    help: str
    check: Callable[[Context], Failure | None]
    apply: Callable[[Context], Decision]
    target: Literal["slots"] = "slots"
    takes: tuple[Field, ...] = ()
    owner: Literal["prior", "live"] | None = None
    # Verbs on the slot admission decides for the writer (the authorizer, as for
    # ``override``), each stamped as ``<word>-may-<verb>``: what the check needs to know
    # about who sends it (an approval: ``approve``, ``approve-own``).
    verbs: tuple[str, ...] = ()
    state: tuple[str, str] | None = None  # CEL over the old status, and why not
    admission: tuple[tuple[str, str], ...] = ()  # (CEL, message): further checks
    examples: tuple[str, ...] = ()  # the plugin's help
    shown: int = 0  # its place among the plugin's commands (the registry's is decision order)
    # What the slot's step does around the decision (agentrun.core.slots):
    selects: bool = False  # deciding it needs the LaunchSpecs read (a reassignment pins one)
    claims: bool = False  # accepted, it starts a claim: the run's suspend and maxActive come
    # first, and the claim's Lease is its first write (the ledger entry goes with Active)
    opens: bool = False  # accepted, it lets the next attempt start: claim latency counts from it
    flag_order: tuple[str, ...] = ()  # the plugin's flags, when not in field order
    # The record keys whose commits in the slot's journal deciding it needs (a rerun's step,
    # the outcome of the effect it sends again): read once, before the decision.
    # (Given the slot's status: nothing is read for a command its cheap checks will refuse.)
    journal_keys: Callable[[Command, SlotStatus], tuple[str, ...]] = lambda command, status: ()

    @property
    def override(self) -> str | None:
        """Stamped only where an owner check applies."""
        return key(self.word, "override") if self.owner else None

    @property
    def granted(self) -> Mapping[str, str]:
        """Verb -> the annotation admission stamps with whether the writer holds it."""
        return {verb: key(self.word, f"may-{verb}") for verb in self.verbs}

    @property
    def fields(self) -> Mapping[str, str]:
        """Command field -> annotation."""
        return {f.name: key(self.word, f.suffix) for f in self.takes}

    @property
    def stamped(self) -> tuple[str, ...]:
        """The annotations admission stamps (a person's value for them never stands)."""
        return (self.actor, self.epoch, *((self.override,) if self.override else ()),
                *self.granted.values())

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.id, *self.stamped, *self.fields.values())

    @property
    def flags(self) -> tuple[Field, ...]:
        """The fields a person gives on the plugin's command line, in the order listed."""
        given = tuple(f for f in self.takes if f.flag is not None)
        order = self.flag_order or tuple(f.name for f in given)
        return tuple(sorted(given, key=lambda f: order.index(f.name)))


@dataclass(frozen=True, kw_only=True)
class RunCommandKeys(Worded):
    """The annotations of a command sent to a run (``core.runs.runcommands``: the budget
    raise), derived from its word as a slot command's are; ``override`` is stamped."""

    word: str
    suffixes: tuple[str, ...]  # its fields'

    @property
    def override(self) -> str:
        return key(self.word, "override")

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.id, self.actor, self.epoch, self.override,
                *(key(self.word, s) for s in self.suffixes))


BUDGET = RunCommandKeys(word="budget", suffixes=("add", "add-cost", "reason"))
