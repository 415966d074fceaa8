"""What ``list`` shows, pure: one row per run, in columns as ``kubectl get`` lays them out.

Columns: NAME, STATE (as ``status`` says it: Succeeded/Failed once done, else Running once
pinned, else Pending), SLOTS (succeeded/total, the run's ``status.done``), AGE, TENANT
(``spec.tenant``, else the run's tenant label; ``-``: the namespace's, unnamed); with
``-A`` a NAMESPACE column first; ``-o wide`` adds WORKFLOW, CLAIM (the claim policy),
CREATOR (as admission stamped it), FORKED-FROM and CONDITIONS (those True).

Rows hold values as they were written; :func:`render` escapes each cell once before it
lays them out (a cell stays one cell on one line), and ``-o json``/``yaml`` print the
rows exact. A watch prints one row per change under the header it printed first, in
that header's widths (:func:`render` with ``widths``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from agentrun.api import names
from agentrun.plugin import terminal, views
from agentrun.plugin.requests import Object

NONE = views.NONE
Columns = Sequence[tuple[str, str]]  # (title, the row's key)
NAMESPACE = ("NAMESPACE", "namespace")
COLUMNS: Columns = (("NAME", "name"), ("STATE", "state"), ("SLOTS", "slots"),
                    ("AGE", "age"), ("TENANT", "tenant"))
WIDE: Columns = (("WORKFLOW", "workflow"), ("CLAIM", "claimPolicy"),
                 ("CREATOR", "creator"), ("FORKED-FROM", "forkedFrom"),
                 ("CONDITIONS", "conditions"))
DELETED = "Deleted"  # a watched run's STATE once it is gone


def columns(*, all_namespaces: bool, wide: bool) -> Columns:
    """The columns ``list`` shows: NAMESPACE first with ``-A``, the wide ones last."""
    return ((NAMESPACE,) if all_namespaces else ()) + tuple(COLUMNS) + (
        tuple(WIDE) if wide else ())


def _part(obj: Object, key: str) -> Object:
    """``obj[key]`` when it is a mapping, else empty (a value of another shape is ignored)."""
    found = obj.get(key)
    return found if isinstance(found, dict) else {}


def _done(status: Object) -> str:
    """succeeded/total: the run's own ``done``, else from its slot counts, else ``-``."""
    if isinstance(status.get("done"), str) and status["done"]:
        return str(status["done"])
    counts = status.get("slots")
    if isinstance(counts, dict) and isinstance(counts.get("total"), int):
        return f"{counts.get('succeeded') or 0}/{counts['total']}"
    return NONE


def row(run: Object, *, now: datetime, deleted: bool = False) -> Object:
    """One run as ``list`` shows it (every column's value, wide ones too)."""
    metadata, spec, status = (_part(run, key) for key in ("metadata", "spec", "status"))
    tenant = spec.get("tenant") or _part(metadata, "labels").get(names.TENANT_LABEL)
    return {
        "namespace": metadata.get("namespace") or NONE,
        "name": metadata.get("name") or "?",
        "state": DELETED if deleted else views.run_state(run),
        "slots": _done(status),
        "age": views.age(metadata.get("creationTimestamp"), now=now),
        "tenant": tenant or NONE,
        "workflow": _part(spec, "workflow").get("name") or NONE,
        "claimPolicy": spec.get("claimPolicy") or "Automatic",
        "creator": status.get("creator") or NONE,
        "forkedFrom": _part(status, "fork").get("run") or NONE,
        "conditions": ",".join(str(c.get("type")) for c in status.get("conditions") or []
                               if isinstance(c, dict) and c.get("status") == "True") or NONE,
    }


def rows(runs: Sequence[Object], *, now: datetime) -> list[Object]:
    """The runs' rows, by namespace then name (as ``kubectl get`` sorts them)."""
    made = [row(run, now=now) for run in runs]
    return sorted(made, key=lambda r: (str(r["namespace"]), str(r["name"])))


def widths(shown: Sequence[Object], cols: Columns) -> list[int]:
    """Each column's width: its widest escaped cell, or its title."""
    cells = [[terminal.escape(str(r.get(key, NONE))) for _, key in cols] for r in shown]
    return [max([len(title), *(len(line[i]) for line in cells)])
            for i, (title, _) in enumerate(cols)]


def render(shown: Sequence[Object], cols: Columns, *, header: bool = True,
           sizes: Sequence[int] | None = None) -> list[str]:
    """The rows as aligned columns (header first unless not ``header``), each cell escaped;
    ``sizes``: the widths to pad to (a watch's header's), else the rows' own. A cell wider
    than its column pushes the rest of its row right, as kubectl's does."""
    sizes = list(sizes) if sizes is not None else widths(shown, cols)
    lines = [[title for title, _ in cols]] if header else []
    lines += [[terminal.escape(str(r.get(key, NONE))) for _, key in cols] for r in shown]
    return ["   ".join(cell.ljust(width) for cell, width in zip(line, sizes, strict=True))
            .rstrip() for line in lines]


def document(shown: Sequence[Object], *, namespace: str | None) -> Object:
    """What ``list -o json|yaml`` prints: the namespace (None: all) and the rows."""
    return {"namespace": namespace, "runs": list(shown)}
