"""The transaction APIs byte for byte over a real socket: Kafka's error codes for every kind of
bad request (an empty id, a timeout beyond the maximum, a stale epoch, an unknown partition, a
transactional batch for a partition outside the transaction, a client's control batch, EndTxn
with nothing open), AddPartitionsToTxn v4's verify-only form, and the records and markers a
commit and an abort leave in the log."""

from __future__ import annotations

import dataclasses
import importlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnRequest as AddPartitionsV3
from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnTopic as TopicV3
from kio.schema.add_partitions_to_txn.v4.request import AddPartitionsToTxnRequest as AddPartitionsV4
from kio.schema.add_partitions_to_txn.v4.request import AddPartitionsToTxnTopic as TopicV4
from kio.schema.add_partitions_to_txn.v4.request import AddPartitionsToTxnTransaction
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.txn_offset_commit.v3.request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from kio.schema.types import GroupId, ProducerId, TopicName, TransactionalId
from kio.static.primitive import Records, i16, i32, i64

from broker.protocol.batch import ATTR_CONTROL, ATTR_TRANSACTIONAL, iter_headers
from broker.protocol.control import ControlType, read_marker
from broker.protocol.records import Record, build_batch
from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import KafkaConnection, connect, ms

TOPIC = "wire"
READ_COMMITTED = 1


@dataclasses.dataclass
class Txn:
    conn: KafkaConnection
    transactional_id: str
    producer_id: int
    epoch: int
    sequence: int = 0

    def add(self, *partitions: int, topic: str = TOPIC, epoch: int | None = None) -> dict[int, ErrorCode]:
        response = self.conn.request(
            AddPartitionsV3(
                v3_and_below_transactional_id=TransactionalId(self.transactional_id),
                v3_and_below_producer_id=ProducerId(i64(self.producer_id)),
                v3_and_below_producer_epoch=i16(self.epoch if epoch is None else epoch),
                v3_and_below_topics=(TopicV3(name=TopicName(topic), partitions=tuple(i32(p) for p in partitions)),),
            )
        )
        [result] = response.results_by_topic_v3_and_below
        return {int(p.partition_index): p.partition_error_code for p in result.results_by_partition}

    def produce(self, partition: int, *values: bytes, transactional_id: str | None = "") -> ErrorCode:
        batch = build_batch(
            [Record(i, int(time.time() * 1000), None, v) for i, v in enumerate(values)],
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            base_sequence=self.sequence,
            attributes_extra=ATTR_TRANSACTIONAL,
        )
        error = produce(
            self.conn, partition, batch, self.transactional_id if transactional_id == "" else transactional_id
        )
        if error == ErrorCode.none:
            self.sequence += len(values)
        return error

    def end(self, *, commit: bool, epoch: int | None = None) -> ErrorCode:
        response = self.conn.request(
            EndTxnRequest(
                transactional_id=TransactionalId(self.transactional_id),
                producer_id=ProducerId(i64(self.producer_id)),
                producer_epoch=i16(self.epoch if epoch is None else epoch),
                committed=commit,
            )
        )
        return response.error_code  # type: ignore[no-any-return]


def produce(conn: KafkaConnection, partition: int, batch: bytes, transactional_id: str | None) -> ErrorCode:
    response = conn.request(
        ProduceRequest(
            transactional_id=None if transactional_id is None else TransactionalId(transactional_id),
            acks=i16(-1),
            timeout=ms(10_000),
            topic_data=(
                TopicProduceData(
                    name=TopicName(TOPIC),
                    partition_data=(PartitionProduceData(index=i32(partition), records=Records(batch)),),
                ),
            ),
        )
    )
    return response.responses[0].partition_responses[0].error_code  # type: ignore[no-any-return]


def init(conn: KafkaConnection, transactional_id: str, timeout_ms: int = 60_000) -> Any:
    return conn.request(
        InitProducerIdRequest(
            transactional_id=TransactionalId(transactional_id),
            transaction_timeout=ms(timeout_ms),
            producer_id=ProducerId(i64(-1)),
            producer_epoch=i16(-1),
        )
    )


@pytest.fixture
def conn(broker: ThreadBroker) -> Iterator[KafkaConnection]:
    with connect(broker.bootstrap) as c:
        c.create_topic(TOPIC, 2)
        yield c


def begin(conn: KafkaConnection, transactional_id: str) -> Txn:
    answer = init(conn, transactional_id)
    assert answer.error_code == ErrorCode.none
    return Txn(conn, transactional_id, int(answer.producer_id), int(answer.producer_epoch))


def test_init_refuses_an_empty_id_and_a_timeout_beyond_the_maximum(conn: KafkaConnection) -> None:
    assert init(conn, "").error_code == ErrorCode.invalid_request
    too_long = init(conn, "slow", timeout_ms=900_001)
    assert (too_long.error_code, too_long.producer_id) == (ErrorCode.invalid_transaction_timeout, -1)
    first, again = begin(conn, "twice"), begin(conn, "twice")
    assert (again.producer_id, again.epoch) == (first.producer_id, first.epoch + 1)  # the epoch bump


def test_partitions_are_checked_and_a_stale_epoch_is_fenced(conn: KafkaConnection) -> None:
    txn = begin(conn, "checked")
    unknown = txn.add(0, topic="no-such-topic")
    assert unknown == {0: ErrorCode.unknown_topic_or_partition}
    assert txn.add(0, 7) == {0: ErrorCode.operation_not_attempted, 7: ErrorCode.unknown_topic_or_partition}
    # v3: PRODUCER_FENCED, as Kafka (v0 and v1 say INVALID_PRODUCER_EPOCH)
    assert txn.add(0, epoch=txn.epoch - 1 if txn.epoch else 5) == {0: ErrorCode.producer_fenced}
    internal = txn.add(0, topic="__consumer_offsets")
    assert internal == {0: ErrorCode.unknown_topic_or_partition}  # only AddOffsetsToTxn adds it
    assert txn.end(commit=True) == ErrorCode.invalid_txn_state  # nothing was added: nothing to end


def test_transactional_produce_is_verified_against_the_transaction(broker: ThreadBroker, conn: KafkaConnection) -> None:
    txn = begin(conn, "verified")
    assert txn.produce(0, b"early") == ErrorCode.invalid_txn_state  # partition 0 not added yet
    assert txn.add(0) == {0: ErrorCode.none}
    assert txn.produce(1, b"elsewhere") == ErrorCode.invalid_txn_state
    assert txn.produce(0, b"no-id", transactional_id=None) == ErrorCode.transactional_id_authorization_failed
    assert txn.produce(0, b"in", b"txn") == ErrorCode.none
    control = build_batch(
        [Record(0, 0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
        producer_id=txn.producer_id,
        producer_epoch=txn.epoch,
        attributes_extra=ATTR_TRANSACTIONAL | ATTR_CONTROL,
    )
    assert produce(conn, 0, control, "verified") == ErrorCode.invalid_record  # markers are the broker's
    # AddPartitionsToTxn v4, the brokers' verify-only form: says whether each partition is in.
    verify = conn.request(
        AddPartitionsV4(
            transactions=(
                AddPartitionsToTxnTransaction(
                    transactional_id=TransactionalId("verified"),
                    producer_id=ProducerId(i64(txn.producer_id)),
                    producer_epoch=i16(txn.epoch),
                    verify_only=True,
                    topics=(TopicV4(name=TopicName(TOPIC), partitions=(i32(0),)),),
                ),
            )
        )
    )
    [result] = verify.results_by_transaction
    assert [p.partition_error_code for t in result.topic_results for p in t.results_by_partition] == [ErrorCode.none]
    assert txn.end(commit=True) == ErrorCode.none
    assert txn.end(commit=True) == ErrorCode.none  # a retry of the request that completed it
    assert txn.end(commit=False) == ErrorCode.invalid_txn_state
    plog = broker.broker.store.partition_log(TOPIC, 0)
    assert plog is not None
    data = plog.read(0, 1 << 20)
    headers = [h for _, h in iter_headers(data)]
    assert [(h.is_transactional, h.is_control, h.records_count) for h in headers] == [(True, False, 2), (True, True, 1)]
    marker = read_marker(data[headers[0].size :])
    assert (marker.producer_id, marker.control) == (txn.producer_id, ControlType.COMMIT)


def test_offsets_need_their_group_added_and_list_filters_by_state(conn: KafkaConnection) -> None:
    txn = begin(conn, "offsets")
    commit = TxnOffsetCommitRequest(
        transactional_id=TransactionalId("offsets"),
        group_id=GroupId("g"),
        producer_id=ProducerId(i64(txn.producer_id)),
        producer_epoch=i16(txn.epoch),
        generation_id=i32(-1),
        member_id="",
        group_instance_id=None,
        topics=(
            TxnOffsetCommitRequestTopic(
                name=TopicName(TOPIC),
                partitions=(
                    TxnOffsetCommitRequestPartition(
                        partition_index=i32(0),
                        committed_offset=i64(3),
                        committed_leader_epoch=i32(-1),
                        committed_metadata="",
                    ),
                ),
            ),
        ),
    )
    assert conn.request(commit).topics[0].partitions[0].error_code == ErrorCode.invalid_txn_state
    added = conn.request(
        AddOffsetsToTxnRequest(
            transactional_id=TransactionalId("offsets"),
            producer_id=ProducerId(i64(txn.producer_id)),
            producer_epoch=i16(txn.epoch),
            group_id=GroupId("g"),
        )
    )
    assert added.error_code == ErrorCode.none
    assert conn.request(commit).topics[0].partitions[0].error_code == ErrorCode.none
    listed = conn.request(
        ListTransactionsRequest(state_filters=("Ongoing", "Nonsense"), producer_id_filters=(), duration_filter=i64(-1))
    )
    assert [t.transactional_id for t in listed.transaction_states] == ["offsets"]
    assert list(listed.unknown_state_filters) == ["Nonsense"]
    assert txn.end(commit=False) == ErrorCode.none


def test_the_broker_bounds_transactional_ids_and_partitions_per_transaction(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    """A client cannot grow the coordinator without bound: ids beyond max.transactional.ids and
    partitions beyond max.partitions.per.transaction are POLICY_VIOLATION, and the ids and
    transactions already there keep working."""
    small = broker_factory({"max.transactional.ids": "2", "max.partitions.per.transaction": "1"}, name="bounded")
    with connect(small.bootstrap) as c:
        c.create_topic(TOPIC, 2)
        first, _ = begin(c, "one"), begin(c, "two")
        third = init(c, "three")
        assert (third.error_code, third.producer_id) == (ErrorCode.policy_violation, -1)
        assert begin(c, "one").epoch == first.epoch + 1  # a known id still gets its bump
        again = begin(c, "one")
        assert again.add(0) == {0: ErrorCode.none}
        assert again.add(1) == {1: ErrorCode.policy_violation}
        assert again.produce(0, b"kept") == ErrorCode.none
        assert again.end(commit=True) == ErrorCode.none
        assert sorted(small.broker.transactions.txns) == ["one", "two"]


@pytest.mark.parametrize(
    ("version", "expected"), [(1, ErrorCode.invalid_producer_epoch), (2, ErrorCode.producer_fenced)]
)
def test_a_stale_epoch_is_producer_fenced_from_v2_as_kafka(conn: KafkaConnection, version: int, expected: Any) -> None:
    """KIP-588, as Kafka 4.1 answers AddPartitionsToTxn, AddOffsetsToTxn and EndTxn."""
    txn = begin(conn, f"stale-v{version}")
    begin(conn, f"stale-v{version}")  # the next instance bumps the epoch: txn's is stale
    ids = {
        "transactional_id": txn.transactional_id,
        "producer_id": i64(txn.producer_id),
        "producer_epoch": i16(txn.epoch),
    }
    add: Any = importlib.import_module(f"kio.schema.add_partitions_to_txn.v{version}.request")
    added = conn.request(
        add.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=txn.transactional_id,
            v3_and_below_producer_id=i64(txn.producer_id),
            v3_and_below_producer_epoch=i16(txn.epoch),
            v3_and_below_topics=(add.AddPartitionsToTxnTopic(name=TOPIC, partitions=(i32(0),)),),
        )
    )
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == expected
    offsets: Any = importlib.import_module(f"kio.schema.add_offsets_to_txn.v{version}.request")
    assert conn.request(offsets.AddOffsetsToTxnRequest(**ids, group_id="g")).error_code == expected
    end: Any = importlib.import_module(f"kio.schema.end_txn.v{version}.request")
    assert conn.request(end.EndTxnRequest(**ids, committed=True)).error_code == expected
