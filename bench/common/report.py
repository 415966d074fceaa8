"""docs/benchmarks.md is written by several commands, each owning one ``## `` section.

A command replaces its own section (from its heading up to the next heading of that level
or above) or appends it, and leaves the others as they were: ``make bench-loop`` no longer
drops the faults' figures, and a figure stays beside the machine, commit and date of the
run that made it (:func:`provenance.machine_commit_date`, each section's first sentence).
"""

from __future__ import annotations

from pathlib import Path

TITLE = "# Benchmarks"
BENCHMARKS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"


def write_section(path: Path, *, heading: str, text: str) -> None:
    """Replace the section that starts with the line ``heading`` (a ``## `` heading) in
    ``path`` with ``text`` (which starts with that heading), or append it; the file gets
    the :data:`TITLE` line when it has none."""
    if not heading.startswith("## ") or not text.startswith(heading):
        raise ValueError(f"a section starts with its '## ' heading, not {text[:40]!r}")
    old = path.read_text() if path.exists() else ""
    lines = old.splitlines()
    if not any(line.startswith("# ") for line in lines):
        lines = [TITLE, "", *lines]
    start = next((i for i, line in enumerate(lines) if line == heading), None)
    if start is None:
        body = "\n".join(lines).rstrip("\n")
        path.write_text(body + "\n\n" + text.rstrip("\n") + "\n")
        return
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].startswith("## ") or lines[i].startswith("# ")), len(lines))
    rest = lines[end:]
    path.write_text("\n".join([*lines[:start], *text.rstrip("\n").splitlines(),
                               *([""] if rest else []), *rest]) + "\n")
