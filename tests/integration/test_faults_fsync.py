"""A failed fsync is a verdict, not a retry: the broker runs under libfiu, its `fdatasync`
fails for real (EIO), and from then on nothing is acknowledged from the log directory —
produce, commits, transaction state, topic records — even once fsync works again; a restart
recovers everything that was acknowledged, exactly once.

The producer's retry of the batch whose fsync failed is the case that mattered: its sequence
was already recorded, so a broker that trusted the next fsync answered the retry as a
duplicate of bytes the disk may never have taken."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable

import pytest
from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.offset_commit.v9 import request as commit
from kio.schema.offset_fetch.v9.request import OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kio.schema.types import GroupId, ProducerId, TopicName, TransactionalId
from kio.static.primitive import i8, i16, i32, i64

from tests.support import fiu
from tests.support.harness import BrokerProcess
from tests.support.kafka_wire import KafkaConnection, batch, connect, ms

pytestmark = pytest.mark.fault

TOPIC, GROUP = "orders", "billing"


def _commit(c: KafkaConnection, offset: int) -> ErrorCode:
    request = commit.OffsetCommitRequest(
        group_id=GroupId(GROUP),
        generation_id_or_member_epoch=i32(-1),
        member_id="",
        group_instance_id=None,
        topics=(
            commit.OffsetCommitRequestTopic(
                name=TopicName(TOPIC),
                partitions=(
                    commit.OffsetCommitRequestPartition(
                        partition_index=i32(0), committed_offset=i64(offset), committed_metadata=None
                    ),
                ),
            ),
        ),
    )
    return ErrorCode(c.request(request).topics[0].partitions[0].error_code)


def _committed(c: KafkaConnection) -> tuple[ErrorCode, int]:
    request = OffsetFetchRequest(
        groups=(
            OffsetFetchRequestGroup(
                group_id=GroupId(GROUP),
                topics=(OffsetFetchRequestTopics(name=TopicName(TOPIC), partition_indexes=(i32(0),)),),
            ),
        ),
        require_stable=False,
    )
    group = c.request(request).groups[0]
    offset = group.topics[0].partitions[0].committed_offset if group.topics else -1
    return ErrorCode(group.error_code), int(offset)


def _health(proc: BrokerProcess) -> int:
    try:
        with urllib.request.urlopen(f"{proc.admin_url}/healthz", timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return e.code


def _offline_metric(proc: BrokerProcess) -> float:
    with urllib.request.urlopen(f"{proc.admin_url}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("streamshop_log_dir_offline "):
                return float(line.split()[1])
    raise AssertionError("no streamshop_log_dir_offline metric")


def test_a_failed_fsync_takes_the_log_directory_offline_and_nothing_after_it_is_acknowledged(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    proc = broker_process_factory(wrapper=fiu.fiu_run())
    assert proc.proc is not None
    pid = proc.proc.pid
    told: dict[bytes, int] = {}  # value -> offset the broker acknowledged it at
    with connect(proc.bootstrap) as c:
        assert c.create_topic(TOPIC, 1).error_code == ErrorCode.none
        producer_id, epoch = c.init_producer_id()
        for seq in range(5):
            value = f"before-{seq}".encode()
            answer = c.produce(
                TOPIC, 0, batch([value], producer_id=producer_id, producer_epoch=epoch, base_sequence=seq)
            )
            assert answer.error_code == ErrorCode.none
            told[value] = int(answer.base_offset)
        assert _commit(c, 3) == ErrorCode.none
        assert _health(proc) == 200
        assert _offline_metric(proc) == 0

        fiu.enable(pid, fiu.FDATASYNC)  # EIO from every fdatasync from now on
        lost = batch([b"unsure"], producer_id=producer_id, producer_epoch=epoch, base_sequence=5)
        assert c.produce(TOPIC, 0, lost).error_code == ErrorCode.kafka_storage_error
        fiu.disable(pid, fiu.FDATASYNC)  # the disk "works" again: that proves nothing

        # The retry of the same batch (same producer sequence): not a duplicate to acknowledge.
        assert c.produce(TOPIC, 0, lost).error_code == ErrorCode.kafka_storage_error
        after = batch([b"after"], producer_id=producer_id, producer_epoch=epoch, base_sequence=6)
        assert c.produce(TOPIC, 0, after, acks=1).error_code == ErrorCode.kafka_storage_error
        fetched = c.fetch_partition(TOPIC, 0, 0)
        assert fetched.error_code == ErrorCode.kafka_storage_error
        # __consumer_offsets: the commit is refused and nothing possibly unwritten is served.
        assert _commit(c, 4) == ErrorCode.not_coordinator
        assert _committed(c)[0] == ErrorCode.not_coordinator
        found = c.request(FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(GROUP,)))
        assert found.coordinators[0].error_code == ErrorCode.coordinator_not_available
        # __transaction_state and __cluster_metadata refuse their writes too.
        txn = c.request(
            InitProducerIdRequest(
                transactional_id=TransactionalId("tx"),
                transaction_timeout=ms(60_000),
                producer_id=ProducerId(i64(-1)),
                producer_epoch=i16(-1),
            )
        )
        assert txn.error_code == ErrorCode.coordinator_not_available
        assert c.create_topic("later", 1).error_code == ErrorCode.kafka_storage_error
        dirs = c.request(DescribeLogDirsRequest(topics=None))
        assert [r.error_code for r in dirs.results] == [ErrorCode.kafka_storage_error]
        assert _health(proc) == 503
        assert _offline_metric(proc) == 1
    logged = proc.log_path.read_text()
    assert "log directory offline" in logged
    assert "Input/output error" in logged

    assert proc.stop() == 0  # a clean stop, but no clean-shutdown marker: the next start recovers
    assert not (proc.data_dir / ".clean-shutdown").exists()
    proc.wrapper = []
    proc.start()
    with connect(proc.bootstrap) as c:
        records = c.read_all(TOPIC, 0)
        values = [r.value for r in records]
        # Everything acknowledged, at its offset, once; the unacknowledged batch at most once.
        for value, offset in told.items():
            assert values.count(value) == 1
            assert records[values.index(value)].offset == offset
        assert values.count(b"unsure") <= 1
        assert b"after" not in values
        # The producer's retry is now judged against what the restart recovered from disk.
        retry = c.produce(TOPIC, 0, lost)
        assert retry.error_code == ErrorCode.none
        assert [r.value for r in c.read_all(TOPIC, 0)].count(b"unsure") == 1
        error, offset = _committed(c)
        assert error == ErrorCode.none
        assert offset in (3, 4)  # the acknowledged commit, or the refused one if its bytes made it
        assert c.create_topic("later", 1).error_code == ErrorCode.none
        dirs = c.request(DescribeLogDirsRequest(topics=None))
        assert [r.error_code for r in dirs.results] == [ErrorCode.none]
    assert _health(proc) == 200
