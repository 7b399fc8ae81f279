"""Share groups (KIP-932): share sessions, each its connection's alone, with epochs counting up
and wrapping, the final epoch, and the session limit.

Time is a ManualClock: nothing sleeps.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.protocol.errors import ErrorCode, KafkaError
from broker.share.sessions import FINAL_EPOCH, MAX_EPOCH, ShareSessions
from tests.support.examples import examples
from tests.support.share_coordinator import CONN, OTHER, code_of


def test_a_session_opens_at_epoch_one_and_counts_up() -> None:
    s = ShareSessions(10)
    session, previous = s.open("g", "a", CONN)
    assert (session.group_id, session.member_id, session.epoch, previous) == ("g", "a", 1, None)
    for epoch in range(1, 5):
        assert s.next("g", "a", epoch, CONN) is session
        assert session.epoch == epoch + 1


def test_a_wrong_epoch_is_refused_and_changes_nothing() -> None:
    s = ShareSessions(10)
    session, _ = s.open("g", "a", CONN)
    s.next("g", "a", 1, CONN)
    for wrong in (1, 3, 0, -2, MAX_EPOCH):
        with pytest.raises(KafkaError) as e:
            s.next("g", "a", wrong, CONN)
        assert code_of(e) == ErrorCode.invalid_share_session_epoch
        assert session.epoch == 2
    assert s.next("g", "a", 2, CONN) is session


def test_no_session() -> None:
    s = ShareSessions(10)
    s.open("g", "a", CONN)
    for group, member, epoch in [("g", "b", 1), ("h", "a", 1), ("g", "b", 0)]:
        with pytest.raises(KafkaError) as e:
            s.next(group, member, epoch, CONN)
        assert code_of(e) == ErrorCode.share_session_not_found
    with pytest.raises(KafkaError) as e:  # a final request needs one too (Kafka's)
        s.next("g", "b", FINAL_EPOCH, CONN)
    assert code_of(e) == ErrorCode.share_session_not_found


def test_a_session_is_its_connections_alone() -> None:
    """Another connection naming the member finds no session, at any epoch, and cannot open
    one over it; the epoch does not move, and the owner goes on."""
    s = ShareSessions(10)
    session, _ = s.open("g", "a", CONN)
    for epoch in (1, 2, FINAL_EPOCH):
        with pytest.raises(KafkaError) as e:
            s.next("g", "a", epoch, OTHER)
        assert code_of(e) == ErrorCode.share_session_not_found
    with pytest.raises(KafkaError) as e:
        s.open("g", "a", OTHER)
    assert code_of(e) == ErrorCode.invalid_share_session_epoch
    assert s.find("g", "a", OTHER) is None
    assert s.find("g", "a", CONN) is session
    assert s.next("g", "a", 1, CONN) is session
    s.close("g", "a")  # its connection closed: another may open one
    assert s.open("g", "a", OTHER)[0].owner is OTHER


def test_the_epoch_wraps_to_one() -> None:
    s = ShareSessions(10)
    session, _ = s.open("g", "a", CONN)
    session.epoch = MAX_EPOCH
    s.next("g", "a", MAX_EPOCH, CONN)
    assert session.epoch == 1
    s.next("g", "a", 1, CONN)
    assert session.epoch == 2


def test_the_final_epoch_finds_the_session_without_moving_it_and_close_ends_it() -> None:
    s = ShareSessions(10)
    session, _ = s.open("g", "a", CONN)
    s.next("g", "a", 1, CONN)
    assert s.next("g", "a", FINAL_EPOCH, CONN) is session
    assert session.epoch == 2
    assert s.close("g", "a") is session
    assert s.close("g", "a") is None
    with pytest.raises(KafkaError) as e:
        s.next("g", "a", 2, CONN)
    assert code_of(e) == ErrorCode.share_session_not_found


def test_opening_again_replaces_the_session_and_returns_the_previous() -> None:
    s = ShareSessions(10)
    first, _ = s.open("g", "a", CONN)
    first.partitions[(uuid.UUID(int=1), 0)] = None
    s.next("g", "a", 1, CONN)
    second, previous = s.open("g", "a", CONN)
    assert previous is first
    assert second is not first
    assert (second.epoch, second.partitions) == (1, {})
    with pytest.raises(KafkaError):
        s.next("g", "a", 2, CONN)  # the old session's epoch means nothing now


def test_the_session_limit() -> None:
    s = ShareSessions(2)
    a, _ = s.open("g", "a", CONN)
    s.open("h", "a", CONN)  # another group: another session
    with pytest.raises(KafkaError) as e:
        s.open("g", "b", CONN)
    assert code_of(e) == ErrorCode.share_session_limit_reached
    assert set(s.sessions) == {("g", "a"), ("h", "a")}
    again, previous = s.open("g", "a", CONN)  # replacing one's own session takes no new slot
    assert previous is a
    assert s.sessions[("g", "a")] is again
    assert set(s.sessions) == {("g", "a"), ("h", "a")}
    s.close("h", "a")
    s.open("g", "b", CONN)
    assert set(s.sessions) == {("g", "a"), ("g", "b")}


def test_a_failed_open_keeps_the_previous_session() -> None:
    s = ShareSessions(3)
    a, _ = s.open("g", "a", CONN)
    s.next("g", "a", 1, CONN)
    s.open("g", "b", CONN)
    s.open("g", "c", CONN)
    s.max_sessions = 1  # lowered under the sessions held
    with pytest.raises(KafkaError) as e:
        s.open("g", "a", CONN)
    assert code_of(e) == ErrorCode.share_session_limit_reached
    assert s.sessions[("g", "a")] is a
    assert s.next("g", "a", 2, CONN) is a


@settings(max_examples=examples(100), deadline=None)
@given(start=st.integers(1, MAX_EPOCH), steps=st.integers(0, 20))
def test_epochs_run_on_and_wrap(start: int, steps: int) -> None:
    s = ShareSessions(1)
    session, _ = s.open("g", "a", CONN)
    session.epoch = start
    for _ in range(steps):
        s.next("g", "a", session.epoch, CONN)
        assert 1 <= session.epoch <= MAX_EPOCH
    assert session.epoch == (start - 1 + steps) % MAX_EPOCH + 1
