"""The ``journal-scale`` scenario's worker: what each attempt's pod runs, and its inputs.

A slot at an agent's scale: :data:`STEPS` steps through ``worker.step`` as an agent calls
it (staged, made durable by group commit, the SDK's default delay), and one artifact of
:data:`ARTIFACT_BYTES` streamed in between (before step :data:`ARTIFACT_AT`). Both sides
know every result in advance: step ``i``'s payload is made from ``i`` and its seeded size
alone (:func:`payload`, :func:`sizes`), the artifact from its block number alone
(:func:`artifact_block`); the very source of these is put into the pod's script
(:func:`script`), with the kill plan.

The sizes (:func:`sizes`, seed :data:`SIZES_SEED`, fixed so plays compare): 60 % of the
steps log-uniform in 100 B-1 KiB (kept inline in their node), 35 % in 1-64 KiB, 4.9 % in
64 KiB-1 MiB, 0.1 % in 1-10 MiB of which :data:`FULL` are exactly 10 MiB, in a seeded
order; the step just before the artifact is 10 MiB too (the RSS baseline: an attempt
streams the artifact right after holding a 10 MiB result). A payload's size is the length
of its canonical JSON (ASCII), the bytes the store receives.

Where an attempt is stopped for the host to SIGKILL it (:func:`plan`, seeded):
- ``in-window``: at step ``at``, its record staged and the ``window`` steps before it too,
  none of them durable: the group commit's flusher is held from step ``at - window`` on
  (before the head advance of the batch it took), so what the successor finds is what was
  durable before, and the staged are done again;
- ``mid-upload``: halfway through the body of part ``at`` of the artifact's multipart
  upload, the parts before it stored, the upload never completed.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import math
import random
from dataclasses import dataclass

from agentrun.api import records as api_records
from agentrun.objectstore import PART_BYTES

STEPS = 20_000
SIZES_SEED = 20261204
KIB, MIB, GIB = 1024, 1024 * 1024, 1024 * 1024 * 1024
TOTAL_BOUND = GIB  # the steps' payloads, at most (with the artifact: under 4 GiB)
# (name, share of STEPS, smallest, largest): log-uniform within each band
BANDS = (("100 B-1 KiB", 0.60, 100, KIB), ("1-64 KiB", 0.35, KIB, 64 * KIB),
         ("64 KiB-1 MiB", 0.049, 64 * KIB, MIB), ("1-10 MiB", 0.001, MIB, 10 * MIB))
FULL = 4  # steps of exactly the largest size, 10 MiB (besides the one before the artifact)
ARTIFACT_KEY = "report"
ARTIFACT_AT = STEPS // 2  # the artifact is streamed before this step
ARTIFACT_BYTES = 2 * GIB
ARTIFACT_PARTS = ARTIFACT_BYTES // PART_BYTES
BLOCK_BYTES = MIB  # the artifact's pattern: block n is sha256("artifact n") repeated
CHAIN_STEPS = 1000  # the pod prints one digest over each 1,000 steps' result digests
IN_WINDOW = "in-window"
MID_UPLOAD = "mid-upload"
WINDOWS = (8, 512)  # a window's staged steps, at least and at most (under a node's 1,024)
MARGIN = 1000  # steps between a window kill and the artifact or the ends


def sizes(seed: int = SIZES_SEED) -> list[int]:
    """Each step's payload size in bytes (module docstring)."""
    rng = random.Random(seed)
    found: list[int] = []
    for _, share, low, high in BANDS:
        found += [max(low, min(high, round(math.exp(rng.uniform(math.log(low),
                                                                 math.log(high))))))
                  for _ in range(round(share * STEPS))]
    found[-FULL:] = [BANDS[-1][3]] * FULL
    rng.shuffle(found)
    found[ARTIFACT_AT - 1] = BANDS[-1][3]
    assert len(found) == STEPS and sum(found) <= TOTAL_BOUND, (len(found), sum(found))
    return found


def bands(found: list[int]) -> str:
    """The distribution's figures: count per band, the 10 MiB steps, the totals."""
    edges = [0, KIB, 64 * KIB, MIB, 10 * MIB]
    per = [sum(low < s <= high for s in found) for low, high in itertools.pairwise(edges)]
    said = ", ".join(f"{name} {n}" for (name, *_), n in zip(BANDS, per, strict=True))
    return (f"{len(found)} steps, sizes seed {SIZES_SEED}: {said} "
            f"({found.count(10 * MIB)} of exactly 10 MiB); {sum(found) / MIB:.0f} MiB of "
            f"results, plus a {ARTIFACT_BYTES // GIB} GiB artifact before step {ARTIFACT_AT}")


def key(i: int) -> str:
    return f"s{i:05d}"


def order() -> list[str]:
    """Every key in the order the pod commits them: what a successor skips is a prefix."""
    keys = [key(i) for i in range(STEPS)]
    return [*keys[:ARTIFACT_AT], ARTIFACT_KEY, *keys[ARTIFACT_AT:]]


def payload(i: int, size: int) -> str:
    """Step ``i``'s result: ASCII whose canonical JSON (quotes added) is ``size`` bytes."""
    tag = f"p{i:05d}."
    return (tag * (size // len(tag) + 1))[:size - 2]


def expected_digest(i: int, size: int) -> str:
    return hashlib.sha256(api_records.canonical(payload(i, size))).hexdigest()


def expected_chains(found: list[int]) -> dict[str, str]:
    """What the pod prints for its results: per :data:`CHAIN_STEPS` steps, the sha256 of
    their result digests (raw, in order)."""
    chains: dict[str, str] = {}
    for start in range(0, STEPS, CHAIN_STEPS):
        chain = hashlib.sha256()
        for i in range(start, start + CHAIN_STEPS):
            chain.update(bytes.fromhex(expected_digest(i, found[i])))
        chains[str(start // CHAIN_STEPS)] = chain.hexdigest()
    return chains


def artifact_block(n: int) -> bytes:
    """The artifact's block ``n`` (:data:`BLOCK_BYTES`)."""
    return hashlib.sha256(b"artifact %d" % n).digest() * (BLOCK_BYTES // 32)


def expected_artifact() -> str:
    """The artifact's sha256 (reads 2 GiB of pattern: a few seconds)."""
    digest = hashlib.sha256()
    for n in range(ARTIFACT_BYTES // BLOCK_BYTES):
        digest.update(artifact_block(n))
    return digest.hexdigest()


@dataclass(frozen=True)
class Kill:
    """Attempt ``attempt`` stops at ``phase``: ``at`` is a step (in-window; the flusher
    held from step ``at - window`` on) or a part number (mid-upload)."""

    attempt: int
    phase: str
    at: int
    window: int = 0


def plan(*, seed: int) -> list[Kill]:
    """In a window before the artifact, mid-upload, in a window after it: three attempts
    killed, the fourth finishes."""
    rng = random.Random(seed)
    return [Kill(attempt=1, phase=IN_WINDOW, at=rng.randrange(MARGIN, ARTIFACT_AT - MARGIN),
                 window=rng.randint(*WINDOWS)),
            Kill(attempt=2, phase=MID_UPLOAD, at=rng.randrange(2, ARTIFACT_PARTS)),
            Kill(attempt=3, phase=IN_WINDOW, at=rng.randrange(ARTIFACT_AT + MARGIN,
                                                               STEPS - MARGIN),
                 window=rng.randint(*WINDOWS))]


BODY = '''
import hashlib, json, re, resource, threading, time
import urllib3
from agentrun.api import records as api_records
from agentrun.worker import _journalcommits as journalcommits
from agentrun.worker._sdk import Worker
STARTED = time.monotonic()
def say(**fields):
    print(json.dumps(fields), flush=True)
def peak():  # the process's RSS high-water mark, bytes (Linux reports KiB)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
KEYS = ["s%05d" % i for i in range(STEPS)]
ORDER = KEYS[:ARTIFACT_AT] + [ARTIFACT_KEY] + KEYS[ARTIFACT_AT:]
at = {"hold": False, "ledger": None, "prefix_s": None, "rss": {}}
STOP = None  # this attempt's kill point, once it knows its number
def report():
    steps = worker.steps
    return dict(sizes=sizes_digest(SIZES), done=len(steps.done),
                done_in_order=steps.done == ORDER[:len(steps.done)], repeated=steps.repeated,
                prefix_s=at["prefix_s"], rss=at["rss"], seconds=time.monotonic() - STARTED)
def block(point, **more):
    at["rss"]["at_kill"] = peak()
    ledger = at["ledger"]
    say(kill_point=point, staged=len(ledger.staged) if ledger else 0, **report(), **more)
    threading.Event().wait()  # the host SIGKILLs the container here
stage = journalcommits.JournalRecords.stage
def patched_stage(self, record):
    at["ledger"] = self
    return stage(self, record)
journalcommits.JournalRecords.stage = patched_stage
advance = journalcommits.JournalRecords._advance
def patched_advance(self, new, usage, **counted):
    if at["hold"]:
        threading.Event().wait()  # held: nothing staged from here on becomes durable
    advance(self, new, usage, **counted)
journalcommits.JournalRecords._advance = patched_advance
urlopen = urllib3.connectionpool.HTTPConnectionPool.urlopen
def patched_urlopen(self, method, url, body=None, **kwargs):
    part = re.search(r"[?&]partNumber=([0-9]+)&", url) if method == "PUT" else None
    if STOP and STOP[0] == "mid-upload" and part and int(part.group(1)) == STOP[1]:
        def halves(data=memoryview(body), number=int(part.group(1))):
            yield bytes(data[:len(data) // 2])  # sent before the next one is asked for
            block("mid-upload", part=number, body=len(data))
        body = halves()
    return urlopen(self, method, url, body=body, **kwargs)
urllib3.connectionpool.HTTPConnectionPool.urlopen = patched_urlopen
class Pattern:
    """The artifact, made as it is read: never whole in memory."""
    def __init__(self):
        self.position, self.cached = 0, (-1, b"")
    def read(self, size):
        chunks = []
        while size > 0 and self.position < ARTIFACT_BYTES:
            n, offset = divmod(self.position, BLOCK_BYTES)
            if self.cached[0] != n:
                self.cached = (n, artifact_block(n))
            take = min(size, BLOCK_BYTES - offset, ARTIFACT_BYTES - self.position)
            chunks.append(self.cached[1][offset:offset + take])
            self.position += take
            size -= take
        return b"".join(chunks)
with Worker.from_env() as worker:  # group commit at the SDK's default delay
    STOP = KILLS.get(worker.context.attempt)
    began = time.monotonic()
    worker.steps  # the recoverable prefix, read once
    at["prefix_s"] = time.monotonic() - began
    chain, chains = hashlib.sha256(), {}
    for i in range(STEPS):
        if i == ARTIFACT_AT:
            at["rss"]["with_10mib"] = peak()
            began = time.monotonic()
            made = worker.artifact(ARTIFACT_KEY, Pattern())
            at["rss"]["artifact"] = peak()
            say(artifact=made.sha256, size=made.size, seconds=time.monotonic() - began,
                skipped=ARTIFACT_KEY in worker.steps.done)
        if STOP and STOP[0] == "in-window" and i == STOP[1] - STOP[2]:
            at["hold"] = True
        value = worker.step(KEYS[i], do=lambda i=i: payload(i, SIZES[i]))
        chain.update(hashlib.sha256(api_records.canonical(value)).digest())
        if (i + 1) % CHAIN_STEPS == 0:
            chains[str(i // CHAIN_STEPS)], chain = chain.hexdigest(), hashlib.sha256()
        if STOP and STOP[0] == "in-window" and i == STOP[1]:
            block("in-window", step=i, window=STOP[2])
    began, read, digest = time.monotonic(), 0, hashlib.sha256()
    for chunk in worker.committed_artifact(ARTIFACT_KEY).open():  # checked at its end
        digest.update(chunk)
        read += len(chunk)
    at["rss"]["artifact_read"] = peak()
    say(finished=True, chains=chains, read_sha256=digest.hexdigest(), read_bytes=read,
        read_seconds=time.monotonic() - began, **report())
'''


def sizes_digest(found: list[int]) -> str:
    """What the pod prints of the sizes it made itself (a list of 20,000 would not fit in
    one argument of its command): the checker compares it with its own."""
    return hashlib.sha256(repr(found).encode()).hexdigest()


def script(*, kills: list[Kill]) -> str:
    """The pod's Python: its constants, the plan, :func:`sizes`, :func:`payload` and
    :func:`artifact_block`, then :data:`BODY`."""
    stops = {k.attempt: (k.phase, k.at, k.window) for k in kills}
    constants = {"STEPS": STEPS, "SIZES_SEED": SIZES_SEED, "TOTAL_BOUND": TOTAL_BOUND,
                 "BANDS": BANDS, "FULL": FULL, "ARTIFACT_AT": ARTIFACT_AT,
                 "ARTIFACT_KEY": ARTIFACT_KEY, "ARTIFACT_BYTES": ARTIFACT_BYTES,
                 "BLOCK_BYTES": BLOCK_BYTES, "CHAIN_STEPS": CHAIN_STEPS, "KILLS": stops}
    return ("import hashlib, math, random\n"
            + "".join(f"{name} = {value!r}\n" for name, value in constants.items())
            + "".join(inspect.getsource(f) for f in (sizes, sizes_digest, payload,
                                                      artifact_block))
            + "SIZES = sizes()\n" + BODY)
