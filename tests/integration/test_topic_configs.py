"""Topic configs as Apache Kafka 4.1 has them: every one it accepts, with its default, type,
validation and DescribeConfigs sources and synonyms; the broker resource's read-only flags as
Kafka's; and the effect of each config the broker implements, seen through real clients."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.metadata import partition_dir
from broker.protocol.batch import iter_headers
from kit.settings import ConfigError
from tests.support.configs import (
    ACCEPTED,
    BOOLEAN,
    BROKER,
    DEFAULT_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    INT,
    KAFKA_TOPIC_CONFIGS,
    LIST,
    LONG,
    PASSWORD,
    REFUSED,
    REMOVED_IN_KAFKA_4,
    STATIC_BROKER_CONFIG,
    TOPIC,
    describe,
)
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import confluent_consume, confluent_produce, create_topic

INVALID_CONFIG, INVALID_REQUEST = 40, 42
QUIET = {"log.retention.check.interval.ms": "3600000", "log.cleaner.backoff.ms": "3600000"}  # passes run by hand


def _wait(what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout:g} s"
        time.sleep(0.05)


def _plog(broker: ThreadBroker, topic: str) -> Any:
    return broker.broker.store.get(topic).logs[0]


# --- the configs and how DescribeConfigs reports them ----------------------------------


DYNAMIC_DEFAULT_BROKER_CONFIG = 3


def test_a_topic_describes_every_kafka_4_1_topic_config_with_its_default_type_and_synonym(broker: ThreadBroker) -> None:
    create_topic(broker.bootstrap, "described", 1)
    error, configs = describe(broker.bootstrap, TOPIC, "described")
    assert error == 0
    assert set(configs) == set(KAFKA_TOPIC_CONFIGS)
    for name, (default, config_type, synonym) in KAFKA_TOPIC_CONFIGS.items():
        entry = configs[name]
        # Kafka 4.1 starts with min.insync.replicas set cluster-wide (KIP-966): its first synonym.
        cluster = [(name, default, DYNAMIC_DEFAULT_BROKER_CONFIG)] if name == "min.insync.replicas" else []
        source = DYNAMIC_DEFAULT_BROKER_CONFIG if cluster else DEFAULT_CONFIG
        assert (entry.value, entry.config_type, entry.source) == (default, config_type, source), name
        assert not entry.read_only, name
        assert not entry.sensitive, name
        assert entry.synonyms == cluster + ([(synonym, default, DEFAULT_CONFIG)] if synonym else []), name
        assert entry.documentation, name
    # Those that act on nothing here say so.
    for name in ("unclean.leader.election.enable", "preallocate", "local.retention.ms", "remote.log.copy.disable"):
        assert "no effect here" in (configs[name].documentation or ""), name
    for name in REMOVED_IN_KAFKA_4:
        assert name not in configs


def test_sources_and_synonyms_follow_kafka_topic_then_static_broker_setting_then_default(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    broker = broker_factory(
        settings={
            "log.retention.ms": "3600000",
            "log.retention.bytes": "1000000",
            "log.segment.delete.delay.ms": "1000",
        }
    )
    overrides = {"retention.ms": "60000", "retention.bytes": "5000", "leader.replication.throttled.replicas": "*"}
    create_topic(broker.bootstrap, "sourced", 1, overrides)
    _, configs = describe(broker.bootstrap, TOPIC, "sourced")
    # retention.ms has no DEFAULT_CONFIG synonym: Kafka derives it from log.retention.hours.
    assert configs["retention.ms"].synonyms == [
        ("retention.ms", "60000", DYNAMIC_TOPIC_CONFIG),
        ("log.retention.ms", "3600000", STATIC_BROKER_CONFIG),
    ]
    assert configs["retention.bytes"].synonyms == [
        ("retention.bytes", "5000", DYNAMIC_TOPIC_CONFIG),
        ("log.retention.bytes", "1000000", STATIC_BROKER_CONFIG),
        ("log.retention.bytes", "-1", DEFAULT_CONFIG),
    ]
    assert configs["retention.bytes"].source == DYNAMIC_TOPIC_CONFIG
    delay = configs["file.delete.delay.ms"]
    assert (delay.value, delay.source) == ("1000", STATIC_BROKER_CONFIG)
    assert delay.synonyms == [
        ("log.segment.delete.delay.ms", "1000", STATIC_BROKER_CONFIG),
        ("log.segment.delete.delay.ms", "60000", DEFAULT_CONFIG),
    ]
    throttled = configs["leader.replication.throttled.replicas"]
    assert (throttled.source, throttled.synonyms) == (
        DYNAMIC_TOPIC_CONFIG,
        [("leader.replication.throttled.replicas", "*", 1)],
    )
    assert (configs["segment.ms"].source, configs["segment.ms"].synonyms) == (DEFAULT_CONFIG, [])

    _, bare = describe(broker.bootstrap, TOPIC, "sourced", synonyms=False)
    assert {n: (c.value, c.source) for n, c in bare.items()} == {n: (c.value, c.source) for n, c in configs.items()}
    assert all(c.synonyms == [] for c in bare.values())


def test_the_broker_resource_flags_what_kafka_can_change_at_runtime_and_has_one_cluster_default(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    broker = broker_factory(settings={"num.partitions": "5", "ssl.key.password": "secret"})
    error, configs = describe(broker.bootstrap, BROKER, "1")
    assert error == 0
    read_only = {n: c.read_only for n, c in configs.items()}
    # Kafka 4.1's DynamicBrokerConfig: listeners are per-broker dynamic, advertised.listeners
    # is not; min.insync.replicas and every topic default are dynamic, cluster-wide too.
    for name in ("node.id", "num.partitions", "advertised.listeners", "log.cleaner.enable", "log.open.files.max"):
        assert read_only[name], name
    for name in ("listeners", "listener.security.protocol.map", "sasl.enabled.mechanisms", "ssl.client.auth"):
        assert not read_only[name], name
    for name in ("max.connections", "log.cleaner.backoff.ms", "producer.id.expiration.ms", "min.insync.replicas"):
        assert not read_only[name], name
    for _, _, synonym in KAFKA_TOPIC_CONFIGS.values():
        if synonym is not None:
            assert not read_only[synonym], synonym
    for name in ("log.retention.ms", "log.roll.ms", "log.flush.interval.ms", "log.roll.jitter.ms"):
        assert not read_only[name], name
    assert "remote.storage.enable" not in configs  # Kafka has no broker default of these
    assert "leader.replication.throttled.replicas" not in configs

    partitions = configs["num.partitions"]
    assert (partitions.value, partitions.source, partitions.config_type) == ("5", STATIC_BROKER_CONFIG, INT)
    assert partitions.synonyms == [
        ("num.partitions", "5", STATIC_BROKER_CONFIG),
        ("num.partitions", "3", DEFAULT_CONFIG),
    ]
    password = configs["ssl.key.password"]
    assert (password.value, password.sensitive, password.config_type) == (None, True, PASSWORD)
    assert password.synonyms == [("ssl.key.password", None, STATIC_BROKER_CONFIG)]
    unset = configs["advertised.listeners"]  # Kafka's default is null
    assert (unset.value, unset.source, unset.synonyms) == (None, DEFAULT_CONFIG, [])
    assert configs["log.retention.ms"].config_type == LONG
    assert configs["auto.create.topics.enable"].config_type == BOOLEAN
    assert configs["sasl.enabled.mechanisms"].config_type == LIST

    # The one cluster-wide default a Kafka 4.1 cluster starts with (KIP-966).
    assert list(describe(broker.bootstrap, BROKER, "")[1]) == ["min.insync.replicas"]
    assert describe(broker.bootstrap, BROKER, "2")[0] == INVALID_REQUEST
    assert describe(broker.bootstrap, BROKER, "one")[0] == INVALID_REQUEST
    _, every = describe(broker.bootstrap, BROKER, "1", keys=())  # as Kafka: an empty list is all of them
    assert set(every) == set(configs)
    _, two = describe(broker.bootstrap, BROKER, "1", keys=("node.id", "log.retention.ms"))
    assert set(two) == {"node.id", "log.retention.ms"}


# --- validation, as Kafka 4.1's ------------------------------------------------------------


def _create_error(admin: AdminClient, configs: dict[str, str]) -> str | None:
    future = admin.create_topics([NewTopic("validated", 1, 1, config=configs)], validate_only=True)["validated"]
    try:
        future.result(15)
    except KafkaException as e:
        return f"{e.args[0].name()}: {e.args[0].str()}"
    return None


def test_topic_configs_are_accepted_and_refused_as_kafka_4_1_does(broker: ThreadBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for configs in ACCEPTED:
        assert _create_error(admin, configs) is None, configs
    for configs in REFUSED:
        error = _create_error(admin, configs) or ""
        assert error.startswith("INVALID_CONFIG"), configs
    assert _create_error(admin, {"remote.storage.enable": "true"}) == (
        "INVALID_CONFIG: Tiered Storage functionality is disabled in the broker. "
        "Topic cannot be configured with remote log storage."
    )
    assert _create_error(admin, {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}) == (
        "INVALID_CONFIG: conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"
    )


def test_alterations_are_checked_against_the_topics_other_configs_and_the_broker_defaults(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    broker = broker_factory(settings={"log.cleaner.max.compaction.lag.ms": "1000"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert _create_error(admin, {"min.compaction.lag.ms": "2000"}) is not None  # above the broker's max
    create_topic(broker.bootstrap, "altered", 1, {"max.compaction.lag.ms": "5000"})

    def alter(name: str, value: str) -> None:
        resource = ConfigResource(
            ConfigResource.Type.TOPIC,
            "altered",
            incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)],
        )
        admin.incremental_alter_configs([resource])[resource].result(15)

    alter("min.compaction.lag.ms", "5000")
    with pytest.raises(KafkaException, match="conflict topic config setting"):
        alter("min.compaction.lag.ms", "5001")
    with pytest.raises(KafkaException, match="Tiered Storage functionality is disabled"):
        alter("remote.storage.enable", "true")
    alter("remote.storage.enable", "false")
    assert broker.call(lambda: broker.broker.store.get("altered").configs) == {
        "max.compaction.lag.ms": "5000",
        "min.compaction.lag.ms": "5000",
        "remote.storage.enable": "false",
    }


def test_broker_defaults_of_topic_configs_are_validated_at_start() -> None:
    BrokerConfig(settings={"log.segment.delete.delay.ms": "0", "log.flush.interval.messages": "1"})
    for bad in (
        {"log.cleaner.min.compaction.lag.ms": "10", "log.cleaner.max.compaction.lag.ms": "5"},
        {"compression.zstd.level": "99"},
        {"log.roll.jitter.ms": "-1"},
        {"remote.storage.enable": "true"},  # a topic config Kafka has no broker default for
    ):
        with pytest.raises(ConfigError):
            BrokerConfig(settings=bad)


# --- effects -------------------------------------------------------------------------------


def _delete_records(admin: AdminClient, topic: str, offset: int) -> None:
    (future,) = admin.delete_records([TopicPartition(topic, 0, offset)]).values()
    future.result(15)


def _files(broker: ThreadBroker, topic: str, pattern: str) -> list[str]:
    return sorted(p.name for p in partition_dir(broker.data_dir, topic, 0).glob(pattern))


def test_file_delete_delay_keeps_deleted_segments_as_dot_deleted_files_for_that_long(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    clock = ManualClock(int(time.time() * 1000))
    broker = broker_factory(settings=QUIET, clock=clock)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for topic, delay in (("delayed", "60000"), ("prompt", "0")):
        create_topic(broker.bootstrap, topic, 1, {"segment.bytes": "1000", "file.delete.delay.ms": delay})
        confluent_produce(broker.bootstrap, topic, [{"value": bytes(300)} for _ in range(12)], flush_each=True)
        assert len(_files(broker, topic, "*.log")) > 3
        _delete_records(admin, topic, 8)
    bases = [int(n.split(".")[0]) for n in _files(broker, "delayed", "*.log")]
    assert min(bases) > 0
    deleted = _files(broker, "delayed", "*.deleted")
    assert deleted
    assert all(int(n.split(".")[0]) < min(bases) for n in deleted)
    assert any(n.endswith(".log.deleted") for n in deleted)
    assert _files(broker, "prompt", "*.deleted") == []  # 0: removed at once

    clock.advance(59_000)
    time.sleep(0.6)  # the reaper looks four times a second
    assert _files(broker, "delayed", "*.deleted") == deleted
    clock.advance(1_000)
    _wait("the delayed files' removal", lambda: _files(broker, "delayed", "*.deleted") == [])
    got = confluent_consume(broker.bootstrap, [TopicPartition("delayed", 0, -2)], 4)
    assert [r.offset for r in got] == [8, 9, 10, 11]


def test_deleted_files_left_by_a_stop_are_removed_on_the_next_start(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    broker = broker_factory(settings=QUIET)
    create_topic(broker.bootstrap, "left", 1, {"segment.bytes": "1000", "file.delete.delay.ms": "3600000"})
    confluent_produce(broker.bootstrap, "left", [{"value": bytes(300)} for _ in range(8)], flush_each=True)
    _delete_records(AdminClient({"bootstrap.servers": broker.bootstrap}), "left", 6)
    assert _files(broker, "left", "*.deleted")
    broker.restart()
    assert _files(broker, "left", "*.deleted") == []
    got = confluent_consume(broker.bootstrap, [TopicPartition("left", 0, -2)], 2)
    assert [r.offset for r in got] == [6, 7]


def _durable(broker: ThreadBroker, topic: str) -> bool:
    return bool(broker.call(lambda: not _plog(broker, topic).dirty_segments()))


def test_flush_messages_fsyncs_a_partition_after_that_many_records_whatever_the_acks(broker: ThreadBroker) -> None:
    for topic, every in (("every3", "3"), ("unflushed", None)):
        create_topic(broker.bootstrap, topic, 1, {"flush.messages": every} if every else {})
        confluent_produce(broker.bootstrap, topic, [{"value": b"r"} for _ in range(2)], {"acks": 1}, flush_each=True)
    time.sleep(0.5)
    assert not _durable(broker, "every3")  # 2 of 3: acks=1 answered before any fsync
    assert not _durable(broker, "unflushed")
    for topic in ("every3", "unflushed"):
        confluent_produce(broker.bootstrap, topic, [{"value": b"r"}], {"acks": 1})
    _wait("the fsync of every3 after its third record", lambda: _durable(broker, "every3"))
    time.sleep(0.5)
    assert not _durable(broker, "unflushed")


def test_segment_jitter_rolls_each_segment_up_to_that_much_before_segment_ms(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    clock = ManualClock(int(time.time() * 1000))
    broker = broker_factory(settings=QUIET, clock=clock)
    week = 7 * 24 * 3600 * 1000
    create_topic(broker.bootstrap, "jittered", 1, {"segment.ms": str(week), "segment.jitter.ms": str(week)})
    create_topic(broker.bootstrap, "steady", 1, {"segment.ms": str(week)})

    def produce(topic: str) -> int:
        confluent_produce(broker.bootstrap, topic, [{"value": b"v", "timestamp": clock.now_ms()}])
        return int(broker.call(lambda: len(_plog(broker, topic).segments)))

    start = clock.now_ms()
    assert produce("jittered") == produce("steady") == 1
    jitter = broker.call(lambda: _plog(broker, "jittered").active.roll_jitter_ms)
    assert broker.call(lambda: _plog(broker, "steady").active.roll_jitter_ms) == 0
    assert 1000 < jitter < week  # drawn below min(segment.jitter.ms, segment.ms); 0 to 1000 once in 600000 runs
    clock.advance(week - jitter)
    assert produce("jittered") == 1  # exactly segment.ms - jitter: not yet
    clock.advance(1)
    assert produce("jittered") == 2
    assert produce("steady") == 1
    clock.advance(start + week + 1 - clock.now_ms())
    assert produce("steady") == 2  # the topic without jitter rolls after segment.ms only
    second = broker.call(lambda: _plog(broker, "jittered").active.roll_jitter_ms)
    assert second != jitter  # each segment draws its own


def test_max_compaction_lag_rolls_the_active_segment_of_a_compacted_topic_in_time(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    clock = ManualClock(int(time.time() * 1000))
    broker = broker_factory(settings=QUIET, clock=clock)
    create_topic(broker.bootstrap, "lagged", 1, {"cleanup.policy": "compact", "max.compaction.lag.ms": "60000"})
    create_topic(broker.bootstrap, "unlagged", 1, {"cleanup.policy": "compact"})

    def produce(topic: str) -> int:
        confluent_produce(broker.bootstrap, topic, [{"key": b"k", "value": b"v", "timestamp": clock.now_ms()}])
        return int(broker.call(lambda: len(_plog(broker, topic).segments)))

    assert produce("lagged") == produce("unlagged") == 1
    clock.advance(60_000)
    assert produce("lagged") == 1
    clock.advance(1)
    assert produce("lagged") == 2  # its first record is older than max.compaction.lag.ms: rolled
    assert produce("unlagged") == 1  # segment.ms (7 days) still holds it open


def test_max_compaction_lag_compacts_a_dirty_segment_that_old_whatever_the_dirty_ratio(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    clock = ManualClock(int(time.time() * 1000))
    broker = broker_factory(settings=QUIET, clock=clock)
    compacted = {"cleanup.policy": "compact", "segment.bytes": "1000", "min.cleanable.dirty.ratio": "0.9"}
    create_topic(broker.bootstrap, "lagged", 1, {**compacted, "max.compaction.lag.ms": "60000"})
    create_topic(broker.bootstrap, "unlagged", 1, compacted)

    def produce(keys: list[bytes]) -> None:
        for topic in ("lagged", "unlagged"):
            records = [{"key": k, "value": bytes(300), "timestamp": clock.now_ms()} for k in keys]
            confluent_produce(broker.bootstrap, topic, records, flush_each=True)

    def cleaned() -> int:
        return int(broker.call(broker.broker.run_cleaner))

    produce([b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h"])
    assert cleaned() == 2  # all dirty (ratio 1): both compacted once
    produce([b"a", b"a", b"b"])  # a new dirty closed segment, a small share of the log
    assert cleaned() == 0
    clock.advance(60_001)
    assert cleaned() == 1  # "lagged" only: its dirty records are older than max.compaction.lag.ms
    keys = {
        topic: [r.key for r in confluent_consume(broker.bootstrap, [TopicPartition(topic, 0, -2)], count, timeout=10)]
        for topic, count in (("lagged", 9), ("unlagged", 11))
    }
    assert keys["lagged"].count(b"a") == 1  # the overwritten "a"s are gone
    assert keys["unlagged"].count(b"a") == 3


def test_segment_index_bytes_rolls_a_segment_whose_index_is_full(broker: ThreadBroker) -> None:
    # Every batch gets index entries (index.interval.bytes=0): 96 bytes hold 8 time entries.
    create_topic(broker.bootstrap, "indexed", 1, {"index.interval.bytes": "0", "segment.index.bytes": "96"})
    create_topic(broker.bootstrap, "unindexed", 1, {"index.interval.bytes": "0"})
    start = int(time.time() * 1000)
    for topic in ("indexed", "unindexed"):
        records = [{"value": b"v", "timestamp": start + i} for i in range(20)]
        confluent_produce(broker.bootstrap, topic, records, flush_each=True)

    def batches(topic: str) -> list[int]:
        return list(broker.call(lambda: [s.next_offset - s.base_offset for s in _plog(broker, topic).segments]))

    assert batches("indexed") == [8, 8, 4]
    assert batches("unindexed") == [20]
    directory = partition_dir(broker.data_dir, "indexed", 0)
    assert all(p.stat().st_size <= 96 for p in [*directory.glob("*.index"), *directory.glob("*.timeindex")])


def _text(size: int) -> bytes:
    rng = random.Random(7)
    words = [bytes(rng.choice(b"abcdefghij") for _ in range(rng.randint(2, 9))) for _ in range(300)]
    return b" ".join(rng.choice(words) for _ in range(size // 6))[:size]


@pytest.mark.parametrize(("codec", "fast", "small"), [("gzip", "1", "9"), ("lz4", "1", "17"), ("zstd", "1", "19")])
def test_compression_levels_apply_to_the_batches_the_broker_recompresses(
    broker: ThreadBroker, codec: str, fast: str, small: str
) -> None:
    value = _text(200_000)
    for level in (fast, small):
        topic = f"{codec}-{level}"
        create_topic(broker.bootstrap, topic, 1, {"compression.type": codec, f"compression.{codec}.level": level})
        confluent_produce(broker.bootstrap, topic, [{"value": value}], {"compression.type": "none"})
        (got,) = confluent_consume(broker.bootstrap, [TopicPartition(topic, 0, 0)], 1)
        assert got.value == value

    def stored(topic: str) -> tuple[int, int]:
        data = broker.call(lambda: _plog(broker, topic).read(0, 1 << 20))
        ((_, header),) = list(iter_headers(data))
        return header.compression, header.size

    codes = {"gzip": 1, "lz4": 3, "zstd": 4}
    (fast_codec, fast_size), (small_codec, small_size) = stored(f"{codec}-{fast}"), stored(f"{codec}-{small}")
    assert fast_codec == small_codec == codes[codec]
    assert small_size < fast_size * 0.95  # the higher level's batch is smaller


def test_a_deleted_topics_delayed_segments_go_with_it(broker: ThreadBroker) -> None:
    """Deleting a topic while its deleted segments still wait for file.delete.delay.ms."""
    create_topic(broker.bootstrap, "gone", 1, {"segment.bytes": "1000", "file.delete.delay.ms": "3600000"})
    confluent_produce(broker.bootstrap, "gone", [{"value": bytes(300)} for _ in range(8)], flush_each=True)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _delete_records(admin, "gone", 6)
    assert _files(broker, "gone", "*.deleted")
    admin.delete_topics(["gone"])["gone"].result(15)
    _wait("the topic's directory removal", lambda: not partition_dir(broker.data_dir, "gone", 0).exists())
    assert broker.call(lambda: len(broker.broker.store.deletions)) > 0
    broker.call(lambda: broker.broker.store.deletions.reap(1 << 62))  # nothing left to fail on
    create_topic(broker.bootstrap, "gone", 1)
    assert _files(broker, "gone", "*.deleted") == []
