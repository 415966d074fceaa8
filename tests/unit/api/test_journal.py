"""Where a run's journal lives: the pin's and the operator settings' bounds, each refused
with a message that says what is wanted, and the CRD checking the very same patterns."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from agentrun.api import crds
from agentrun.api.runs import (
    JOURNAL_BASE_PREFIX_CHARS,
    JournalPin,
    JournalSettings,
    Pins,
)

GOOD: dict[str, Any] = {"endpoint": "http://minio.storage:9000", "bucket": "agentrun-journal",
                        "prefix": "agentrun/team-a/0d9c5a4e-7f2b-4b39-9c1e-3f0b8a6f2d11",
                        "region": "eu-west-1", "secret": "journal-credentials"}


def pin(**changes: Any) -> JournalPin:
    return JournalPin.model_validate({**GOOD, **changes})


def test_a_pin_keeps_what_it_was_given() -> None:
    assert pin().wire() == GOOD
    bare = {k: v for k, v in GOOD.items() if k not in ("region", "secret")}
    assert JournalPin.model_validate(bare).wire() == {**bare, "region": "us-east-1"}


@pytest.mark.parametrize("endpoint", [
    "http://minio:9000", "https://s3.amazonaws.com", "http://10.0.0.7:80",
    "http://[fd00::1]:9000", "https://a", "http://minio:65535"])
def test_endpoints_accepted(endpoint: str) -> None:
    assert pin(endpoint=endpoint).endpoint == endpoint


@pytest.mark.parametrize(("endpoint", "says"), [
    ("minio:9000", "an http:// or https:// URL"),
    ("ftp://minio", "an http:// or https:// URL"),
    ("http://minio:9000/", "no path, not even '/'"),
    ("http://minio:9000/journal", "no path"),
    ("http://minio?x=1", "no query"),
    ("http://user:pw@minio", "no user"),
    ("http://", "with a host"),
    ("http://minio:0", "port must be between 1 and 65535, not 0"),
    ("http://minio:65536", "port must be between 1 and 65535, not 65536"),
    ("http://" + "a" * 510, "at most 512"),
])
def test_endpoints_refused_clearly(endpoint: str, says: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(says)):
        pin(endpoint=endpoint)


@pytest.mark.parametrize("bucket", ["abc", "a" * 63, "my.bucket-1", "0ab"])
def test_buckets_accepted(bucket: str) -> None:
    assert pin(bucket=bucket).bucket == bucket


@pytest.mark.parametrize("bucket", ["ab", "a" * 64, "My-bucket", "-abc", "abc-", "ab_c", "a/b"])
def test_buckets_refused(bucket: str) -> None:
    with pytest.raises(ValidationError, match="bucket"):
        pin(bucket=bucket)


@pytest.mark.parametrize("prefix", ["a", "agentrun/ns/uid", "x.y/_z-1/...", ".hidden/a..b",
                                    "/".join(["a" * 255, "b" * 256])])
def test_prefixes_accepted(prefix: str) -> None:
    assert pin(prefix=prefix).prefix == prefix


@pytest.mark.parametrize("prefix", ["", "/a", "a/", "a//b", "a/../b", "..", "a/./b", "a b",
                                    "a\\b", "a" * 513])
def test_prefixes_refused(prefix: str) -> None:
    with pytest.raises(ValidationError, match="prefix"):
        pin(prefix=prefix)


@pytest.mark.parametrize(("field", "value"), [
    ("region", ""), ("region", "r" * 65), ("region", "us east"),
    ("secret", ""), ("secret", "Creds"), ("secret", "c" * 254), ("secret", "a_b")])
def test_region_and_secret_bounded(field: str, value: str) -> None:
    with pytest.raises(ValidationError, match=field):
        pin(**{field: value})


def test_settings_prefix_leaves_room_for_namespace_and_uid() -> None:
    base = {"endpoint": GOOD["endpoint"], "bucket": GOOD["bucket"]}
    assert JournalSettings.model_validate(base).prefix == "agentrun"
    assert JournalSettings.model_validate({**base, "prefix": ""}).prefix == ""
    assert JOURNAL_BASE_PREFIX_CHARS == 512 - 1 - 63 - 1 - 36
    JournalSettings.model_validate({**base, "prefix": "p" * JOURNAL_BASE_PREFIX_CHARS})
    with pytest.raises(ValidationError):
        JournalSettings.model_validate({**base, "prefix": "p" * (JOURNAL_BASE_PREFIX_CHARS + 1)})
    with pytest.raises(ValidationError, match="prefix"):
        JournalSettings.model_validate({**base, "prefix": "a/"})


def test_pins_without_a_journal_are_what_they_were() -> None:
    one = {"source": "s", "revision": 1, "uid": "u", "sha256": "0" * 64, "snapshot": "n"}
    wire = {"package": one, "workflow": one, "bindings": one}
    assert Pins.model_validate(wire).wire() == wire


def test_the_crd_checks_the_models_patterns() -> None:
    """The API server refuses what the model refuses: same pattern and length per field."""
    schema = crds.root_schema(crds.AGENT_RUN)
    journal = schema["properties"]["status"]["properties"]["pinned"]["properties"]["journal"]
    model = JournalPin.model_json_schema(by_alias=True)["properties"]
    for field in ("endpoint", "bucket", "prefix", "region", "secret"):
        node = journal["properties"][field]
        assert node["pattern"], field
        assert node["maxLength"] > 0, field
        found = model[field].get("anyOf", [model[field]])[0]
        assert (node["pattern"], node["maxLength"]) == (found["pattern"], found["maxLength"])
    assert journal["required"] == ["endpoint", "bucket", "prefix"]
