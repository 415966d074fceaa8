"""A base for the worker tests' fake committers (``prefix.Committer``): each says only how
it commits; every record is durable on return, so staging is committing and a flush or
the attempt's end has nothing left to do (group commit itself is under test in
tests/integration/test_group_commit.py, over a real store)."""

from __future__ import annotations

from agentrun.worker import _records as records


class DurableOnReturn:
    def commit(self, record: records.Record) -> records.Record:
        raise NotImplementedError

    def stage(self, record: records.Record) -> records.Record:
        return self.commit(record)

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None


class Remembered(DurableOnReturn):
    """Keeps every record committed, in order (``committed``)."""

    def __init__(self) -> None:
        self.committed: list[records.Record] = []

    def commit(self, record: records.Record) -> records.Record:
        self.committed.append(record)
        return record
