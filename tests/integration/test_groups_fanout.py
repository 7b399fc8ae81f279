"""Consumer groups read the same topic independently (fan-out), and within one group a
key's records arrive in the order they were produced.  Real aiokafka and confluent-kafka
consumers over real sockets, against the in-thread broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.group_clients import (
    CLIENTS,
    MemberPool,
    assert_each_exactly_once,
    keyed_records,
    member_pool,
    produce,
    seq_of,
    wait_balanced,
    wait_until,
)
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import create_topic


@pytest.fixture
def pool() -> Iterator[MemberPool]:
    with member_pool() as p:
        yield p


@pytest.mark.parametrize(
    ("sms_client", "email_client"),
    [("aiokafka", "aiokafka"), ("confluent", "confluent"), ("aiokafka", "confluent")],
)
def test_two_groups_on_one_topic_each_process_every_record_exactly_once(
    broker: ThreadBroker, pool: MemberPool, sms_client: str, email_client: str
) -> None:
    """Two groups of two members each (sms-sender and email-sender, as in the otp
    service) subscribe to one 4-partition topic; every produced record is processed by
    exactly one member of each group, once: the groups do not share or steal offsets."""
    create_topic(broker.bootstrap, "otp.requests", 4)
    sms = [pool.thread(sms_client, broker.bootstrap, "sms-sender", "otp.requests") for _ in range(2)]
    email = [pool.thread(email_client, broker.bootstrap, "email-sender", "otp.requests") for _ in range(2)]
    wait_balanced(sms, 4, sizes=[2, 2])  # two members each: both work
    wait_balanced(email, 4, sizes=[2, 2])
    owned = {m.name: m.assignment for m in sms + email}

    produced = produce(broker.bootstrap, "otp.requests", keyed_records(keys=16, per_key=25))
    assert len(produced) == 400
    for members in (sms, email):
        wait_until(
            lambda members=members: {(r.partition, r.offset) for m in members for r in m.processed} >= produced,
            10,
            f"group of {members} to process every record",
        )
    pool.close_all()

    for members in (sms, email):
        records = [r for m in members for r in m.processed]
        assert_each_exactly_once(records, produced)
        for m in members:  # only from the partitions the group gave it
            assert {r.partition for r in m.processed} <= owned[m.name]
    committed = broker.call(lambda: broker.broker.coordinator.committed("sms-sender"))
    assert {p: c.offset for (_t, p), c in committed.items()} == {
        p: 1 + max(o for q, o in produced if q == p) for p in range(4)
    }
    assert broker.call(lambda: set(broker.broker.coordinator.committed("email-sender"))) == {
        ("otp.requests", p) for p in range(4)
    }


@pytest.mark.parametrize("client", CLIENTS)
def test_a_keys_records_arrive_in_production_order_within_the_group(
    broker: ThreadBroker, pool: MemberPool, client: str
) -> None:
    """A group of 3 on 6 partitions while records of 24 keys (placed by the client's
    key partitioner) are produced in several rounds: for every key, the sequence numbers
    the group processed, in the order the group processed them, are exactly 0, 1, 2, ...
    n-1 — in order, none missing, none repeated."""
    create_topic(broker.bootstrap, "orders", 6)
    members = [pool.thread(client, broker.bootstrap, "order-projector", "orders") for _ in range(3)]
    wait_balanced(members, 6, sizes=[2, 2, 2])  # settled: no late joiner to rebalance for
    produced: set[tuple[int, int]] = set()
    rounds, per_round = 4, 10
    for r in range(rounds):  # consumption overlaps production
        produced |= produce(broker.bootstrap, "orders", keyed_records(keys=24, per_key=per_round, start=r * per_round))
    wait_until(
        lambda: {(r.partition, r.offset) for r in pool.journal.records()} >= produced, 10, "every record processed"
    )
    pool.close_all()

    journal = pool.journal.records()  # one total order: the members run in this process
    assert_each_exactly_once(journal, produced)
    by_key: dict[str, list[int]] = {}
    partitions_of_key: dict[str, set[int]] = {}
    for rec in journal:
        by_key.setdefault(rec.key, []).append(seq_of(rec.value))
        partitions_of_key.setdefault(rec.key, set()).add(rec.partition)
    assert len(by_key) == 24
    for key, seqs in by_key.items():
        assert seqs == list(range(rounds * per_round)), key
    assert all(len(p) == 1 for p in partitions_of_key.values())  # a key lives in one partition
    assert len({p for ps in partitions_of_key.values() for p in ps}) > 1  # and keys spread out
