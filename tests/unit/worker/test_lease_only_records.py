"""With a journal, the records a reader trusts only on a Lease never go into the journal:
the worker's own (an unresolved effect, a question, a request for approval) are committed
on its Lease, where the operator reads them; the operator's are refused; none is staged.
One list decides both sides (``names.LEASE_ONLY_SUFFIXES``): a suffix the reader takes
only from a Lease but the committer put in the journal was never seen (an approval
request once was, and its attempt ended Succeeded instead of Asked)."""

from __future__ import annotations

from typing import Any

import pytest

from agentrun.api import names
from agentrun.worker import _journalcommits as journalcommits
from agentrun.worker import _records as records


class Lease:
    """What the committer asks of the attempt's ``LeaseRecords``: its attempt, its commit."""

    attempt = 1

    def __init__(self) -> None:
        self.committed: list[str] = []

    def commit(self, record: records.Record) -> records.Record:
        self.committed.append(record.key)
        return record


@pytest.mark.parametrize("suffix", names.LEASE_ONLY_SUFFIXES)
def test_a_lease_only_record_is_the_workers_on_its_lease_or_refused(suffix: str) -> None:
    lease = Lease()
    journal: Any = None  # nothing may reach the journal
    committer = journalcommits.JournalRecords(journal=journal, lease=lease)  # type: ignore[arg-type]
    record = records.make(key=f"publish{suffix}", kind=records.Kind.DECISION, attempt=1,
                          payload={"digest": "0" * 64})
    if suffix in names.OPERATOR_SUFFIXES:
        with pytest.raises(records.RecordError, match="is the operator's"):
            committer.commit(record)
        assert lease.committed == []
    else:
        committer.commit(record)
        assert lease.committed == [f"publish{suffix}"]
    with pytest.raises(records.RecordError):
        committer.stage(record)
    assert committer.staged == []
