"""Records: the model's bounds, the canonical encoding admission relies on, inline vs by
reference (a real ``file://`` fsspec store), decoding that refuses what is not this
Lease's record, and the Lease commit's preconditions (a fake API: the real one is in
tests/integration/test_worker_records.py): the record count is checked on the Lease as
read, so a full Lease is RecordLimit (nothing sent), not a refusal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentrun import rest
from agentrun.api import bounds
from agentrun.worker import _records as records

Kind = records.Kind


def lease(attempt: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": f"s-{attempt}", "resourceVersion": "7",
                         "labels": {"agentrun.dev/attempt": str(attempt)},
                         "annotations": annotations or {}},
            "spec": {"holderIdentity": f"s-{attempt}"}}


def test_encoding_is_canonical_and_starts_with_the_attempt() -> None:
    record = records.make(key="gather", kind=Kind.STEP_RESULT, attempt=3,
                          payload={"b": [1, 2], "a": "x"})
    text = records.encode(record)
    assert text.startswith('{"attempt":3,')
    assert '"key":"gather"' in text and " " not in text
    assert record.digest == records.digest(b'{"a":"x","b":[1,2]}')
    again = records.make(key="gather", kind=Kind.STEP_RESULT, attempt=3,
                         payload={"a": "x", "b": [1, 2]})
    assert records.encode(again) == text
    decoded = records.decode(annotation=record.annotation, value=text, attempt=3)
    assert decoded == record and decoded.inline == {"a": "x", "b": [1, 2]}


@pytest.mark.parametrize("payload", [None, 0, "", [], {"x": None}])
def test_falsy_payloads_round_trip(payload: Any) -> None:
    record = records.make(key="k", kind=Kind.CHECKPOINT, attempt=1, payload=payload)
    decoded = records.decode(annotation=record.annotation, value=records.encode(record),
                             attempt=1)
    assert records.payload(decoded, store=None) == payload


@pytest.mark.parametrize("key", ["", "A", "-x", "x-", "a/b", "a_b", "x" * 64])
def test_bad_keys_are_refused_with_the_rule(key: str) -> None:
    with pytest.raises(records.RecordError, match="at most 63 characters"):
        records.make(key=key, kind=Kind.DECISION, attempt=1, payload=1)


def test_a_payload_that_is_not_json_is_refused() -> None:
    with pytest.raises(records.RecordError, match="plain JSON"):
        records.make(key="k", kind=Kind.DECISION, attempt=1, payload={"x": object()})
    with pytest.raises(records.RecordError, match="plain JSON"):
        records.make(key="k", kind=Kind.DECISION, attempt=1, payload=float("nan"))


def test_a_large_payload_goes_by_reference_and_is_verified(tmp_path: Path) -> None:
    store = records.FsspecStore(f"file://{tmp_path}/store")
    big = {"text": "é" * bounds.INLINE_PAYLOAD_BYTES}
    with pytest.raises(records.RecordError, match="no payload store"):
        records.make(key="report", kind=Kind.STEP_RESULT, attempt=2, payload=big)
    record = records.make(key="report", kind=Kind.STEP_RESULT, attempt=2, payload=big,
                          store=store)
    assert record.inline is None and record.ref is not None
    assert record.ref.endswith(f"/sha256/{record.digest}")
    text = records.encode(record)
    assert len(text.encode()) <= bounds.RECORD_BYTES
    decoded = records.decode(annotation=record.annotation, value=text, attempt=2)
    assert records.payload(decoded, store=store) == big
    with pytest.raises(records.RecordError, match="no payload store"):
        records.payload(decoded, store=None)
    (tmp_path / "store" / "sha256" / record.digest).write_bytes(b'{"text":"changed"}')
    with pytest.raises(records.RecordError, match="does not match its digest"):
        records.payload(decoded, store=store)
    (tmp_path / "store" / "sha256" / record.digest).unlink()
    with pytest.raises(records.RecordError, match="cannot read"):
        records.payload(decoded, store=store)


def test_the_same_payload_is_stored_once_and_a_damaged_one_again(tmp_path: Path) -> None:
    store = records.FsspecStore(f"file://{tmp_path}")
    sha = records.digest(b"1")
    first = store.put(sha256=sha, data=b"1")
    written = (tmp_path / "sha256" / sha).stat().st_mtime_ns
    assert store.put(sha256=sha, data=b"1") == first
    assert (tmp_path / "sha256" / sha).stat().st_mtime_ns == written  # not rewritten
    (tmp_path / "sha256" / sha).write_bytes(b"")  # a write cut short
    assert store.put(sha256=sha, data=b"1") == first and store.get(first, size=1) == b"1"


def test_an_inline_payload_over_the_bound_is_refused_by_the_model() -> None:
    with pytest.raises(ValueError, match="by reference"):
        records.Record(attempt=1, digest="0" * 64, inline="x", key="k", kind=Kind.DECISION,
                       size=bounds.INLINE_PAYLOAD_BYTES + 1)
    with pytest.raises(ValueError, match="not both"):
        records.Record(attempt=1, digest="0" * 64, inline="x", key="k", kind=Kind.DECISION,
                       size=3, ref="file:///x")


def test_only_an_artifact_is_larger_than_a_payload_and_it_is_never_read_whole() -> None:
    big = dict(attempt=1, digest="0" * 64, key="k", ref="s3://b/p/s/1/artifact/k")
    artifact = records.Record(kind=Kind.ARTIFACT, size=bounds.ARTIFACT_BYTES, **big)
    with pytest.raises(ValueError, match="larger data is an artifact"):
        records.Record(kind=Kind.STEP_RESULT, size=bounds.PAYLOAD_BYTES + 1, **big)
    with pytest.raises(ValueError, match="less than or equal"):
        records.Record(kind=Kind.ARTIFACT, size=bounds.ARTIFACT_BYTES + 1, **big)
    with pytest.raises(ValueError, match="an artifact is stored by reference"):
        records.Record(attempt=1, digest="0" * 64, key="k", kind=Kind.ARTIFACT, size=0)
    with pytest.raises(records.RecordError, match=r"read it with worker\.artifact"):
        records.payload(artifact, store=records.FsspecStore("file:///nonexistent"))


def test_a_uri_too_long_for_an_annotation_is_refused() -> None:
    record = records.Record(attempt=1, digest="0" * 64, key="k", kind=Kind.DECISION,
                            size=5000, ref="file:///" + "x" * 1000)
    assert len(records.encode(record).encode()) < bounds.RECORD_BYTES  # the bound fits
    wide = record.model_copy(update={"ref": "file:///" + "é" * 1010})
    with pytest.raises(records.RecordError, match="fit an annotation"):
        records.encode(wide)


def good(attempt: int = 1, key: str = "k") -> str:
    return records.encode(records.make(key=key, kind=Kind.DECISION, attempt=attempt,
                                       payload="v"))


@pytest.mark.parametrize(("annotation", "value", "attempt", "why"), [
    ("record.agentrun.dev/k", "not json", 1, "malformed"),
    ("record.agentrun.dev/k", '{"attempt":1}', 1, "malformed"),
    ("record.agentrun.dev/other", good(), 1, "names key k of attempt 1"),
    ("record.agentrun.dev/k", good(attempt=2), 1, "names key k of attempt 2"),
    ("record.agentrun.dev/k", good().replace('"inline":"v"', '"inline":"w"'), 1,
     "does not match its digest"),
    ("record.agentrun.dev/k", good()[:-1] + ',"extra":1}', 1, "malformed"),
])
def test_decoding_refuses_what_is_not_this_leases_record(
        annotation: str, value: str, attempt: int, why: str) -> None:
    with pytest.raises(records.RecordError, match=why):
        records.decode(annotation=annotation, value=value, attempt=attempt)


def test_on_lease_reads_only_the_prefix_and_reports_problems() -> None:
    found, problems = records.on_lease(lease(1, {
        "record.agentrun.dev/k": good(), "record.agentrun.dev/bad": "{}",
        "agentrun.dev/outcome": "Failed"}))
    assert list(found) == ["k"]
    assert len(problems) == 1 and "record bad of attempt 1 is malformed" in problems[0]


class FakeApi:
    """The Lease as a dict; PATCHes merge annotations under a resourceVersion check."""

    def __init__(self, body: dict[str, Any], *, conflicts: int = 0,
                 refuse: int | None = None) -> None:
        self.body, self.conflicts, self.refuse = body, conflicts, refuse
        self.patches: list[dict[str, Any]] = []

    def request(self, method: str, path: str, *, body: Any = None,
                query: Any = None, content_type: str = rest.JSON) -> dict[str, Any]:
        if method == "GET":
            return json.loads(json.dumps(self.body))
        assert method == "PATCH" and content_type == rest.MERGE_PATCH
        self.patches.append(body)
        if self.refuse is not None:
            raise rest.ApiError(self.refuse, json.dumps(
                {"message": "ValidatingAdmissionPolicy 'agentrun-attempt-leases' denied"}))
        if self.conflicts:
            self.conflicts -= 1
            self.body["metadata"]["resourceVersion"] += "1"  # someone renewed meanwhile
            raise rest.ApiError(409, "{}")
        assert body["metadata"]["resourceVersion"] == self.body["metadata"]["resourceVersion"]
        self.body["metadata"]["annotations"].update(body["metadata"]["annotations"])
        return self.body


def ledger(api: FakeApi, attempt: int = 1) -> records.LeaseRecords:
    return records.LeaseRecords(api=api, namespace="ns", lease=f"s-{attempt}",  # type: ignore[arg-type]
                                attempt=attempt)


def test_commit_adds_one_annotation_under_the_version_read() -> None:
    api = FakeApi(lease(1), conflicts=2)
    record = records.make(key="k", kind=Kind.DECISION, attempt=1, payload="v")
    assert ledger(api).commit(record) == record
    assert len(api.patches) == 3  # two 409s, each followed by a fresh read
    assert api.patches[-1]["metadata"]["annotations"] == {record.annotation: good()}
    assert ledger(api).read() == {"k": record}
    assert ledger(api).commit(record) == record and len(api.patches) == 3  # no-op
    other = records.make(key="k", kind=Kind.DECISION, attempt=1, payload="w")
    with pytest.raises(records.RecordConflict, match="write-once"):
        ledger(api).commit(other)


def test_commit_gives_up_after_repeated_conflicts() -> None:
    api = FakeApi(lease(1), conflicts=records.CONFLICT_RETRIES)
    with pytest.raises(records.RecordError, match="changed under each"):
        ledger(api).commit(records.make(key="k", kind=Kind.DECISION, attempt=1, payload=1))
    assert api.body["metadata"]["annotations"] == {}


@pytest.mark.parametrize("status", [403, 422])
def test_a_refusal_names_the_policy(status: int) -> None:
    api = FakeApi(lease(1), refuse=status)
    with pytest.raises(records.RecordRefused, match="agentrun-attempt-leases"):
        ledger(api).commit(records.make(key="k", kind=Kind.DECISION, attempt=1, payload=1))


def full(count: int) -> dict[str, Any]:
    notes = {f"{bounds.RECORD_ANNOTATION_PREFIX}n-{n}": records.encode(records.make(
        key=f"n-{n}", kind=Kind.STEP_RESULT, attempt=1, payload=n)) for n in range(count)}
    return lease(1, {**notes, "agentrun.dev/other": "not a record"})


def test_a_full_lease_is_a_record_limit_found_before_anything_is_sent() -> None:
    api = FakeApi(full(bounds.MAX_RECORDS))
    step = records.make(key="one-more", kind=Kind.STEP_RESULT, attempt=1, payload=0)
    with pytest.raises(records.RecordLimit, match=f"holds {bounds.MAX_RECORDS} records, "
                                                  f"and an attempt commits at most"):
        ledger(api).commit(step)
    assert api.patches == []
    kept = records.make(key="n-3", kind=Kind.STEP_RESULT, attempt=1, payload=3)
    assert ledger(api).commit(kept) == kept  # a retry of a committed one: still a no-op
    roomy = FakeApi(full(bounds.MAX_RECORDS - 1))
    intent = records.make(key="pay.intent", kind=Kind.EFFECT_INTENT, attempt=1, payload={})
    with pytest.raises(records.RecordLimit, match="an effect needs two"):
        ledger(roomy).commit(intent)  # no room for its outcome: the call is not announced
    assert roomy.patches == []
    assert ledger(roomy).commit(step) == step and len(roomy.patches) == 1  # the 64th
    ended = FakeApi(full(bounds.MAX_RECORDS), refuse=403)
    ended.body["spec"]["holderIdentity"] = None  # tombstoned: admission's answer decides
    with pytest.raises(records.RecordRefused, match="agentrun-attempt-leases"):
        ledger(ended).commit(step)


def test_a_record_of_another_attempt_is_not_committed() -> None:
    api = FakeApi(lease(2))
    with pytest.raises(records.RecordError, match="this worker is attempt 2"):
        ledger(api, attempt=2).commit(records.make(key="k", kind=Kind.DECISION, attempt=1,
                                                   payload=1))
    assert api.patches == []
