"""A rerun's cuts in the worker's prefix: the real journal reader over stored nodes.

The nodes are made and read with the journal's own code (``_journal.node``, ``chain``);
only the store's bytes are a dict. What is shown: the cut on the reader's own Lease takes
out what earlier attempts committed from its start, in commit order (within a node too),
up to its last attempt; an effect's records and a Lease's own are kept; a later attempt's
records are not touched; a cut that does not parse stops the read; and the operator's
reading of where a step was committed (``journalhistory.positions``) names the same
positions the cut is made of.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentrun.api import cuts
from agentrun.controller import journalhistory
from agentrun.objectstore import ObjectStore
from agentrun.worker import _journal as journal
from agentrun.worker import _prefix as prefix
from agentrun.worker import _records as records
from tests.unit.worker.test_journal import lease

Kind = records.Kind


class Stored(journal.Journal):
    """The journal's reader over bytes kept in a dict (the store's side is tested against
    a real S3 server elsewhere)."""

    def __init__(self) -> None:
        super().__init__(objects=ObjectStore(endpoint="http://127.0.0.1:9", bucket="unused",
                                             credentials=lambda: None), prefix="p", slot="s")
        self.objects_by_key: dict[str, bytes] = {}
        self.heads: dict[int, journal.Head] = {}

    def get(self, key: str, *, size: int) -> bytes:
        return self.objects_by_key[key]

    def commit(self, attempt: int, *entries: records.Record) -> None:
        head = self.heads.get(attempt)
        data = journal.node(attempt=attempt, seq=head.seq + 1 if head else 1,
                            prev=head.digest if head else None, entries=list(entries))
        digest = records.digest(data)
        self.objects_by_key[f"{self.attempt_key(attempt)}/{digest}"] = data
        self.heads[attempt] = journal.Head(seq=head.seq + 1 if head else 1, digest=digest)


def step(key: str, attempt: int, value: Any = None) -> records.Record:
    return records.make(key=key, kind=Kind.STEP_RESULT, attempt=attempt,
                        payload=value if value is not None else key)


def effect(key: str, attempt: int, kind: records.Kind) -> records.Record:
    return records.make(key=key, kind=kind, attempt=attempt, payload={"result": "posted"})


def leases(store: Stored, *, reader: int, cut: str | None) -> list[dict[str, Any]]:
    found = [lease(n, head=h.text()) for n, h in sorted(store.heads.items()) if n < reader]
    own = lease(reader, head=None, sealed=False)
    if cut is not None:
        own["metadata"]["annotations"][cuts.ANNOTATION] = cut
    return [*found, own]


def two_attempts() -> Stored:
    store = Stored()
    store.commit(1, step("gather", 1), step("outline", 1))
    store.commit(1, step("draft", 1), effect("publish.intent", 1, Kind.EFFECT_INTENT),
                 effect("publish.outcome", 1, Kind.EFFECT_OUTCOME), step("polish", 1))
    store.commit(2, step("review", 2))
    return store


def test_the_prefix_stops_before_the_step_rerun_from_and_keeps_effects() -> None:
    store = two_attempts()
    found = prefix.prefix(leases=leases(store, reader=3, cut="1.2.0-2"), attempt=3,
                          journal=store)
    assert sorted(found.committed) == ["gather", "outline", "publish.intent",
                                       "publish.outcome"]
    whole = prefix.prefix(leases=leases(store, reader=3, cut=None), attempt=3, journal=store)
    assert sorted(whole.committed) == ["draft", "gather", "outline", "polish",
                                       "publish.intent", "publish.outcome", "review"]


def test_a_cut_within_a_node_and_the_attempts_after_it() -> None:
    store = two_attempts()
    store.commit(3, step("draft", 3, "second draft"), step("polish", 3))
    # reran from "polish" (attempt 1's, commit 2, place 3), through attempt 2; attempt 3 ran after
    cut = "1.2.3-2"
    found = prefix.prefix(leases=leases(store, reader=4, cut=cut), attempt=4, journal=store)
    assert found.committed["draft"].attempt == 3  # the later commit wins, as before
    assert "review" not in found.committed and found.committed["polish"].attempt == 3
    assert found.problems == ("record draft: attempt 3 committed other content than "
                              "attempt 1; attempt 3's is used",)


def test_records_on_a_lease_are_before_their_attempts_nodes() -> None:
    older = lease(1, head=None)
    older["metadata"]["annotations"].update(dict([
        (step("gather", 1).annotation, records.encode(step("gather", 1)))]))
    own = lease(2, head=None, sealed=False)
    own["metadata"]["annotations"][cuts.ANNOTATION] = "1.0.0-1"
    assert prefix.prefix(leases=[older, own], attempt=2).committed == {}
    own["metadata"]["annotations"][cuts.ANNOTATION] = "1.1.0-1"  # from a node: the Lease's stay
    assert list(prefix.prefix(leases=[older, own], attempt=2).committed) == ["gather"]


def test_a_cut_that_does_not_parse_stops_the_read() -> None:
    with pytest.raises(records.RecordError, match="this attempt's Lease: cut"):
        prefix.prefix(leases=leases(two_attempts(), reader=3, cut="everything"), attempt=3,
                      journal=two_attempts())


def test_the_operator_finds_the_positions_the_cut_is_made_of() -> None:
    store = two_attempts()
    store.commit(3, step("draft", 3, "again"))
    chain = [journalhistory.Attempt(number=n, lease=f"s-{n}", head=h, ended=True)
             for n, h in sorted(store.heads.items(), reverse=True)]

    def read(attempt: int, digest: str) -> bytes:
        return store.objects_by_key[f"{store.attempt_key(attempt)}/{digest}"]

    found = journalhistory.positions(chain=chain, read=read, keys=("draft", "publish.outcome",
                                                                   "never"), deadline=1e18)
    assert found == {"draft": ((1, 2, 0), (3, 1, 0)), "publish.outcome": ((1, 2, 2),),
                     "never": ()}
    assert cuts.earliest(found["draft"], cuts=cuts.parse_all(["1.2.0-2"])) == (3, 1, 0)
    late = journalhistory.positions(chain=chain, read=read, keys=("draft",), deadline=0.0,
                                    clock=lambda: 1.0)
    assert isinstance(late, str) and "rerun from the start" in late
    # a Lease bound to another pod than its attempt's own: left out, as a successor does
    stranger = [journalhistory.Attempt(number=a.number, lease=a.lease, head=a.head, ended=True,
                                       trusted=a.number != 3) for a in chain]
    assert journalhistory.positions(chain=stranger, read=read, keys=("draft",),
                                    deadline=1e18) == {"draft": ((1, 2, 0),)}


def test_an_effect_sent_again_leaves_its_earlier_records_out_and_gets_a_new_key() -> None:
    from agentrun.worker import _effects as effects
    store = two_attempts()
    store.commit(3, effect("publish.intent", 3, Kind.EFFECT_INTENT),
                 effect("publish.outcome", 3, Kind.EFFECT_OUTCOME))
    own = leases(store, reader=4, cut=None)
    own[-1]["metadata"]["annotations"][cuts.RESENDS_ANNOTATION] = "publish=2@2"
    found = prefix.prefix(leases=own, attempt=4, journal=store)
    assert found.committed["publish.outcome"].attempt == 3  # sent again by attempt 3: kept
    assert found.leave.generation("publish") == 2 and found.leave.generation("other") == 1
    own[-1]["metadata"]["annotations"][cuts.RESENDS_ANNOTATION] = "publish=3@3"
    again = prefix.prefix(leases=own, attempt=4, journal=store)
    assert "publish.outcome" not in again.committed and "publish.intent" not in again.committed
    assert "draft" in again.committed  # only the effect's own records
    first = effects.idempotency_key(run_uid="u", slot="s", key="publish")
    assert first == effects.idempotency_key(run_uid="u", slot="s", key="publish", generation=1)
    assert len({first, effects.idempotency_key(run_uid="u", slot="s", key="publish",
                                               generation=2),
                effects.idempotency_key(run_uid="u", slot="s", key="publish",
                                        generation=3)}) == 3
    for bad in ("publish=1@2", "Publish=2@2", "publish=2", "publish=2@0"):
        with pytest.raises(cuts.CutError):
            cuts.Resend.parse(bad)


def test_the_operator_says_why_it_cannot_read_where_a_step_was_committed() -> None:
    from typing import cast

    from agentrun.api.runs import JournalPin
    unused = journalhistory.Histories(client=cast(Any, None), stores=cast(Any, None))
    assert "has no journal" in str(unused.commits(namespace="n", slot="s", pin=None,
                                                  deleted=None, keys=("draft",)))
    pin = JournalPin(endpoint="http://127.0.0.1:9", bucket="agentrun-journal", prefix="p/n/u")
    assert "was deleted: retention" in str(unused.commits(
        namespace="n", slot="s", pin=pin, deleted="retention", keys=("draft",)))
