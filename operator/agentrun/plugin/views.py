"""What ``status`` and ``history`` show, pure: objects as the API server returns them in,
plain text (no colour, the layout ASCII) or JSON-ready dicts out.

The views build rows of values as they were written; the renderers (:func:`render_tree`,
:func:`render_history`) escape every value once (:func:`agentrun.plugin.terminal.escaped`)
before laying it out, so a value stays one cell on one line, and ``-o json`` prints the
values exact.

Terms:
- *tree*: a run, its slots, and each slot's attempts (``status.attempts``, the last 10).
- *age*: time since a thing started, as kubectl prints it (``45s``, ``3m``, ``2h``, ``4d``).
- *lease note*: for the attempt that holds its slot now (the slot's active or pending
  worker), whether its Lease was renewed and how long ago; the plugin shows it only when
  the caller may read Leases (``leases`` maps a Lease's name to the object).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from agentrun.api import names
from agentrun.plugin import terminal

Object = dict[str, Any]
NONE = "-"


def parse_time(text: object) -> datetime | None:
    """An RFC 3339 time as the API server writes it, or None when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def age(since: object, *, now: datetime) -> str:
    """kubectl's short age of ``since`` at ``now`` (``-`` when unknown)."""
    start = parse_time(since) if not isinstance(since, datetime) else since
    if start is None:
        return NONE
    seconds = max(0, int((now - start).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _status(obj: Object) -> Object:
    found = obj.get("status")
    return found if isinstance(found, dict) else {}


def _name(obj: Object) -> str:
    return str((obj.get("metadata") or {}).get("name") or "?")


def _true_conditions(status: Object) -> list[str]:
    return [str(c.get("type")) for c in status.get("conditions") or []
            if isinstance(c, dict) and c.get("status") == "True"]


def run_state(run: Object) -> str:
    """``Succeeded``/``Failed`` once done, else ``Pending`` until pinned, else ``Running``."""
    status = _status(run)
    conditions = _true_conditions(status)
    for done in ("Succeeded", "Failed"):
        if done in conditions:
            return done
    return "Running" if "Pinned" in conditions else "Pending"


def lease_note(lease: Object | None, *, now: datetime) -> str | None:
    """``renewed 3s ago by <holder>``, ``released 1s ago by <holder>`` (its worker's last
    write, as it ended), ``not renewed yet``, or None (no Lease readable)."""
    if lease is None:
        return None
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    by = f" by {holder}" if holder else ""
    released = ((lease.get("metadata") or {}).get("annotations") or {}).get(
        names.RELEASED_ANNOTATION)
    if released:
        return f"released {age(released, now=now)} ago{by}"
    renewed = spec.get("renewTime")
    if not renewed:
        return "not renewed yet"
    return f"renewed {age(renewed, now=now)} ago{by}"


def attempt_row(attempt: Object, *, now: datetime, live: bool,
                leases: Mapping[str, Object]) -> Object:
    """One attempt as the tree and ``-o json`` show it."""
    ended = parse_time(attempt.get("endedAt"))
    started = parse_time(attempt.get("startedAt"))
    outcome = attempt.get("outcome") or ("running" if live else NONE)
    row: Object = {
        "number": attempt.get("number"), "outcome": outcome,
        "class": attempt.get("workerClass") or NONE,
        "launchSpec": attempt.get("launchSpec") or NONE,
        "pod": attempt.get("pod") or NONE, "lease": attempt.get("lease") or NONE,
        "owner": attempt.get("ownerActor") or NONE,
        "age": age(started, now=now),
        "ran": age(started, now=ended) if started and ended else None,
        "reason": attempt.get("reason") or None,
    }
    if live:
        row["leaseNote"] = lease_note(leases.get(str(attempt.get("lease"))), now=now)
    return row


def slot_row(slot: Object, *, now: datetime, leases: Mapping[str, Object]) -> Object:
    status = _status(slot)
    spec = slot.get("spec") or {}
    launch = status.get("launchSpec") or {}
    live = {status.get("activeWorker"), status.get("pendingWorker")} - {None}
    attempts = [a for a in status.get("attempts") or [] if isinstance(a, dict)]
    return {
        "name": _name(slot), "node": spec.get("node") or NONE,
        "state": status.get("state") or "Pending",
        "class": status.get("workerClass") or spec.get("workerClass") or NONE,
        "launchSpec": (f"{launch['name']}@{launch.get('generation', '?')}"
                       if launch.get("name") else NONE),
        "conditions": _true_conditions(status),
        "reruns": status.get("reruns") if isinstance(status.get("reruns"), int) else 0,
        "waiting": sum(1 for q in status.get("questions") or []  # for a person's answer
                       if isinstance(q, dict) and q.get("state") == "Pending"),
        "attempts": [attempt_row(a, now=now, live=a.get("pod") in live and not a.get("outcome"),
                                 leases=leases) for a in attempts],
    }


def tree(run: Object, slots: Iterable[Object], *, now: datetime,
         leases: Mapping[str, Object] | None = None) -> Object:
    """The run, its slots (by node) and their attempts: what ``status -o json`` prints."""
    status = _status(run)
    rows = [slot_row(s, now=now, leases=leases or {}) for s in slots]
    return {
        "run": _name(run), "namespace": (run.get("metadata") or {}).get("namespace"),
        "state": run_state(run), "conditions": _true_conditions(status),
        "claimPolicy": (run.get("spec") or {}).get("claimPolicy") or "Automatic",
        "age": age((run.get("metadata") or {}).get("creationTimestamp"), now=now),
        **({"fork": _fork(status["fork"])} if isinstance(status.get("fork"), dict) else {}),
        **({"usage": status["usage"]} if isinstance(status.get("usage"), dict) else {}),
        **({"budget": status["budget"]} if isinstance(status.get("budget"), dict) else {}),
        "slots": sorted(rows, key=lambda r: (str(r["node"]), str(r["name"]))),
    }


def spent(usage: Object | None) -> str:
    """A usage sum as a person reads it: ``1200 tokens (1000 in, 200 out), 0.006 USD``."""
    if not usage:
        return "none"
    given, made = int(usage.get("inputTokens") or 0), int(usage.get("outputTokens") or 0)
    cost = int(usage.get("costMicros") or 0) / 1e6
    return (f"{given + made} tokens ({given} in, {made} out), {cost:g} "
            f"{usage.get('currency') or ''}").rstrip()


def limits(budget: Object) -> str:
    """A budget as a person reads it: ``5000 tokens, 2.5 USD (raised 1 time)``."""
    parts = [f"{budget['tokens']} tokens" if budget.get("tokens") is not None else None,
             f"{int(budget['costMicros']) / 1e6:g} {budget.get('currency') or ''}".rstrip()
             if budget.get("costMicros") is not None else None]
    raised = int(budget.get("raises") or 0)
    return ", ".join(p for p in parts if p) + (f" (raised {raised} time"
                                               f"{'' if raised == 1 else 's'})" if raised else "")


def _fork(fork: Object) -> Object:
    """A fork's provenance, as ``status.fork`` holds it (the inherited counts left out)."""
    return {key: fork.get(key) for key in ("run", "uid", "node", "step", "actor", "reason")}


def _attempt_line(row: Object) -> str:
    parts = [f"attempt {row['number']}", str(row["outcome"]), f"class {row['class']}",
             f"spec {row['launchSpec']}", f"pod {row['pod']}", f"lease {row['lease']}"]
    if row.get("leaseNote"):
        parts.append(f"({row['leaseNote']})")
    if row["owner"] != NONE:
        parts.append(f"owner {row['owner']}")
    parts.append(f"age {row['age']}" + (f" (ran {row['ran']})" if row.get("ran") else ""))
    return "  ".join(parts)


def render_tree(view: Object) -> list[str]:
    """The tree as text lines: one per run, slot and attempt, ASCII branches."""
    view = terminal.escaped(view)
    conditions = ",".join(view["conditions"]) or NONE
    lines = [f"AgentRun {view['namespace']}/{view['run']}  {view['state']}  "
             f"claimPolicy {view['claimPolicy']}  conditions {conditions}  age {view['age']}"]
    if "fork" in view:
        fork = view["fork"]
        at = f" at {fork['node']}:{fork['step']}" if fork.get("node") else ""
        lines.append(f"   forked from {fork['run']} (uid {fork['uid']}){at} by "
                     f"{fork.get('actor') or NONE}: {fork['reason']}")
    if "usage" in view or "budget" in view:
        lines.append(f"   model usage {spent(view.get('usage'))}"
                     + (f"  budget {limits(view['budget'])}" if "budget" in view else ""))
    slots: Sequence[Object] = view["slots"]
    if not slots:
        lines.append("`- (no slots yet)")
    for i, slot in enumerate(slots):
        last_slot = i == len(slots) - 1
        held = [c for c in slot["conditions"] if c != "LaunchSpecSelected"]
        lines.append(f"{'`-' if last_slot else '|-'} slot {slot['name']}  node {slot['node']}"
                     f"  {slot['state']}  class {slot['class']}  spec {slot['launchSpec']}"
                     + (f"  [{','.join(held)}]" if held else "")
                     + (f"  reruns {slot['reruns']}" if slot.get("reruns") else "")
                     + (f"  {slot['waiting']} question(s) waiting" if slot.get("waiting")
                        else ""))
        stem = "   " if last_slot else "|  "
        attempts: Sequence[Object] = slot["attempts"]
        if not attempts:
            lines.append(f"{stem}`- (no attempts yet)")
        for j, attempt in enumerate(attempts):
            branch = "`-" if j == len(attempts) - 1 else "|-"
            lines.append(f"{stem}{branch} {_attempt_line(attempt)}")
            if attempt.get("reason"):
                pad = "   " if j == len(attempts) - 1 else "|  "
                lines.append(f"{stem}{pad}   reason: {attempt['reason']}")
    return lines


def _commits(attempt: Object) -> str:
    """An attempt's commits, with the bytes they hold when its Lease says."""
    size = attempt.get("bytes")
    return (f"{attempt.get('commits')}" if size is None
            else f"{attempt.get('commits')} ({size} bytes)")


def _journal(found: Object | None) -> Object | None:
    """The journal part of a history: the history API's entries (newest first), or why
    they cannot be shown; None when the run keeps no journal (its records on Leases)."""
    if found is None:
        return None
    if "error" in found:
        return {"error": str(found["error"])}
    if found.get("journal") is None:
        return None
    where = found["journal"]
    if where.get("deleted"):
        return {"error": f"deleted: {where['deleted']}"}
    return {"store": f"s3://{where.get('bucket')}/{where.get('prefix')}",
            "commits": {str(a.get("attempt")): _commits(a)
                        for a in found.get("attempts") or [] if isinstance(a, dict)},
            "entries": [{"attempt": e.get("attempt"), "seq": e.get("seq"),
                         "kind": e.get("kind"), "key": e.get("key"), "size": e.get("size"),
                         "stored": e.get("stored")}
                        for e in found.get("entries") or [] if isinstance(e, dict)],
            "truncated": bool(found.get("truncated"))}


def history(slot: Object, *, now: datetime, journal: Object | None = None) -> Object:
    """A slot's attempts and command ledger, oldest first, and (``journal``: what the
    history API answered) its journal, newest first: what ``history -o json`` prints."""
    status = _status(slot)
    attempts = [{
        "number": a.get("number"), "outcome": a.get("outcome") or NONE,
        "class": a.get("workerClass") or NONE, "launchSpec": a.get("launchSpec") or NONE,
        "owner": a.get("ownerActor") or NONE, "started": a.get("startedAt") or NONE,
        "ended": a.get("endedAt") or NONE, "reason": a.get("reason") or "",
    } for a in status.get("attempts") or [] if isinstance(a, dict)]
    commands = [{
        "time": c.get("time") or NONE, "kind": c.get("kind") or NONE,
        "requestId": c.get("requestId") or NONE, "actor": c.get("actor") or NONE,
        "outcome": c.get("outcome") or NONE, "predicate": c.get("predicate") or NONE,
        "class": c.get("workerClass") or NONE, "override": bool(c.get("override")),
        "reason": c.get("reason") or "", "message": c.get("message") or "",
    } for c in status.get("commands") or [] if isinstance(c, dict)]
    asked = [{
        "key": q.get("key") or NONE, "attempt": q.get("attempt"),
        "state": q.get("state") or NONE, "digest": q.get("digest") or NONE,
        "deadline": q.get("deadline") or NONE,
        "answer": q.get("value") or (f"(by reference: {q['valueFrom'].split('@')[0]})"
                                     if q.get("valueFrom") else NONE),
        "by": q.get("actor") or NONE, "question": q.get("question") or "",
        "schema": q.get("jsonSchema") or NONE,
        # An approval: how many approved of how many needed (approve or deny it, not answer).
        "approvals": (f"{len(q.get('approvedBy') or [])}/{q['approvers']}"
                      if q.get("approvers") else NONE),
    } for q in status.get("questions") or [] if isinstance(q, dict)]
    return {"slot": _name(slot), "state": status.get("state") or "Pending",
            "run": (slot.get("spec") or {}).get("run"), "age": age(
                (slot.get("metadata") or {}).get("creationTimestamp"), now=now),
            "attempts": attempts, "commands": commands, "questions": asked,
            "journal": _journal(journal)}


def table(rows: Sequence[Mapping[str, object]], columns: Sequence[tuple[str, str]]) -> list[str]:
    """Rows as aligned columns (header first), like ``kubectl get``."""
    cells = [[title for title, _ in columns]]
    cells += [[str(row.get(key, NONE)) for _, key in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
            .rstrip() for line in cells]


ATTEMPT_COLUMNS = (("ATTEMPT", "number"), ("OUTCOME", "outcome"), ("CLASS", "class"),
                   ("SPEC", "launchSpec"), ("OWNER", "owner"), ("STARTED", "started"),
                   ("ENDED", "ended"), ("REASON", "reason"))
COMMAND_COLUMNS = (("TIME", "time"), ("KIND", "kind"), ("REQUEST", "requestId"),
                   ("ACTOR", "actor"), ("OUTCOME", "outcome"), ("PREDICATE", "predicate"),
                   ("CLASS", "class"), ("REASON", "reason"), ("MESSAGE", "message"))


QUESTION_COLUMNS = (("KEY", "key"), ("ATTEMPT", "attempt"), ("STATE", "state"),
                    ("DIGEST", "digest"), ("DEADLINE", "deadline"), ("ANSWER", "answer"),
                    ("BY", "by"), ("APPROVED", "approvals"), ("QUESTION", "question"))
JOURNAL_COLUMNS = (("ATTEMPT", "attempt"), ("SEQ", "seq"), ("KIND", "kind"), ("KEY", "key"),
                   ("BYTES", "size"), ("STORED", "stored"))


def render_history(view: Object) -> list[str]:
    """The history as text lines: a heading, then the attempts and the ledger as tables."""
    view = terminal.escaped(view)
    lines = [f"Slot {view['slot']}  run {view['run']}  {view['state']}  age {view['age']}",
             "", "Attempts:"]
    lines += table(view["attempts"], ATTEMPT_COLUMNS) if view["attempts"] else ["  (none)"]
    lines += ["", "Commands:"]
    lines += table(view["commands"], COMMAND_COLUMNS) if view["commands"] else ["  (none)"]
    if view["questions"]:  # the schema is in -o json (and status.questions)
        lines += ["", "Questions (answer: kubectl agentrun answer <slot> --key K --digest D "
                  "--value JSON --reason R; an approval, APPROVED k/N: kubectl agentrun "
                  "approve|deny <slot> --key K --digest D --reason R):",
                  *table(view["questions"], QUESTION_COLUMNS)]
    journal = view.get("journal")
    if journal is None:
        return lines
    if "error" in journal:
        return [*lines, "", f"Journal: not shown: {journal['error']}"]
    commits = ", ".join(f"attempt {k}: {v}" for k, v in journal["commits"].items())
    lines += ["", f"Journal {journal['store']} (commits: {commits or 'none'}), newest first:"]
    lines += (table(journal["entries"], JOURNAL_COLUMNS) if journal["entries"]
              else ["  (no entries)"])
    if journal["truncated"]:
        lines.append("  ... older entries not shown (--limit)")
    return lines


def record(found: Object, *, approval: str | None = None) -> Object:
    """One record's payload from the history API: its exact bytes (as text when they are
    UTF-8), and whether their sha256 is the digest the journal names and, for an
    effect's payload, the digest of the approval waiting under its key (``approval``):
    ``verified`` only when both match, so an approver never approves other bytes than
    they read."""
    data = base64.b64decode(str(found.get("data") or ""), validate=False)
    digest = str(found.get("digest") or "")
    actual = hashlib.sha256(data).hexdigest()
    journal, waiting = actual == digest, approval in (None, actual)
    return {"key": found.get("key"), "attempt": found.get("attempt"),
            "kind": found.get("kind"), "digest": digest, "size": len(data),
            "sha256": actual, "approvalDigest": approval, "journalMatches": journal,
            "approvalMatches": waiting, "verified": journal and waiting,
            "text": data.decode("utf-8", errors="replace")}


def render_record(view: Object) -> list[str]:
    said = [f"record {view['key']} (attempt {view['attempt']}, {view['kind']}, "
            f"{view['size']} bytes, sha256 {view['sha256']}): "
            + ("its bytes match the journal's digest" if view["journalMatches"] else
               f"ITS BYTES DO NOT MATCH the journal's digest {view['digest']}")]
    if view["approvalDigest"] is not None:
        said.append("they are the payload of the approval waiting" if view["approvalMatches"]
                    else f"THE APPROVAL WAITING IS FOR OTHER BYTES: {view['approvalDigest']} "
                         "(do not approve it: the worker asks approval for something else "
                         "than it shows)")
    return ["; ".join(said) + ":", view["text"]]
