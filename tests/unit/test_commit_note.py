"""The note a member-less committer (the analytics job) puts in its offsets' metadata."""

from __future__ import annotations

import json

import pytest

from contracts.commit_note import newest, note_text, parse


def test_a_note_round_trips_and_says_alive_within_three_intervals() -> None:
    note = parse(note_text("analytics", 1_000_000, 15.0))
    assert note is not None
    assert (note.job, note.every_s, note.committed_at_ms) == ("analytics", 15.0, 1_000_000)
    assert note.client.rsplit(":", 1)[1].isdigit()
    assert note.alive(1_000_000 + 45_000)
    assert not note.alive(1_000_000 + 45_001)
    assert note.to_json(1_010_000)["age_s"] == 10.0


def test_the_last_batch_is_when_the_positions_last_moved_and_optional() -> None:
    note = parse(note_text("analytics", 100_000, 15.0, progress_at_ms=40_000))
    assert note is not None
    assert note.to_json(100_000)["batch_age_s"] == 60.0
    plain = parse(note_text("analytics", 100_000, 15.0))
    assert plain is not None
    assert plain.to_json(100_000)["batch_age_s"] is None
    odd = parse(note_text("analytics", 100_000, 15.0).replace("}", ',"progress_at":"soon"}'))
    assert odd is not None
    assert odd.progress_at_ms is None


def test_librdkafkas_terminating_nul_is_ignored() -> None:
    assert parse(note_text("analytics", 5, 15.0) + "\x00") is not None


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "plain metadata",
        "{",
        json.dumps({"kind": "other", "job": "x", "client": "h:1", "at": 1, "every_s": 1}),
        json.dumps({"kind": "streamshop.committer", "job": "x", "client": "h:1", "at": "1", "every_s": 1}),
        json.dumps({"kind": "streamshop.committer", "job": "x", "client": "h:1", "at": True, "every_s": 1}),
        json.dumps({"kind": "streamshop.committer", "job": "x", "client": "h:1", "at": 1, "every_s": 0}),
        json.dumps({"kind": "streamshop.committer", "job": "x", "at": 1, "every_s": 1}),
        "[" * 5000,
        "{" + '"a":' * 2000 + "1" + "}" * 2000,
    ],
)
def test_anything_else_in_the_metadata_is_no_note(text: str | None) -> None:
    assert parse(text) is None


def test_the_newest_note_of_a_groups_partitions_wins() -> None:
    old, new = note_text("analytics", 10, 15.0), note_text("analytics", 20, 15.0)
    found = newest([None, old, "junk", new])
    assert found is not None
    assert found.committed_at_ms == 20
    assert newest([None, ""]) is None
