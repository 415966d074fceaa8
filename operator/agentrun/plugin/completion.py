"""``kubectl_complete-agentrun``: what ``kubectl agentrun <TAB>`` completes to.

The protocol (kubectl 1.26 and later, its ``pluginCompletion``): for a plugin
``kubectl-agentrun`` kubectl looks on $PATH for ``kubectl_complete-agentrun`` and runs
it with the plugin's words typed so far, the last one the word being completed (empty: a
new word), in kubectl's environment (so $KUBECONFIG holds). It prints cobra's
``__complete`` answer: the candidates one a line (``candidate<TAB>description``), then a
last line ``:<directive>``, a bit set: 4 (``ShellCompDirectiveNoFileComp``) where no
file name fits, 0 (the shell's default, file names) after ``--kubeconfig`` and
``--file``.

Candidates come from the plugin's own parser (:func:`agentrun.plugin.cli.parser`, built
from the command registry, so a new command completes with no change here): the
subcommands, a subcommand's flags, a flag's choices; the contexts of the kubeconfig after
``--context``; and, as a RUN or SLOT argument or after ``-n``, names from the API server
(one LIST of runs, slots or namespaces, in the namespace the words typed so far name, with
the person's kubeconfig; :data:`TIMEOUT`). Any error there (no kubeconfig, no access, no
answer) gives no names, only the directive: completion never fails loudly, and nothing is
written on stderr, which kubectl passes to the terminal mid-line. Candidates are
filtered by the word's prefix; names are printed only when they are names (a DNS
subdomain), so nothing from the API server reaches the shell that is not.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from agentrun import rest
from agentrun.api import bounds
from agentrun.plugin import cli, client, kubeconfigs

NO_FILES, FILES = 4, 0  # cobra's ShellCompDirectiveNoFileComp, ShellCompDirectiveDefault
TIMEOUT = rest.Timeout(connect=2.0, read=5.0)  # a person waits at the prompt
MOST_NAMES = 500  # one page of a LIST
DESCRIPTION_CHARS = 80
TARGETS = {"RUN": "agentruns", "SLOT": "slots"}  # a positional's metavar: what it names


@dataclass(kw_only=True)
class Typed:
    """The words before the one being completed, as the plugin's parser would read them."""

    parser: argparse.ArgumentParser
    command: str | None = None
    positionals: list[str] = field(default_factory=list)
    given: dict[str, str] = field(default_factory=dict)  # a value flag's dest: its value
    pending: argparse.Action | None = None  # the flag whose value the word is


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser,
                                                                     str]]:
    """The parser's subcommands: name, (its parser, its help)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return {name: (made, helps.get(name, "")) for name, made in action.choices.items()}
    return {}


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {option: action for action in parser._actions for option in action.option_strings}


def scan(words: Sequence[str]) -> Typed:
    """What ``words`` (all typed before the word being completed) say so far."""
    top = cli.parser()
    subcommands = _subcommands(top)
    typed = Typed(parser=top)
    for word in words:
        if typed.pending is not None:
            typed.given[typed.pending.dest] = word
            typed.pending = None
        elif word.startswith("-") and word != "-":
            name, equals, value = word.partition("=")
            action = _options(typed.parser).get(name)
            if action is not None and equals:
                typed.given[action.dest] = value
            elif action is not None and action.nargs != 0:  # a flag that takes a value
                typed.pending = action
        elif typed.command is None and word in subcommands:
            typed.command, typed.parser = word, subcommands[word][0]
        else:
            typed.positionals.append(word)
    return typed


def _described(name: str, text: str) -> str:
    said = " ".join(text.split())  # one line, no tab
    if len(said) > DESCRIPTION_CHARS:
        said = said[:DESCRIPTION_CHARS - 3].rstrip() + "..."
    return f"{name}\t{said}" if said else name


def _names(typed: Typed, plural: str) -> list[str]:
    """The names of ``plural`` (agentruns, slots; namespaces) in the namespace typed so
    far: one LIST as the person; none on any error."""
    namespace = typed.given.get("namespace")
    if namespace is not None and not bounds.DNS_SUBDOMAIN.fullmatch(namespace):
        return []
    try:
        conn = client.connect(kubeconfig=typed.given.get("kubeconfig"),
                              context=typed.given.get("context"), namespace=namespace,
                              timeout=TIMEOUT)
        path = ("/api/v1/namespaces" if plural == "namespaces"
                else client.resource_path(plural, conn.namespace))
        listed = conn.rest.request("GET", path, query={"limit": str(MOST_NAMES)})
    except Exception:  # completion offers what it can: no names, never an error
        return []
    found = [str((item.get("metadata") or {}).get("name") or "")
             for item in listed.get("items") or [] if isinstance(item, dict)]
    return sorted(name for name in found if bounds.DNS_SUBDOMAIN.fullmatch(name))


CONTEXT_CHARS = 253  # longer context names are not offered


def _values(typed: Typed, action: argparse.Action) -> tuple[list[str], int]:
    """The values a flag takes, and the directive."""
    if action.dest == "kubeconfig" or action.metavar == "FILE":
        return [], FILES
    if action.choices is not None:
        return [str(choice) for choice in action.choices], NO_FILES
    if action.dest == "context":  # a name kubectl could not take (a tab, a newline) is left out
        found = kubeconfigs.context_names(kubeconfig=typed.given.get("kubeconfig"),
                                          environ=os.environ)
        return [name for name in found if name.isprintable() and "\t" not in name
                and len(name) <= CONTEXT_CHARS], NO_FILES
    if action.dest in ("namespace", "namespaces"):  # ui's -n is repeatable
        return _names(typed, "namespaces"), NO_FILES
    return [], NO_FILES


def complete(words: Sequence[str]) -> tuple[list[str], int]:
    """The candidates for the last of ``words`` (the word being completed), and the
    directive, for the plugin's words ``words`` (kubectl's arguments to this command)."""
    word = words[-1] if words else ""
    typed = scan(words[:-1])
    if typed.pending is not None:
        found, directive = _values(typed, typed.pending)
        return [v for v in found if v.startswith(word)], directive
    if word.startswith("-"):
        name, equals, partial = word.partition("=")
        options = _options(typed.parser)
        if equals and name in options:  # --output=y<TAB>
            found, directive = _values(typed, options[name])
            return [f"{name}={v}" for v in found if v.startswith(partial)], directive
        return [_described(option, action.help or "") for option, action in options.items()
                if option.startswith(word) and action.help != argparse.SUPPRESS], NO_FILES
    if typed.command is None:
        return [_described(name, said) for name, (_, said) in
                _subcommands(typed.parser).items() if name.startswith(word)], NO_FILES
    wanted = [action for action in typed.parser._actions
              if not action.option_strings and action.dest == "name"]
    if wanted and not typed.positionals and str(wanted[0].metavar) in TARGETS:
        names = _names(typed, TARGETS[str(wanted[0].metavar)])
        return [name for name in names if name.startswith(word)], NO_FILES
    return [], NO_FILES


def main(argv: list[str] | None = None) -> int:
    """Print the completions of ``argv`` (else the command's arguments) as cobra does."""
    candidates, directive = complete(sys.argv[1:] if argv is None else argv)
    sys.stdout.write("".join(f"{line}\n" for line in candidates) + f":{directive}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
