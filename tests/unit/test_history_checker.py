"""The fault tier's history checker on hand-made histories: each check passes a correct
history and reports the one violation planted in a faulty one."""

from __future__ import annotations

from pathlib import Path

from tests.support.history import (
    AckKind,
    Acknowledged,
    CommitOutcome,
    Committed,
    Event,
    Fault,
    History,
    Left,
    Owned,
    Produced,
    Read,
    Stored,
    Transaction,
    TxnOutcome,
    accepted_redelivered,
    append_jsonl,
    commit_regressed,
    duplicated_in_log,
    held_by_two,
    lost_acknowledged,
    lost_to_group,
    owned_by_two,
    partial_transactions,
    redelivered_after_commit,
    repeated_delivery_count,
)

LOCK_MS = 2000


def _history(*events: Event) -> History:
    h = History()
    h.extend(events)
    return h


def test_an_acknowledged_record_missing_or_moved_is_reported_lost() -> None:
    acked = Produced(client="p", topic="t", value=b"a", outcome="acked", partition=0, offset=0)
    unknown = Produced(client="p", topic="t", value=b"b", outcome="unknown")
    assert lost_acknowledged(_history(acked, unknown, Stored(topic="t", partition=0, offset=0, value=b"a"))) == []
    lost = lost_acknowledged(_history(acked, unknown))
    assert len(lost) == 1
    assert "'a' acknowledged at t-0@0, the log holds nothing" in lost[0]
    moved = lost_acknowledged(_history(acked, Stored(topic="t", partition=0, offset=0, value=b"z")))
    assert "the log holds 'z'" in moved[0]


def test_a_value_stored_twice_is_reported_duplicated() -> None:
    once = [Stored(topic="t", partition=0, offset=0, value=b"a"), Stored(topic="t", partition=0, offset=1, value=b"b")]
    assert duplicated_in_log(_history(*once)) == []
    twice = duplicated_in_log(_history(*once, Stored(topic="t", partition=0, offset=2, value=b"a")))
    assert twice == ["'a' is stored 2 times: [('t', 0, 0), ('t', 0, 2)]"]


def test_a_copy_under_a_later_epoch_of_its_producer_is_a_resend_not_a_duplicate() -> None:
    copies = _history(
        Stored(topic="t", partition=0, offset=0, value=b"a"), Stored(topic="t", partition=0, offset=5, value=b"a")
    )
    assert duplicated_in_log(copies, {("t", 0, 0): (7, 0), ("t", 0, 5): (7, 3)}) == []
    same_epoch = duplicated_in_log(copies, {("t", 0, 0): (7, 3), ("t", 0, 5): (7, 3)})
    assert same_epoch == ["'a' is stored 2 times: [('t', 0, 0), ('t', 0, 5)]"]
    two_producers = duplicated_in_log(copies, {("t", 0, 0): (7, 0), ("t", 0, 5): (8, 0)})
    assert len(two_producers) == 1
    not_idempotent = duplicated_in_log(copies, {("t", 0, 0): (-1, -1), ("t", 0, 5): (-1, 0)})
    assert len(not_idempotent) == 1


def _read(member: str, offset: int, requested: float, received: float, count: int | None = None) -> Read:
    return Read(
        client=member,
        group="g",
        member=member,
        topic="t",
        partition=0,
        offset=offset,
        value=b"v%d" % offset,
        requested_after=requested,
        received=received,
        delivery_count=count,
    )


def test_a_record_read_again_after_its_commit_was_acknowledged_is_reported() -> None:
    commit = Committed(client="a", group="g", member="a", topic="t", partition=0, offset=5, started=9.0, done=10.0)
    before = _read("b", 3, requested=8.0, received=10.5)  # asked for before the commit was acknowledged
    at_commit = _read("b", 5, requested=11.0, received=11.1)  # the committed offset itself is next to read
    assert redelivered_after_commit(_history(commit, before, at_commit)) == []
    failed = Committed(client="a", group="g", member="a", topic="t", partition=0, offset=5, outcome="failed", done=1)
    assert redelivered_after_commit(_history(failed, _read("b", 3, 11.0, 11.1))) == []
    again = redelivered_after_commit(_history(commit, _read("b", 4, requested=11.0, received=11.2)))
    assert len(again) == 1
    assert "b read t-0@4" in again[0]
    assert "commit of offset 5" in again[0]


def test_a_commit_acknowledged_below_one_acknowledged_before_it_is_reported() -> None:
    def commit(member: str, offset: int, started: float, done: float) -> Committed:
        return Committed(
            client=member, group="g", member=member, topic="t", partition=0, offset=offset, started=started, done=done
        )

    forward = [commit("a", 5, 1.0, 1.1), commit("b", 9, 2.0, 2.1), commit("a", 7, 2.05, 2.2)]  # a's overlaps b's
    assert commit_regressed(_history(*forward)) == []
    back = commit_regressed(_history(*forward, commit("a", 6, 3.0, 3.1)))
    assert back == ["group g: a's commit of t-0 offset 6 acknowledged at 3.100, after b's commit of offset 9 was "
                    "acknowledged at 2.100"]  # fmt: skip


def test_a_partition_owned_by_two_members_at_once_is_reported() -> None:
    a = Owned(client="a", group="g", member="a", topic="t", partition=0, since=1.0, until=5.0)
    b_after = Owned(client="b", group="g", member="b", topic="t", partition=0, since=5.0, until=None)
    other = Owned(client="c", group="g", member="c", topic="t", partition=1, since=1.0, until=None)
    assert owned_by_two(_history(a, b_after, other)) == []
    b_early = Owned(client="b", group="g", member="b", topic="t", partition=0, since=4.0, until=None)
    overlap = owned_by_two(_history(a, b_early))
    assert len(overlap) == 1
    assert "t-0 owned by a" in overlap[0]
    # An ownership recorded open at the assignment and closed at the revocation is one.
    opened = Owned(client="a", group="g", member="a", topic="t", partition=0, since=1.0, until=None)
    assert owned_by_two(_history(opened, a, b_after)) == []
    # One never closed lasts until its member was SIGKILLed; without a kill, forever.
    assert owned_by_two(_history(opened, Fault(what="SIGKILL", target="a", at=5.0), b_after)) == []
    assert len(owned_by_two(_history(opened, b_after))) == 1


def test_a_stored_record_the_group_never_read_is_reported() -> None:
    stored = [Stored(topic="t", partition=0, offset=o, value=b"v%d" % o) for o in range(2)]
    assert lost_to_group(_history(*stored, _read("a", 0, 0, 1), _read("b", 1, 0, 1)), "g") == []
    assert lost_to_group(_history(*stored, _read("a", 0, 0, 1)), "g") == ["group g never read t-0@1 ('v1')"]


def _ack(
    member: str, offset: int, started: float, done: float, *, ack: AckKind = "accept", outcome: CommitOutcome = "acked"
) -> Acknowledged:
    return Acknowledged(
        client=member,
        group="g",
        member=member,
        topic="t",
        partition=0,
        offset=offset,
        ack=ack,
        outcome=outcome,
        started=started,
        done=done,
    )


def test_a_record_delivered_while_another_member_held_its_lock_is_reported() -> None:
    a = _read("a", 0, requested=10.0, received=10.1, count=1)
    # B gets it after A's lock (counted from A's request) ran out: a redelivery, allowed.
    after_lock = _read("b", 0, requested=12.0, received=12.1, count=2)
    assert held_by_two(_history(a, after_lock), LOCK_MS) == []
    # ...or after A released it, or after A began to leave.
    released = _read("b", 0, requested=11.0, received=11.1, count=2)
    assert held_by_two(_history(a, _ack("a", 0, 10.5, 10.6, ack="release"), released), LOCK_MS) == []
    assert held_by_two(_history(a, Left(client="a", group="g", member="a", at=10.5), released), LOCK_MS) == []
    # ...or after A was SIGKILLed: its connection, and with it its share session, closed.
    assert held_by_two(_history(a, Fault(what="SIGKILL", target="a", at=10.5), released), LOCK_MS) == []
    # A SIGSTOPped member still holds its records: its connection is open.
    assert len(held_by_two(_history(a, Fault(what="SIGSTOP", target="a", at=10.5), released), LOCK_MS)) == 1
    # B gets it while A's lock certainly runs and A has neither acknowledged nor left.
    double = held_by_two(_history(a, released), LOCK_MS)
    assert len(double) == 1
    assert "t-0@0 delivered to b at 11.100" in double[0]
    assert "while a held it" in double[0]


def test_one_delivery_count_handed_out_twice_is_reported() -> None:
    ok = [_read("a", 0, 1, 1.1, count=1), _read("b", 0, 5, 5.1, count=2), _read("a", 1, 1, 1.1, count=1)]
    assert repeated_delivery_count(_history(*ok)) == []
    twice = repeated_delivery_count(_history(*ok, _read("c", 0, 9, 9.1, count=2)))
    assert twice == ["group g: t-0@0 delivery 2 given to b at 5.100 and to c at 9.100"]
    # A session that ends takes its deliveries back (Kafka's): the count may repeat after it.
    gone = Fault(what="SIGKILL", target="b", at=6.0)
    assert repeated_delivery_count(_history(*ok, gone, _read("c", 0, 9, 9.1, count=2))) == []
    assert len(repeated_delivery_count(_history(*ok, gone, _read("c", 0, 5.5, 5.6, count=2)))) == 1


def test_an_accepted_record_delivered_again_is_reported() -> None:
    first = _read("a", 0, 1.0, 1.1, count=1)
    accepted = _ack("a", 0, 1.2, 1.3)
    assert accepted_redelivered(_history(first, accepted)) == []
    # An acceptance the broker refused (the lock had run out) allows the redelivery.
    refused = _ack("a", 0, 1.2, 1.3, outcome="failed")
    assert accepted_redelivered(_history(first, refused, _read("b", 0, 5.0, 5.1, count=2))) == []
    again = accepted_redelivered(_history(first, accepted, _read("b", 0, 5.0, 5.1, count=2)))
    assert len(again) == 1
    assert "delivered to b at 5.100 (delivery 2), after a's acceptance" in again[0]


def test_a_transaction_partly_visible_or_committed_and_missing_is_reported() -> None:
    def txn(seq: int, outcome: TxnOutcome, *values: bytes) -> Transaction:
        return Transaction(
            client="p",
            transactional_id="tx",
            sequence=seq,
            topic="t",
            values=values,
            outcome=outcome,
        )

    stored = [Stored(topic="t", partition=0, offset=i, value=v) for i, v in enumerate([b"a1", b"a2", b"c1"])]
    good = [txn(0, "committed", b"a1", b"a2"), txn(1, "aborted", b"b1", b"b2"), txn(2, "unknown", b"c1")]
    assert partial_transactions(_history(*stored, *good)) == []
    assert partial_transactions(_history(*stored, txn(3, "unknown", b"d1"))) == []  # unknown: either way
    # Recorded unknown before its commit, then committed: judged as committed.
    assert len(partial_transactions(_history(*stored, txn(3, "unknown", b"d1"), txn(3, "committed", b"d1")))) == 1
    half = partial_transactions(_history(*stored, txn(4, "unknown", b"a1", b"x")))
    assert half == ["p's tx transaction 4 (unknown, 2 records): 1 visible, missing e.g. ['x']"]
    assert partial_transactions(_history(*stored, txn(5, "committed", b"y"))) == [
        "p's tx transaction 5 (committed, 1 records): reported committed, none visible"
    ]
    assert partial_transactions(_history(*stored, txn(6, "aborted", b"c1"))) == [
        "p's tx transaction 6 (aborted, 1 records): reported aborted, all visible"
    ]


def test_histories_written_as_json_lines_load_back_even_with_a_torn_last_line(tmp_path: Path) -> None:
    """A client process appends its events; SIGKILL may cut its last line short."""
    path = tmp_path / "client.jsonl"
    events: list[Event] = [
        _read("a", 0, 1.0, 1.1, count=1),
        _ack("a", 0, 1.2, 1.3),
        Produced(client="p", topic="t", value=bytes(range(256)), partition=1, offset=7),
        Transaction(
            client="p", transactional_id="tx", sequence=1, topic="t", values=(b"\x00\xff",), outcome="committed"
        ),
        Fault(what="SIGKILL", target="broker", at=3.0),
    ]
    for e in events:
        append_jsonl(path, e)
    with path.open("a") as f:
        f.write('{"kind":"read","client":"a","gro')
    h = History()
    h.load(path)
    assert h.events == events
    assert "read=1" in h.summary()
    assert "faults: SIGKILL broker" in h.summary()
