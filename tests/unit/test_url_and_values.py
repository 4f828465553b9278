"""URLs, redaction and the value codec (no database)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from longtask import DatabaseError, InvalidInput, LongTaskError
from longtask.checkpointers import parse_url, redact, resolve_url
from longtask.checkpointers._url import scrub
from longtask.store import ValueCodec, is_skipped, skipped_value


def test_parse_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LONGTASK_DB", raising=False)
    assert resolve_url(None) == "sqlite:///.longtask/longtask.db"
    monkeypatch.setenv("LONGTASK_DB", "postgresql://u@h/db")
    assert resolve_url(None) == "postgresql://u@h/db"
    assert resolve_url("sqlite:///x.db") == "sqlite:///x.db"
    assert str(parse_url("sqlite:///rel/x.db").path) == "rel/x.db"
    assert str(parse_url("sqlite:////abs/x.db").path) == "/abs/x.db"
    assert parse_url("postgres://u@h/db").scheme == "postgresql"
    assert parse_url("file.db").scheme == "sqlite"
    with pytest.raises(DatabaseError, match="unsupported database URL"):
        parse_url("mysql://root:pw@h/db")
    with pytest.raises(DatabaseError, match="in-memory"):
        parse_url("sqlite:///:memory:")


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://alice:s3cr3t-pw@db.example:5432/prod",
        "postgresql://alice@db/prod?password=s3cr3t-pw",
        "host=db user=alice password=s3cr3t-pw dbname=prod",
        "mysql://alice:s3cr3t-pw@h/db",
        # generated passwords hold characters a URL parser reads as path, query or fragment
        "postgresql://alice:s3cr3t-pw/x+y@db:5432/prod",
        "postgresql://alice:s3cr3t-pw#frag@db/prod",
        "postgresql://alice:s3cr3t-pw?q@db/prod?sslmode=require",
    ],
)
def test_redact_never_shows_password(url: str) -> None:
    assert "s3cr3t-pw" not in redact(url)
    assert "***" in redact(url)
    if url.startswith("mysql"):
        with pytest.raises(DatabaseError) as info:
            parse_url(url)
        assert "s3cr3t-pw" not in str(info.value)


def test_scrub_removes_password_from_driver_text() -> None:
    url = "postgresql://alice:s3cr3t-pw@db/prod"
    assert "s3cr3t-pw" not in scrub(f"failed for {url} with s3cr3t-pw", url)


class Blobs:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def put_blob(self, digest: str, data: bytes) -> None:
        self.data.setdefault(digest, data)

    def get_blob(self, digest: str) -> bytes | None:
        return self.data.get(digest)


class Report(BaseModel):
    title: str
    items: list[int]


def test_small_values_inline_large_by_reference() -> None:
    blobs = Blobs()
    codec = ValueCodec(blobs, inline_limit=64)
    small = codec.encode({"a": 1})
    assert small == {"a": 1}  # the value itself: LangGraph's get_state shows it as it is
    big_value = {"text": "x" * 500}
    big = codec.encode(big_value)
    assert big["$longtask"] == "blob" and big["size"] > 500 and len(blobs.data) == 1
    again = codec.encode(dict(big_value))
    assert again == big and len(blobs.data) == 1  # content-addressed: stored once
    assert codec.decode(big) == big_value
    decoded = codec.decode(big)
    decoded["text"] = "mutated"
    assert codec.decode(big) == big_value  # each reader gets its own copy


@pytest.mark.parametrize(
    "value",
    [
        {"$longtask": "blob", "digest": "x"},  # looks like one of ours
        {"v": 1},  # looks like an envelope of 0.1
        {"ref": "abc", "size": 3},
        {"map": {"thread": "t"}},
        {"v": None, "skipped": "yes"},
    ],
)
def test_plain_values_that_look_like_references_round_trip(value: dict[str, Any]) -> None:
    codec = ValueCodec(Blobs())
    env = codec.encode(value)
    assert env == {"$longtask": "value", "value": value}
    assert codec.decode(env) == value
    assert not is_skipped(env)


def test_plain_values_are_kept_as_they_are() -> None:
    codec = ValueCodec(Blobs())
    for value in [1, "s", None, [1, {"v": 2}], {"a": {"v": 1}}, {"v": 1, "w": 2}]:
        assert codec.encode(value) == value
        assert codec.decode(value) == value


def test_values_written_by_0_1_are_read() -> None:
    """Databases made before plain values hold envelopes; they read as they did."""
    blobs = Blobs()
    blobs.put_blob("d1", b'{"big": true}')
    codec = ValueCodec(blobs)
    assert codec.decode({"v": {"a": 1}}) == {"a": 1}
    assert codec.decode({"v": None}) is None
    assert codec.decode({"ref": "d1", "size": 13}) == {"big": True}
    report = codec.decode({"v": {"title": "t", "items": [1]}, "model": f"{__name__}:Report"})
    assert report == Report(title="t", items=[1])
    skipped = {"v": None, "skipped": "rejected"}
    assert is_skipped(skipped) and codec.decode(skipped) is None
    assert is_skipped(skipped_value("rejected")) and codec.decode(skipped_value("r")) is None


def test_a_value_of_a_newer_kind_is_a_clear_error() -> None:
    with pytest.raises(LongTaskError, match="written by a newer longtask"):
        ValueCodec(Blobs()).decode({"$longtask": "hologram"})


@pytest.mark.parametrize("limit", [10_000, 8])
def test_pydantic_round_trip(limit: int) -> None:
    codec = ValueCodec(Blobs(), inline_limit=limit)
    env = codec.encode(Report(title="t", items=[1, 2]))
    assert env["model"].endswith(":Report")
    back = codec.decode(env)
    assert isinstance(back, Report) and back == Report(title="t", items=[1, 2])


def test_not_json_serialisable_is_a_clear_error() -> None:
    codec = ValueCodec(Blobs())
    value: Any = {"s": {1, 2}}
    with pytest.raises(InvalidInput, match="the result of step 'x' is not JSON-serialisable"):
        codec.encode(value, "the result of step 'x'")
    with pytest.raises(InvalidInput):
        codec.encode(float("nan"))


@pytest.mark.parametrize(
    "url",
    [
        "postgresql:/alice:s3cr3t-pw@db/prod",
        "alice:s3cr3t-pw@db/prod",
        "sqlite:/alice:s3cr3t-pw@db/x.db",
        "postgresql:alice:s3cr3t-pw@db@x/prod",
    ],
)
def test_a_url_that_cannot_be_parsed_is_shown_without_its_password(url: str) -> None:
    # Issue 28, item 12: redact() finds a password only in a well-formed URL.
    with pytest.raises(DatabaseError) as info:
        parse_url(url)
    assert "s3cr3t-pw" not in str(info.value)
    assert "***@" in str(info.value)


def test_a_stored_model_path_is_never_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 28, item 12: a value forged through the raw graph's update_state named a
    # module, and every later read imported it (running its code).
    marker = tmp_path / "imported"
    (tmp_path / "forged_lt_module.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from pydantic import BaseModel\n\n\nclass X(BaseModel):\n    a: int = 0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    codec = ValueCodec(Blobs())
    forged = {"$longtask": "model", "model": "forged_lt_module:X", "value": {"a": 1}}
    with pytest.raises(LongTaskError, match="is not loaded in this process"):
        codec.decode(forged)
    assert codec.decode(forged, strict=False) == {"a": 1}  # shown as its JSON
    assert not marker.exists()
    assert "forged_lt_module" not in sys.modules
    # A model this process has loaded (the task's own) is rebuilt as before.
    assert codec.decode(codec.encode(Report(title="t", items=[1]))) == Report(title="t", items=[1])
