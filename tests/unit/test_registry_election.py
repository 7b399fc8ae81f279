"""The leader's choice of the registry's primary, and the bytes members exchange (bounded and
checked: they come from the network)."""

from __future__ import annotations

from registry.election import (
    MAX_METADATA_BYTES,
    Candidate,
    assignment,
    choose_primary,
    member_metadata,
    parse_assignment,
    parse_member,
)


def test_metadata_and_assignments_read_back() -> None:
    raw = member_metadata("http://10.0.0.2:8081", True, False)
    assert parse_member("m1", raw) == Candidate("m1", "http://10.0.0.2:8081", True, False)
    chosen = Candidate("m1", "http://10.0.0.2:8081", True, False)
    assert parse_assignment(assignment(chosen)) == ("m1", "http://10.0.0.2:8081")
    assert parse_assignment(assignment(None)) is None


def test_the_holder_keeps_the_role_and_otherwise_the_lowest_url_takes_it() -> None:
    a = Candidate("a", "http://h:1", True, False)
    b = Candidate("b", "http://h:2", True, True)
    c = Candidate("c", "http://h:0", False, False)
    assert choose_primary([a, b, c]) == b, "a new member does not move the role"
    assert choose_primary([a, c]) == a, "the lowest eligible URL"
    assert choose_primary([c]) is None, "no eligible member: no primary"
    assert choose_primary([b, Candidate("d", "http://h:0", True, True)]).member_id == "d"  # type: ignore[union-attr]


def test_metadata_that_is_not_ours_or_too_large_never_elects() -> None:
    for raw in [
        None,
        b"",
        b"\xff\xfe",
        b"[]",
        b'{"url": "http://h:1", "eligible": "yes", "primary": false}',
        b'{"url": "file:///etc/passwd", "eligible": true, "primary": false}',
        b'{"url": 7, "eligible": true, "primary": false}',
        member_metadata("http://h:1" + "x" * MAX_METADATA_BYTES, True, False),
    ]:
        assert parse_member("m", raw) is None, raw
    for raw in [None, b"{", b"1", b'{"primary": 3, "url": "http://h"}', b'{"primary": "m", "url": "ftp://h"}']:
        assert parse_assignment(raw) is None, raw
