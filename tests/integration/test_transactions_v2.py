"""Transactions v2 (KIP-890 part 2, finalized by ApiVersions as in Kafka 4.1) byte for byte over
a real socket, each answer as a Kafka 4.1 broker gives it: a transactional Produce v12+ adds its
partition and a TxnOffsetCommit v5 its group; EndTxn v5 bumps the epoch at every end, its
markers carry the new one, its retries and empty aborts are told apart by the epoch alone, and
an exhausted epoch moves the producer to a new id; verification answers TRANSACTION_ABORTABLE
from Produce v11 and AddPartitionsToTxn v5."""

from __future__ import annotations

import dataclasses
import importlib
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.add_partitions_to_txn.v5.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
)
from kio.schema.end_txn.v5.request import EndTxnRequest
from kio.schema.init_producer_id.v5.request import InitProducerIdRequest
from kio.schema.txn_offset_commit.v5.request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from kio.static.primitive import Records, i16, i32, i64

from broker.protocol.batch import ATTR_TRANSACTIONAL, iter_headers
from broker.protocol.errors import ErrorCode
from broker.protocol.records import Record, build_batch
from broker.txn.state import MAX_EPOCH, TxnState
from tests.integration.test_metadata_topic_ids import _topic_id
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import confluent_consume, create_topic
from tests.support.kafka_wire import KafkaConnection, connect, ms

TOPIC = "tv2"


@dataclasses.dataclass
class Producer:
    """A transactional producer of transactions v2, one request at a time."""

    broker: ThreadBroker
    conn: KafkaConnection
    transactional_id: str
    producer_id: int = -1
    epoch: int = -1
    sequences: dict[int, int] = dataclasses.field(default_factory=dict)

    def init(self, timeout_ms: int = 60_000, producer_id: int = -1, epoch: int = -1) -> tuple[ErrorCode, int, int]:
        answer = self.conn.request(
            InitProducerIdRequest(
                transactional_id=self.transactional_id,
                transaction_timeout=ms(timeout_ms),
                producer_id=i64(producer_id),
                producer_epoch=i16(epoch),
            )
        )
        if answer.error_code == ErrorCode.none:
            self.producer_id, self.epoch, self.sequences = int(answer.producer_id), int(answer.producer_epoch), {}
        return answer.error_code, int(answer.producer_id), int(answer.producer_epoch)

    def produce(self, partition: int, value: bytes, *, version: int = 12, epoch: int | None = None) -> ErrorCode:
        epoch = self.epoch if epoch is None else epoch
        sequence = self.sequences.get(partition, 0) if epoch == self.epoch else 0
        records = build_batch(
            [Record(0, int(time.time() * 1000), None, value)],
            producer_id=self.producer_id,
            producer_epoch=epoch,
            base_sequence=sequence,
            attributes_extra=ATTR_TRANSACTIONAL,
        )
        mod: Any = importlib.import_module(f"kio.schema.produce.v{version}.request")
        topic = {"topic_id": _topic_id(self.broker, TOPIC)} if version >= 13 else {"name": TOPIC}
        answer = self.conn.request(
            mod.ProduceRequest(
                transactional_id=self.transactional_id,
                acks=i16(-1),
                timeout=ms(10_000),
                topic_data=(
                    mod.TopicProduceData(
                        **topic,
                        partition_data=(mod.PartitionProduceData(index=i32(partition), records=Records(records)),),
                    ),
                ),
            )
        )
        error: ErrorCode = answer.responses[0].partition_responses[0].error_code
        if error == ErrorCode.none and epoch == self.epoch:
            self.sequences[partition] = sequence + 1
        return error

    def end(self, *, commit: bool, epoch: int | None = None, producer_id: int | None = None) -> tuple[Any, ...]:
        """EndTxn v5: (error, producer id, epoch); on success the producer goes on with them."""
        answer = self.conn.request(
            EndTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=i64(self.producer_id if producer_id is None else producer_id),
                producer_epoch=i16(self.epoch if epoch is None else epoch),
                committed=commit,
            )
        )
        if answer.error_code == ErrorCode.none:
            if (int(answer.producer_id), int(answer.producer_epoch)) != (self.producer_id, self.epoch):
                self.sequences = {}  # a new epoch starts every partition's sequence at 0
            self.producer_id, self.epoch = int(answer.producer_id), int(answer.producer_epoch)
        return answer.error_code, int(answer.producer_id), int(answer.producer_epoch)

    def state(self) -> Any:
        return self.broker.call(lambda: self.broker.broker.transactions.txns[self.transactional_id])


@pytest.fixture
def conn(broker: ThreadBroker) -> Any:
    create_topic(broker.bootstrap, TOPIC, 2)
    with connect(broker.bootstrap) as c:
        yield c


def _markers(broker: ThreadBroker, partition: int) -> list[tuple[int, int]]:
    """(producer id, epoch) of every control batch of a partition, in log order."""
    plog = broker.broker.store.partition_log(TOPIC, partition)
    data = broker.call(lambda: plog.read(0, 1 << 20))
    return [(h.producer_id, h.producer_epoch) for _, h in iter_headers(data) if h.is_control]


def test_produce_v12_and_v13_add_their_partitions_and_a_v5_end_bumps_the_epoch_its_markers_carry(
    broker: ThreadBroker, conn: KafkaConnection
) -> None:
    p = Producer(broker, conn, "tv2-produce")
    p.init()
    pid, first = p.producer_id, p.epoch
    assert p.produce(0, b"one") == ErrorCode.none  # v12: no AddPartitionsToTxn first
    assert p.produce(1, b"two", version=13) == ErrorCode.none  # v13: the topic by its id
    state = p.state()
    assert (state.state, state.partitions) == (TxnState.ONGOING, frozenset({(TOPIC, 0), (TOPIC, 1)}))
    assert p.end(commit=True) == (ErrorCode.none, pid, first + 1)
    assert _markers(broker, 0) == _markers(broker, 1) == [(pid, first + 1)]
    # The old epoch is fenced; the new one starts its sequences again at 0.
    assert p.produce(0, b"zombie", epoch=first) == ErrorCode.invalid_producer_epoch
    assert p.produce(0, b"aborted") == ErrorCode.none
    assert p.end(commit=False) == (ErrorCode.none, pid, first + 2)
    assert _markers(broker, 0) == [(pid, first + 1), (pid, first + 2)]
    got = confluent_consume(
        broker.bootstrap, [TopicPartition(TOPIC, n, 0) for n in (0, 1)], 2, {"isolation.level": "read_committed"}
    )
    assert sorted(g.value for g in got) == [b"one", b"two"]


def test_v5_ends_tell_retries_from_the_next_end_by_the_epoch_as_kafka(
    broker: ThreadBroker, conn: KafkaConnection
) -> None:
    """Kafka's table for a v5 EndTxn with no transaction open, by the request's epoch: the
    current one, or one below it (a retry of the end that bumped it)."""
    p = Producer(broker, conn, "tv2-ends")
    p.init()
    pid, e = p.producer_id, p.epoch
    assert p.end(commit=True) == (ErrorCode.invalid_txn_state, -1, -1)  # Empty: nothing to commit
    assert p.end(commit=False) == (ErrorCode.none, pid, e + 1)  # Empty: an abort still bumps
    assert p.end(commit=False, epoch=e) == (ErrorCode.none, pid, e + 1)  # its retry
    assert p.end(commit=True, epoch=e) == (ErrorCode.invalid_txn_state, -1, -1)  # CompleteAbort
    assert p.end(commit=False) == (ErrorCode.none, pid, e + 2)  # CompleteAbort, current: bumps
    assert p.produce(0, b"x") == ErrorCode.none
    assert p.end(commit=True) == (ErrorCode.none, pid, e + 3)
    assert p.end(commit=True, epoch=e + 2) == (ErrorCode.none, pid, e + 3)  # retry of the commit
    assert p.end(commit=False, epoch=e + 2) == (ErrorCode.invalid_txn_state, -1, -1)
    assert p.end(commit=True) == (ErrorCode.invalid_txn_state, -1, -1)  # CompleteCommit, current
    assert p.end(commit=False, epoch=e) == (ErrorCode.producer_fenced, -1, -1)
    assert p.end(commit=False, producer_id=pid + 100) == (ErrorCode.invalid_producer_id_mapping, -1, -1)
    assert p.state().state == TxnState.COMPLETE_COMMIT


def test_a_v5_txn_offset_commit_adds_its_group_and_the_offsets_commit_with_the_transaction(
    broker: ThreadBroker, conn: KafkaConnection
) -> None:
    p = Producer(broker, conn, "tv2-offsets")
    p.init()
    request = TxnOffsetCommitRequest(
        transactional_id=p.transactional_id,
        group_id="tv2-group",
        producer_id=i64(p.producer_id),
        producer_epoch=i16(p.epoch),
        generation_id=i32(-1),
        member_id="",
        group_instance_id=None,
        topics=(
            TxnOffsetCommitRequestTopic(
                name=TOPIC,
                partitions=(
                    TxnOffsetCommitRequestPartition(
                        partition_index=i32(0),
                        committed_offset=i64(7),
                        committed_leader_epoch=i32(-1),
                        committed_metadata="",
                    ),
                ),
            ),
        ),
    )
    stale = conn.request(dataclasses.replace(request, producer_epoch=i16(p.epoch + 1)))
    assert [part.error_code for t in stale.topics for part in t.partitions] == [ErrorCode.invalid_producer_epoch]
    answer = conn.request(request)  # no AddOffsetsToTxn first
    assert [part.error_code for t in answer.topics for part in t.partitions] == [ErrorCode.none]
    state = p.state()
    assert state.state == TxnState.ONGOING
    assert [t for t, _ in state.partitions] == ["__consumer_offsets"]
    assert p.produce(1, b"with-offsets") == ErrorCode.none
    assert p.end(commit=True)[0] == ErrorCode.none
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tv2-group"})
    try:
        [committed] = consumer.committed([TopicPartition(TOPIC, 0)], timeout=15)
    finally:
        consumer.close()
    assert committed.offset == 7


def _verify(conn: KafkaConnection, p: Producer, partition: int, *, verify_only: bool) -> tuple[ErrorCode, ...]:
    answer = conn.request(
        AddPartitionsToTxnRequest(
            transactions=(
                AddPartitionsToTxnTransaction(
                    transactional_id=p.transactional_id,
                    producer_id=i64(p.producer_id),
                    producer_epoch=i16(p.epoch),
                    verify_only=verify_only,
                    topics=(AddPartitionsToTxnTopic(name=TOPIC, partitions=(i32(partition),)),),
                ),
            )
        )
    )
    assert answer.error_code == ErrorCode.none
    return tuple(
        part.partition_error_code
        for t in answer.results_by_transaction[0].topic_results
        for part in t.results_by_partition
    )


def test_verification_is_transaction_abortable_from_produce_v11_and_add_partitions_v5(
    broker: ThreadBroker, conn: KafkaConnection
) -> None:
    """A partition outside the transaction: INVALID_TXN_STATE to a Produce up to v10,
    TRANSACTION_ABORTABLE to v11 (KIP-890's error), as Kafka; AddPartitionsToTxn v5, the brokers'
    form, verifies and adds."""
    p = Producer(broker, conn, "tv2-verify")
    p.init()
    assert p.produce(0, b"x", version=10) == ErrorCode.invalid_txn_state
    assert p.produce(0, b"x", version=11) == ErrorCode.transaction_abortable
    assert _verify(conn, p, 0, verify_only=True) == (ErrorCode.transaction_abortable,)
    assert _verify(conn, p, 0, verify_only=False) == (ErrorCode.none,)
    assert _verify(conn, p, 0, verify_only=True) == (ErrorCode.none,)
    assert p.produce(0, b"in", version=11) == ErrorCode.none
    stale = dataclasses.replace(p, epoch=p.epoch + 1)
    assert _verify(conn, stale, 0, verify_only=True) == (ErrorCode.producer_fenced,)
    assert _verify(conn, stale, 1, verify_only=False) == (ErrorCode.producer_fenced,)
    assert p.produce(0, b"stale", version=11, epoch=p.epoch + 1) == ErrorCode.invalid_producer_epoch
    assert p.end(commit=True)[0] == ErrorCode.none


def test_an_exhausted_epoch_moves_the_producer_to_a_new_id_when_its_transaction_completes(
    broker: ThreadBroker, conn: KafkaConnection
) -> None:
    p = Producer(broker, conn, "tv2-exhausted")
    p.init()
    old = p.producer_id
    coordinator = broker.broker.transactions
    broker.run(coordinator._store(p.state().evolve(producer_epoch=MAX_EPOCH), p.transactional_id))
    p.epoch = MAX_EPOCH
    assert p.produce(0, b"last") == ErrorCode.none
    error, new, epoch = p.end(commit=True)
    assert (error, epoch) == (ErrorCode.none, 0)
    assert new != old
    assert _markers(broker, 0) == [(old, MAX_EPOCH + 1)]  # the old id's transaction ends at 0x7FFF
    # A retry of that end, and of an InitProducerId, by the old id: the new one is the answer.
    assert p.end(commit=True, producer_id=old, epoch=MAX_EPOCH) == (ErrorCode.none, new, 0)
    assert p.init(producer_id=old, epoch=MAX_EPOCH) == (ErrorCode.none, new, 0)
    assert p.produce(1, b"new-id") == ErrorCode.none
    assert p.end(commit=True) == (ErrorCode.none, new, 1)
    broker.restart()
    state = broker.call(lambda: broker.broker.transactions.txns["tv2-exhausted"])
    assert (state.producer_id, state.producer_epoch, state.state) == (new, 1, TxnState.COMPLETE_COMMIT)


def test_a_timed_out_v2_transaction_is_aborted_and_its_producer_may_abort_it_again_as_kafka(
    broker: ThreadBroker, conn: KafkaConnection
) -> None:
    """The coordinator aborts it with the epoch bumped once; the producer's abort with its own
    epoch is then a retry of that end, as Kafka 4.1 answers it, and its commit is refused."""
    p = Producer(broker, conn, "tv2-timeout")
    p.init(timeout_ms=1)
    pid, e = p.producer_id, p.epoch
    assert p.produce(0, b"late") == ErrorCode.none
    time.sleep(0.01)
    broker.run(broker.broker.transactions.tick())
    assert (p.state().state, p.state().producer_epoch) == (TxnState.COMPLETE_ABORT, e + 1)
    assert p.end(commit=True, epoch=e) == (ErrorCode.invalid_txn_state, -1, -1)
    assert p.end(commit=False, epoch=e) == (ErrorCode.none, pid, e + 1)
    assert _markers(broker, 0) == [(pid, e + 1)]
