"""The ``journal-matrix`` scenario's worker: what each attempt's pod runs, and its inputs.

Kept apart from the play (``journalmatrix``) because both sides must agree on it exactly:
the checker knows every step's result digest in advance only because the pod makes step
``i``'s payload from ``i`` and the seeded size alone (:func:`payload`, whose very source
is put into the pod's script), and it knows where each attempt stops only because the
kill plan is written into the script (:func:`script`).

The sizes (:func:`sizes`, seed :data:`SIZES_SEED`, fixed so plays compare): of
:data:`STEPS` steps, 90 % log-uniform in 100 B-64 KiB, 9 % in 64 KiB-1 MiB, 1 % in
1-8 MiB of which :data:`FULL` are exactly 8 MiB; in a seeded order. A payload's size is
the length of its canonical JSON (a string of ASCII), the bytes the store receives.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import random
from dataclasses import dataclass

from agentrun.api import bounds
from agentrun.api import records as api_records

STEPS = 2000
SIZES_SEED = 20261203
KIB, MIB = 1024, 1024 * 1024
TOTAL_BOUND = 1024 * MIB  # the payloads' total, at most
# (name, share of STEPS, smallest, largest): log-uniform within each band
BANDS = (("100 B-64 KiB", 0.90, 100, 64 * KIB), ("64 KiB-1 MiB", 0.09, 64 * KIB, MIB),
         ("1-8 MiB", 0.01, MIB, 8 * MIB))
FULL = 4  # steps of exactly the largest size, 8 MiB
# Where an attempt is stopped for the host to SIGKILL it:
AFTER_NODE = "after-node"  # the node object stored, the head not advanced: not committed
AFTER_HEAD = "after-head"  # the head advanced, the step not returned: committed
MID_UPLOAD = "mid-upload"  # half the payload's PUT body sent: neither stored nor committed
IN_STEP = "in-step"  # inside do(), nothing of the step written
PHASES = (AFTER_NODE, AFTER_HEAD, MID_UPLOAD, IN_STEP)


def sizes(seed: int = SIZES_SEED) -> list[int]:
    """Each step's payload size in bytes (module docstring)."""
    rng = random.Random(seed)
    found: list[int] = []
    for _, share, low, high in BANDS:
        found += [max(low, min(high, round(math.exp(rng.uniform(math.log(low),
                                                                 math.log(high))))))
                  for _ in range(round(share * STEPS))]
    found[-FULL:] = [BANDS[-1][3]] * FULL  # the last band's last ones: exactly 8 MiB
    rng.shuffle(found)
    assert len(found) == STEPS and sum(found) <= TOTAL_BOUND, (len(found), sum(found))
    return found


def bands(found: list[int]) -> str:
    """The distribution's figures: count per band (by size, bounds as stated), the
    exact-8-MiB steps, the total."""
    per = [sum(s < 64 * KIB for s in found), sum(64 * KIB <= s <= MIB for s in found),
           sum(s > MIB for s in found)]
    said = ", ".join(f"{name} {n}" for (name, *_), n in zip(BANDS, per, strict=True))
    return (f"{len(found)} steps, sizes seed {SIZES_SEED}: {said} ({found.count(8 * MIB)} "
            f"of exactly 8 MiB); {sum(found)} bytes ({sum(found) / MIB:.1f} MiB), smallest "
            f"{min(found)}")


def key(i: int) -> str:
    return f"s{i:04d}"


def payload(i: int, size: int) -> str:
    """Step ``i``'s result: ASCII whose canonical JSON (quotes added) is ``size`` bytes."""
    tag = f"p{i:04d}."
    return (tag * (size // len(tag) + 1))[:size - 2]


def expected_digest(i: int, size: int) -> str:
    return hashlib.sha256(api_records.canonical(payload(i, size))).hexdigest()


@dataclass(frozen=True)
class Kill:
    """Attempt ``attempt`` stops at step ``step``'s ``phase``; ``named``: one of the three
    named points, else one of the seed's random ones."""

    attempt: int
    step: int
    phase: str
    named: bool

    def committed(self) -> int:
        """Steps committed once this attempt is killed (the slot's, every attempt's)."""
        return self.step + (self.phase == AFTER_HEAD)


def plan(*, seed: int, kills: int, found: list[int]) -> list[Kill]:
    """The three named points and ``kills`` random ones, at distinct steps, in step order,
    one attempt each (attempt n+1 is attempt n's successor). The mid-upload point is at a
    payload of 1 MiB or more (a large PUT in flight); a random mid-upload only where
    there is a PUT at all (over the inline bound)."""
    rng = random.Random(seed)
    upload = rng.choice([i for i, s in enumerate(found) if s >= MIB])
    rest = rng.sample([i for i in range(STEPS) if i != upload], 2 + kills)
    points = [(upload, MID_UPLOAD, True), (rest[0], AFTER_NODE, True),
              (rest[1], AFTER_HEAD, True)]
    for step in rest[2:]:
        phases = PHASES if found[step] > bounds.INLINE_PAYLOAD_BYTES else (
            AFTER_NODE, AFTER_HEAD, IN_STEP)
        points.append((step, rng.choice(phases), False))
    return [Kill(attempt=n, step=step, phase=phase, named=named)
            for n, (step, phase, named) in enumerate(sorted(points), 1)]


DIGESTS_A_LINE = 100  # printed lines stay under the container log's 16 KiB line

BODY = '''
import hashlib, json, threading, time
import urllib3
from agentrun.api import records as api_records
from agentrun.worker import _journal as journal
from agentrun.worker import _journalcommits as journalcommits
from agentrun.worker._sdk import Worker
STARTED = time.monotonic()
def say(**fields):
    print(json.dumps(fields), flush=True)
KEYS = ["s%04d" % i for i in range(STEPS)]
at = {"step": -1, "stop": None, "first_do": None, "prefix_s": None}
def block(point):
    steps = worker.steps
    say(kill_point=point, step=at["step"], done=len(steps.done),
        done_in_order=steps.done == KEYS[:len(steps.done)], repeated=steps.repeated,
        prefix_s=at["prefix_s"], caught_up_s=at["first_do"])
    threading.Event().wait()  # the host SIGKILLs the container here
def armed(phase):
    return at["stop"] == (at["step"], phase)
advance = journalcommits.JournalRecords._advance
def patched_advance(self, new, usage, **counted):
    if armed("after-node"):
        block("after-node")
    advance(self, new, usage, **counted)
    if armed("after-head"):
        block("after-head")
journalcommits.JournalRecords._advance = patched_advance
urlopen = urllib3.connectionpool.HTTPConnectionPool.urlopen
def patched_urlopen(self, method, url, body=None, **kwargs):
    i = at["step"]
    if (armed("mid-upload") and method == "PUT" and isinstance(body, bytes)
            and len(body) == SIZES[i] and url.endswith(hashlib.sha256(body).hexdigest())):
        def halves(data=body):
            yield data[:len(data) // 2]  # sent (sendall) before the next one is asked for
            block("mid-upload")
        body = halves()
    return urlopen(self, method, url, body=body, **kwargs)
urllib3.connectionpool.HTTPConnectionPool.urlopen = patched_urlopen
def make(i):
    if at["first_do"] is None:
        at["first_do"] = time.monotonic() - STARTED
    if armed("in-step"):
        block("in-step")
    return payload(i, SIZES[i])
with Worker.from_env(commit_delay=0) as worker:  # a node per step: kill points by step
    at["stop"] = KILLS.get(worker.context.attempt)
    began = time.monotonic()
    worker.steps  # the recoverable prefix, read once
    at["prefix_s"] = time.monotonic() - began
    digests = {}
    for i in range(STEPS):
        at["step"] = i
        value = worker.step(KEYS[i], do=lambda i=i: make(i))
        digests[i] = hashlib.sha256(api_records.canonical(value)).hexdigest()
    steps = worker.steps
    for start in range(0, STEPS, DIGESTS_A_LINE):
        say(digests={str(i): digests[i] for i in range(start, start + DIGESTS_A_LINE)})
    say(finished=True, done=len(steps.done), done_in_order=steps.done == KEYS[:len(steps.done)],
        repeated=steps.repeated, prefix_s=at["prefix_s"], caught_up_s=at["first_do"],
        seconds=time.monotonic() - STARTED)
'''


def script(*, found: list[int], kills: list[Kill]) -> str:
    """The pod's Python: the sizes, the plan and :func:`payload`, then :data:`BODY`."""
    stops = {k.attempt: (k.step, k.phase) for k in kills}
    return (f"STEPS = {STEPS}\nDIGESTS_A_LINE = {DIGESTS_A_LINE}\nSIZES = {found!r}\n"
            f"KILLS = {stops!r}\n{inspect.getsource(payload)}{BODY}")
