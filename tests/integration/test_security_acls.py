"""ACLs decide what each principal may do, with Kafka's error codes: a denied write writes
nothing, deny beats allow, prefixed patterns, groups, internal topics, producer ids
(IDEMPOTENT_WRITE), authorized operations, and the ACL APIs themselves."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
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
from kio.schema.elect_leaders.v2.request import ElectLeadersRequest, TopicPartitions
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i32

from broker.protocol.errors import ErrorCode
from streamshop.pki import LocalCA
from tests.integration.test_security_clients import add_user, grant, wait
from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import KafkaConnection, batch, ms
from tests.support.secure import SecureBroker, make_admin_user, sasl_login, secure_settings

MALLORY, MALLORY_PASSWORD = "mallory", "mallory-pw"
ALICE, ALICE_PASSWORD = "alice", "alice-pw"


@pytest.fixture
def secure(tmp_path: Path, broker_factory: Callable[..., ThreadBroker]) -> SecureBroker:
    ca = LocalCA(tmp_path / "pki")
    server = ca.issue("broker", hosts=("127.0.0.1",))
    make_admin_user(tmp_path / "broker")
    broker = broker_factory(settings=secure_settings(ca, server), name="broker")
    sb = SecureBroker(broker, ca, tmp_path)
    admin = AdminClient(sb.admin())
    add_user(admin, ALICE, ALICE_PASSWORD)
    add_user(admin, MALLORY, MALLORY_PASSWORD)
    return sb


def acl(
    rtype: ResourceType,
    name: str,
    op: AclOperation,
    principal: str = f"User:{ALICE}",
    *,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, permission)


def create_topic(secure: SecureBroker, name: str, partitions: int = 1) -> None:
    admin = AdminClient(secure.admin())  # kept alive until its futures complete
    wait(admin.create_topics([NewTopic(name, partitions)]))


def records_in(secure: SecureBroker, topic: str) -> int:
    consumer = Consumer(secure.admin() | {"group.id": "acl-test-reader"})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    total = sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions)
    consumer.close()
    return int(total)


def produce_as(secure: SecureBroker, user: str, password: str, topic: str, count: int = 1) -> list[int | None]:
    """Error codes of each delivery (None when delivered)."""
    producer = Producer(secure.confluent("SASL_SSL", user, password) | {"message.timeout.ms": 5000})
    outcomes: list[int | None] = []
    for i in range(count):
        producer.produce(
            topic, value=f"{i}".encode(), on_delivery=lambda err, _m: outcomes.append(err.code() if err else None)
        )
    producer.flush(15)
    return outcomes


def test_a_denied_write_is_topic_authorization_failed_and_writes_nothing(secure: SecureBroker) -> None:
    create_topic(secure, "acl.orders")
    assert produce_as(secure, ALICE, ALICE_PASSWORD, "acl.orders", 3) == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3
    assert records_in(secure, "acl.orders") == 0
    grant(AdminClient(secure.admin()), acl(ResourceType.TOPIC, "acl.orders", AclOperation.WRITE))
    assert produce_as(secure, ALICE, ALICE_PASSWORD, "acl.orders", 3) == [None] * 3
    assert records_in(secure, "acl.orders") == 3


def test_deny_beats_allow(secure: SecureBroker) -> None:
    create_topic(secure, "acl.payments")
    admin = AdminClient(secure.admin())
    grant(
        admin,
        acl(ResourceType.TOPIC, "acl.", AclOperation.ALL, pattern=ResourcePatternType.PREFIXED),
        acl(ResourceType.TOPIC, "acl.payments", AclOperation.WRITE, permission=AclPermissionType.DENY),
    )
    assert produce_as(secure, ALICE, ALICE_PASSWORD, "acl.payments") == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert records_in(secure, "acl.payments") == 0


def test_prefixed_acls_cover_every_topic_of_the_prefix_only(secure: SecureBroker) -> None:
    for name in ("team-a.one", "team-a.two", "team-b.one"):
        create_topic(secure, name)
    grant(
        AdminClient(secure.admin()),
        acl(ResourceType.TOPIC, "team-a.", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED),
    )
    assert produce_as(secure, ALICE, ALICE_PASSWORD, "team-a.one") == [None]
    assert produce_as(secure, ALICE, ALICE_PASSWORD, "team-a.two") == [None]
    assert produce_as(secure, ALICE, ALICE_PASSWORD, "team-b.one") == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # metadata lists only what alice may describe (WRITE implies DESCRIBE)
    alice = AdminClient(secure.confluent("SASL_SSL", ALICE, ALICE_PASSWORD))
    visible = set(alice.list_topics(timeout=10).topics)
    assert visible == {"team-a.one", "team-a.two"}


@pytest.mark.parametrize("protocol", ["classic", "consumer"])  # the consumer group protocol's too (KIP-848)
def test_a_group_needs_read_on_the_group(secure: SecureBroker, protocol: str) -> None:
    topic, group = f"acl.events.{protocol}", f"acl.readers.{protocol}"
    create_topic(secure, topic)
    admin = AdminClient(secure.admin())
    grant(admin, acl(ResourceType.TOPIC, topic, AclOperation.READ))
    conf = secure.confluent("SASL_SSL", ALICE, ALICE_PASSWORD) | {"group.id": group, "group.protocol": protocol}
    consumer = Consumer(conf)
    consumer.subscribe([topic])
    errors = []
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is not None:
            errors.append(message.error().code())
    consumer.close()
    assert KafkaError.GROUP_AUTHORIZATION_FAILED in errors
    grant(admin, acl(ResourceType.GROUP, group, AclOperation.READ))
    produce_as(secure, "admin", "admin-secret", topic, 2)
    consumer = Consumer(conf | {"auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 15
    while got < 2 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got += 1
    consumer.close()
    assert got == 2


def test_a_topic_pattern_assigns_only_topics_the_member_may_describe(secure: SecureBroker) -> None:
    """The consumer group protocol resolves a member's pattern on the broker: as Kafka does, only
    over the topics its principal may describe, so a pattern reveals no hidden topic."""
    for name in ("acl.rx.open", "acl.rx.hidden"):
        create_topic(secure, name)
    admin = AdminClient(secure.admin())
    grant(
        admin,
        acl(ResourceType.TOPIC, "acl.rx.open", AclOperation.READ),
        acl(ResourceType.GROUP, "acl.rx", AclOperation.READ),
    )
    conf = secure.confluent("SASL_SSL", ALICE, ALICE_PASSWORD) | {"group.id": "acl.rx", "group.protocol": "consumer"}
    consumer = Consumer(conf)
    try:
        consumer.subscribe(["^acl[.]rx[.].*"])

        def assigned() -> set[str]:
            consumer.poll(0.1)
            return {tp.topic for tp in consumer.assignment()}

        deadline = time.monotonic() + 15
        while assigned() != {"acl.rx.open"} and time.monotonic() < deadline:
            pass
        assert assigned() == {"acl.rx.open"}
        group = admin.describe_consumer_groups(["acl.rx"])["acl.rx"].result(10)
        (member,) = group.members
        assert {tp.topic for tp in member.assignment.topic_partitions} == {"acl.rx.open"}
    finally:
        consumer.close()


def _raw_login(secure: SecureBroker, user: str, password: str) -> KafkaConnection:
    host, port = secure.address("SASL_PLAINTEXT").split(":")
    conn = KafkaConnection(host, int(port))
    assert sasl_login(conn, "SCRAM-SHA-256", user, password).error_code == ErrorCode.none
    return conn


def test_a_principal_without_idempotent_write_cannot_fence_a_producer(secure: SecureBroker) -> None:
    """Mallory guesses the victim's producer id and sends a higher epoch: without
    IDEMPOTENT_WRITE (nor WRITE anywhere) she gets no producer id, and her forged batch is
    refused, so the victim's producer keeps its epoch and sequence."""
    create_topic(secure, "acl.ledger")
    grant(AdminClient(secure.admin()), acl(ResourceType.TOPIC, "acl.ledger", AclOperation.WRITE))
    with _raw_login(secure, ALICE, ALICE_PASSWORD) as victim, _raw_login(secure, MALLORY, MALLORY_PASSWORD) as mallory:
        pid, epoch = victim.init_producer_id()
        first = victim.produce("acl.ledger", 0, batch([b"a"], producer_id=pid, producer_epoch=epoch, base_sequence=0))
        assert first.error_code == ErrorCode.none
        refused = mallory.request(InitProducerIdRequest(transactional_id=None, transaction_timeout=ms(60_000)))
        assert refused.error_code == ErrorCode.cluster_authorization_failed
        forged = mallory.produce(
            "acl.ledger", 0, batch([b"forged"], producer_id=pid, producer_epoch=epoch + 5, base_sequence=0)
        )
        assert forged.error_code == ErrorCode.topic_authorization_failed
        second = victim.produce("acl.ledger", 0, batch([b"b"], producer_id=pid, producer_epoch=epoch, base_sequence=1))
        assert second.error_code == ErrorCode.none  # not fenced
    with _raw_login(secure, "admin", "admin-secret") as reader:
        assert [r.value for r in reader.read_all("acl.ledger")] == [b"a", b"b"]
    # IDEMPOTENT_WRITE on the cluster (or WRITE on some topic) is what grants producer ids
    grant(
        AdminClient(secure.admin()),
        acl(ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE, f"User:{MALLORY}"),
    )
    with _raw_login(secure, MALLORY, MALLORY_PASSWORD) as mallory:
        assert mallory.init_producer_id()[0] >= 0


def test_internal_topics_cannot_be_written_or_deleted_by_ordinary_principals(secure: SecureBroker) -> None:
    admin = AdminClient(secure.admin())
    create_topic(secure, "_schemas")
    grant(admin, acl(ResourceType.TOPIC, "*", AclOperation.ALL, f"User:{MALLORY}"))
    grant(
        admin,
        acl(ResourceType.TOPIC, "_schemas", AclOperation.DELETE, f"User:{MALLORY}", permission=AclPermissionType.DENY),
    )
    with _raw_login(secure, MALLORY, MALLORY_PASSWORD) as mallory:
        written = mallory.produce("__consumer_offsets", 0, batch([b"junk"]))
        assert written.error_code == ErrorCode.invalid_topic_exception
    mallory_admin = AdminClient(secure.confluent("SASL_SSL", MALLORY, MALLORY_PASSWORD))
    with pytest.raises(KafkaException) as denied:
        wait(mallory_admin.delete_topics(["_schemas"]))
    assert denied.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # __consumer_offsets exists once a group committed; even ALL on * cannot delete it
    producer_topic = "acl.offsets-source"
    create_topic(secure, producer_topic)
    consumer = Consumer(secure.admin() | {"group.id": "acl.committer", "auto.offset.reset": "earliest"})
    consumer.commit(offsets=[TopicPartition(producer_topic, 0, 0)], asynchronous=False)
    consumer.close()
    with pytest.raises(KafkaException) as internal:
        wait(mallory_admin.delete_topics(["__consumer_offsets"]))
    assert internal.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert "_schemas" in admin.list_topics(timeout=10).topics
    assert "__consumer_offsets" in admin.list_topics(timeout=10).topics


def test_authorized_operations_reflect_the_acls(secure: SecureBroker) -> None:
    create_topic(secure, "acl.ops")
    admin = AdminClient(secure.admin())
    grant(
        admin,
        acl(ResourceType.TOPIC, "acl.ops", AclOperation.READ),
        acl(ResourceType.TOPIC, "acl.ops", AclOperation.ALTER_CONFIGS),
        acl(ResourceType.GROUP, "acl.ops-group", AclOperation.READ),
        acl(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
    )
    alice = AdminClient(secure.confluent("SASL_SSL", ALICE, ALICE_PASSWORD))
    topic = alice.describe_topics(TopicCollection(["acl.ops"]), include_authorized_operations=True)["acl.ops"]
    assert set(topic.result(timeout=10).authorized_operations) == {
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.ALTER_CONFIGS,
        AclOperation.DESCRIBE_CONFIGS,
    }
    cluster = alice.describe_cluster(include_authorized_operations=True).result(timeout=10)
    assert set(cluster.authorized_operations) == {AclOperation.DESCRIBE}
    everything = admin.describe_cluster(include_authorized_operations=True).result(timeout=10)
    assert AclOperation.ALTER in set(everything.authorized_operations)
    group = alice.describe_consumer_groups(["acl.ops-group"], include_authorized_operations=True)["acl.ops-group"]
    assert set(group.result(timeout=10).authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}


def test_the_acl_apis(secure: SecureBroker) -> None:
    admin = AdminClient(secure.admin())
    literal = acl(ResourceType.TOPIC, "acl.x", AclOperation.READ)
    prefixed = acl(ResourceType.TOPIC, "acl.", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED)
    group = acl(ResourceType.GROUP, "g", AclOperation.READ, f"User:{MALLORY}")
    grant(admin, literal, prefixed, group)

    def described(**kw: Any) -> set[AclBinding]:
        base: dict[str, Any] = {
            "restype": ResourceType.ANY,
            "name": None,
            "resource_pattern_type": ResourcePatternType.ANY,
            "principal": None,
            "host": None,
            "operation": AclOperation.ANY,
            "permission_type": AclPermissionType.ANY,
        }
        base.update(kw)
        return set(admin.describe_acls(AclBindingFilter(**base)).result(timeout=10))

    assert described() == {literal, prefixed, group}
    assert described(restype=ResourceType.TOPIC, name="acl.x", resource_pattern_type=ResourcePatternType.MATCH) == {
        literal,
        prefixed,
    }
    assert described(principal=f"User:{MALLORY}") == {group}
    # an invalid binding: the cluster has one name
    with pytest.raises(KafkaException) as invalid:
        grant(admin, acl(ResourceType.BROKER, "other-cluster", AclOperation.ALTER))
    assert invalid.value.args[0].code() == KafkaError.INVALID_REQUEST
    # only who may ALTER the cluster changes ACLs
    alice = AdminClient(secure.confluent("SASL_SSL", ALICE, ALICE_PASSWORD))
    with pytest.raises(KafkaException) as denied:
        grant(alice, acl(ResourceType.TOPIC, "*", AclOperation.ALL))
    assert denied.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    deleted = admin.delete_acls(
        [
            AclBindingFilter(
                ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
            )
        ]
    )
    assert {b for f in deleted.values() for b in f.result(timeout=10)} == {literal, prefixed}
    assert described() == {group}


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(broker: ThreadBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_acls([acl(ResourceType.TOPIC, "t", AclOperation.READ)])
    with pytest.raises(KafkaException) as disabled:
        wait(futures)
    assert disabled.value.args[0].code() == KafkaError.SECURITY_DISABLED


def test_leaders_assignments_and_log_dirs_need_the_cluster_operations_kafka_asks_for(secure: SecureBroker) -> None:
    """ElectLeaders, AlterPartitionReassignments and AlterReplicaLogDirs need ALTER on the cluster,
    ListPartitionReassignments DESCRIBE; without them every partition asked about is refused."""
    create_topic(secure, "acl.replicas")
    asked = (TopicPartitions(topic="acl.replicas", partitions=(i32(0),)),)
    move = AlterReplicaLogDir(path="/", topics=(AlterReplicaLogDirTopic(name="acl.replicas", partitions=(i32(0),)),))
    assign = ReassignableTopic(
        name="acl.replicas", partitions=(ReassignablePartition(partition_index=i32(0), replicas=(BrokerId(1),)),)
    )
    refused = ErrorCode.cluster_authorization_failed
    with _raw_login(secure, MALLORY, MALLORY_PASSWORD) as mallory:
        elected = mallory.request(ElectLeadersRequest(election_type=i8(0), topic_partitions=asked, timeout=ms(5000)))
        assert elected.error_code == refused
        assert [p.error_code for r in elected.replica_election_results for p in r.partition_result] == [refused]
        moved = mallory.request(AlterReplicaLogDirsRequest(dirs=(move,)))
        assert [p.error_code for r in moved.results for p in r.partitions] == [refused]
        reassigned = mallory.request(
            AlterPartitionReassignmentsRequest(timeout=ms(5000), allow_replication_factor_change=True, topics=(assign,))
        )
        assert reassigned.error_code == refused
        assert [p.error_code for r in reassigned.responses for p in r.partitions] == [refused]
        listed = mallory.request(ListPartitionReassignmentsRequest(timeout=ms(5000), topics=None))
        assert listed.error_code == refused
    with _raw_login(secure, "admin", "admin-secret") as admin:
        elected = admin.request(ElectLeadersRequest(election_type=i8(0), topic_partitions=asked, timeout=ms(5000)))
        assert [p.error_code for r in elected.replica_election_results for p in r.partition_result] == [
            ErrorCode.election_not_needed
        ]
        assert admin.request(ListPartitionReassignmentsRequest(timeout=ms(5000), topics=None)).error_code == 0
