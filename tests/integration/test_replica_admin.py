"""ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments and AlterReplicaLogDirs
over a real socket: the answers Kafka gives for a cluster of one broker, which is every
partition's only replica and leader and has one log directory."""

from __future__ import annotations

from typing import Any

from kio.schema.alter_partition_reassignments.v1.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.alter_replica_log_dirs.v2.request import (
    AlterReplicaLogDir,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirTopic,
)
from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest
from kio.schema.elect_leaders.v2.request import ElectLeadersRequest, TopicPartitions
from kio.schema.errors import ErrorCode
from kio.schema.list_partition_reassignments.v0.request import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsTopics,
)
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i32

from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import KafkaConnection, connect, ms

NODE = 1  # the test broker's node.id


def _elect(conn: KafkaConnection, election: int, asked: dict[str, tuple[int, ...]] | None) -> Any:
    partitions = (
        None
        if asked is None
        else tuple(TopicPartitions(topic=t, partitions=tuple(i32(p) for p in ps)) for t, ps in asked.items())
    )
    return conn.request(ElectLeadersRequest(election_type=i8(election), topic_partitions=partitions, timeout=ms(5000)))


def test_no_election_is_ever_needed_and_an_unknown_partition_is_named(broker: ThreadBroker) -> None:
    with connect(broker.bootstrap) as conn:
        conn.create_topic("replicas.elect", 2)
        for election in (0, 1):  # preferred, unclean
            answer = _elect(conn, election, {"replicas.elect": (0, 1, 7), "replicas.nowhere": (0,)})
            assert answer.error_code == ErrorCode.none
            got = {
                (r.topic, p.partition_id): (p.error_code, p.error_message)
                for r in answer.replica_election_results
                for p in r.partition_result
            }
            assert got == {
                ("replicas.elect", 0): (
                    ErrorCode.election_not_needed,
                    "Leader election not needed for topic partition.",
                ),
                ("replicas.elect", 1): (
                    ErrorCode.election_not_needed,
                    "Leader election not needed for topic partition.",
                ),
                ("replicas.elect", 7): (ErrorCode.unknown_topic_or_partition, "No such partition as replicas.elect-7"),
                ("replicas.nowhere", 0): (ErrorCode.unknown_topic_or_partition, "No such topic as replicas.nowhere"),
            }
        # Every partition asked for: every topic answered, the partitions that need no election
        # (here, all of them) left out.
        every = _elect(conn, 0, None)
        assert every.error_code == ErrorCode.none
        assert "replicas.elect" in {r.topic for r in every.replica_election_results}
        assert [r.partition_result for r in every.replica_election_results] == [()] * len(
            every.replica_election_results
        )
        unknown = _elect(conn, 5, {"replicas.elect": (0,)})
        assert unknown.error_code == ErrorCode.invalid_request
        assert [p.error_code for r in unknown.replica_election_results for p in r.partition_result] == [
            ErrorCode.invalid_request
        ]


def test_the_only_assignment_a_partition_can_take_is_the_one_it_has(broker: ThreadBroker) -> None:
    def target(partition: int, replicas: tuple[int, ...] | None) -> ReassignablePartition:
        brokers = None if replicas is None else tuple(BrokerId(r) for r in replicas)
        return ReassignablePartition(partition_index=i32(partition), replicas=brokers)

    with connect(broker.bootstrap) as conn:
        conn.create_topic("replicas.assign", 2)
        answer = conn.request(
            AlterPartitionReassignmentsRequest(
                timeout=ms(5000),
                allow_replication_factor_change=True,
                topics=(
                    ReassignableTopic(
                        name="replicas.assign",
                        partitions=(
                            target(0, (NODE,)),
                            target(1, None),
                            target(0, ()),
                            target(1, (NODE, NODE)),
                            target(0, (NODE, 2)),
                            target(9, (NODE,)),
                        ),
                    ),
                    ReassignableTopic(name="replicas.nowhere", partitions=(target(0, (NODE,)),)),
                ),
            )
        )
        assert answer.error_code == ErrorCode.none
        got = [
            (r.name, p.partition_index, p.error_code, p.error_message) for r in answer.responses for p in r.partitions
        ]
        bad = ErrorCode.invalid_replica_assignment
        unknown = ErrorCode.unknown_topic_or_partition
        assert got == [
            ("replicas.assign", 0, ErrorCode.none, None),
            ("replicas.assign", 1, ErrorCode.no_reassignment_in_progress, "No partition reassignment is in progress."),
            ("replicas.assign", 0, bad, "The manual partition assignment includes an empty replica list."),
            ("replicas.assign", 1, bad, "The manual partition assignment includes the broker 1 more than once."),
            ("replicas.assign", 0, bad, "The manual partition assignment includes broker 2, but no such broker is "
             "registered."),
            ("replicas.assign", 9, unknown, "Unable to find partition replicas.assign:9."),
            ("replicas.nowhere", 0, unknown, "Unable to find a topic named replicas.nowhere."),
        ]  # fmt: skip
        for topics in (None, (ListPartitionReassignmentsTopics(name="replicas.assign", partition_indexes=(i32(0),)),)):
            listed = conn.request(ListPartitionReassignmentsRequest(timeout=ms(5000), topics=topics))
            assert (listed.error_code, listed.topics) == (ErrorCode.none, ())


def test_a_replica_moves_only_to_the_log_directory_it_is_in(broker: ThreadBroker) -> None:
    with connect(broker.bootstrap) as conn:
        conn.create_topic("replicas.dirs", 2)
        described = conn.request(DescribeLogDirsRequest(topics=None))
        (log_dir,) = [r.log_dir for r in described.results]

        def move(path: str, *partitions: int, topic: str = "replicas.dirs") -> AlterReplicaLogDir:
            return AlterReplicaLogDir(
                path=path, topics=(AlterReplicaLogDirTopic(name=topic, partitions=tuple(i32(p) for p in partitions)),)
            )

        answer = conn.request(
            AlterReplicaLogDirsRequest(
                dirs=(move(log_dir, 0, 5), move(log_dir + "-other", 1), move(log_dir, 0, topic="replicas.nowhere"))
            )
        )
        got = {(r.topic_name, p.partition_index): p.error_code for r in answer.results for p in r.partitions}
        assert got == {
            ("replicas.dirs", 0): ErrorCode.none,
            ("replicas.dirs", 5): ErrorCode.replica_not_available,
            ("replicas.dirs", 1): ErrorCode.log_dir_not_found,
            ("replicas.nowhere", 0): ErrorCode.replica_not_available,
        }
