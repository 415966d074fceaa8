"""Every registered command is whole: a module, a round trip, its policies, its help.

The registry (``agentrun.core.commands.registry``) is the one list the guard, the parser,
the admission and stamping policies and the plugin iterate; these tests iterate it too,
so a command added there is checked here without a line of this file changing, except
a sample value for a field no command took before (``tests/support/commandsamples.py``).
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

import pytest

from agentrun.api import names
from agentrun.api.slots import CommandKind
from agentrun.core.commands import guards, kinds, ledger, parsing, registry
from agentrun.core.commands.spec import CommandSpec
from agentrun.core.policies import admission, validating
from agentrun.plugin import cli, requests
from tests.support.commandsamples import SAMPLES

RID = "0123456789abcdef0123456789abcdef"
COMMANDS = pytest.mark.parametrize("spec", registry.COMMANDS, ids=lambda s: s.word)


def test_every_module_of_a_command_is_registered_once() -> None:
    modules = [importlib.import_module(f"{kinds.__name__}.{info.name}")
               for info in pkgutil.iter_modules(kinds.__path__)]
    assert sorted(m.SPEC.word for m in modules) == sorted(s.word for s in registry.COMMANDS)
    assert len(registry.BY_KIND) == len(registry.BY_WORD) == len(registry.COMMANDS)
    assert set(registry.BY_KIND) == set(CommandKind) - {CommandKind.BUDGET}  # a run's


def test_the_parser_decides_in_the_registrys_order() -> None:
    assert tuple(spec.kind for spec in registry.COMMANDS) == parsing.ORDER
    assert parsing.SHAPES is registry.COMMANDS


@COMMANDS
def test_a_commands_annotations_are_derived_from_its_word(spec: CommandSpec) -> None:
    prefix = f"{names.GROUP}/{spec.word}-"
    assert all(key.startswith(prefix) for key in spec.keys)
    assert len(set(spec.keys)) == len(spec.keys)
    assert (spec.override is not None) == (spec.owner is not None)
    # Where api/names.py (and docs/design/names.md) name one of its annotations, it is this one.
    constant = spec.word.upper().replace("-", "_") + "_"
    named = {name: value for name, value in vars(names).items()
             if name.startswith(constant) and isinstance(value, str)}
    assert named.pop(f"{constant}PREFIX", prefix) == prefix
    assert set(named.values()) <= set(spec.keys), set(named.values()) - set(spec.keys)


@COMMANDS
def test_a_commands_fields_are_the_commands_and_shared_whole(spec: CommandSpec) -> None:
    attributes = {f.name for f in dataclasses.fields(ledger.Command)}
    for field in spec.takes:
        assert field.name in attributes
        assert registry.FIELDS[field.name] is field
        assert field.name in SAMPLES, f"add a sample value of {field.name} to this test"
        assert parsing.BOUNDS[field.name] == field.bound


@COMMANDS
def test_what_the_plugin_writes_the_parser_reads_back(spec: CommandSpec) -> None:
    sent = {field.name: SAMPLES[field.name] for field in spec.takes}
    written = requests.written(requests.Request(kind=spec.kind, request_id=RID, fields=sent))
    stamped = {spec.actor: "alice", spec.epoch: "e1",
               **({spec.override: "true"} if spec.override else {}),
               **dict.fromkeys(spec.granted.values(), "true")}
    pending = parsing.pending({**written, **stamped})
    assert pending is not None
    assert (pending.malformed, pending.stamped, pending.epoch) == (None, True, "e1")
    command = pending.command
    assert (command.kind, command.request_id, command.actor) == (spec.kind, RID, "alice")
    assert command.override is (spec.override is not None)
    assert command.granted == frozenset(spec.verbs)
    assert {name: getattr(command, name) for name in sent} == sent
    assert set(pending.keys) == set(written) | set(stamped) == set(spec.keys)


@COMMANDS
def test_a_command_is_decided_by_its_own_spec(spec: CommandSpec) -> None:
    assert guards.decide.__module__ == guards.__name__
    assert spec.check.__module__ == spec.apply.__module__
    assert spec.check.__module__.startswith(f"{kinds.__name__}.")
    assert registry.BY_KIND[spec.kind] is spec


@COMMANDS
def test_every_command_has_its_admission_checks_and_stamping(spec: CommandSpec) -> None:
    policy = validating.slot_commands()[0]["spec"]
    variable = validating._variable(spec)
    assert {"name": variable, "expression": validating.touched(spec)} in policy["variables"]
    mine = [c for c in policy["validations"] if f"variables.{variable} ||" in c["expression"]]
    fields = [f for f in spec.takes if f.admission is not None]
    expected = (1 + len(fields) + (spec.state is not None) + len(spec.admission)
                + (spec.owner is not None))
    assert len(mine) == expected
    end = len(mine) - (spec.owner is not None)  # the further checks come before the owner's
    further = [(c["expression"], c["message"]) for c in mine[end - len(spec.admission):end]]
    assert further == [(f"!variables.{variable} || {expression}", message)
                       for expression, message in spec.admission]
    mutations = admission.stamp_policy_spec()["mutations"]
    stamping = [m["jsonPatch"]["expression"] for m in mutations
                if f"(('{spec.id}' in variables.new)" in m["jsonPatch"]["expression"]]
    assert len(stamping) == 1
    for annotation in spec.stamped:
        assert admission.escaped(annotation) in stamping[0]
    people_may_change = validating.slot_changes()[0]["spec"]["validations"][-1]["expression"]
    assert all(f"'{key}'" in people_may_change for key in spec.keys)


@COMMANDS
def test_every_command_has_its_plugin_command_and_help(
        spec: CommandSpec, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.KINDS[spec.word] is spec.kind
    with pytest.raises(SystemExit):
        cli.parser().parse_args([spec.word, "--help"])
    shown = capsys.readouterr().out
    assert spec.help.split()[0] in shown
    for field in spec.flags:
        assert field.flag is not None and field.flag in shown
    for example in spec.examples:
        assert example in cli.EXAMPLES
    argv = [spec.word, "slot-a"]
    for field in spec.flags:
        argv += [field.flag or "", SAMPLES[field.name]]
    args = cli.parser().parse_args(argv)
    # Every field but one the plugin sends by reference (it writes that one itself).
    assert cli.fields(args, run="study") == {f.name: SAMPLES[f.name] for f in spec.takes
                                             if f.flag or f.name == "run"}
