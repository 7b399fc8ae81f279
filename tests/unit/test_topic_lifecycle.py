"""The topic service alone (broker/topic_lifecycle.py), over a real MetadataStore in a temporary
directory: a CreateTopics entry judged as Kafka judges it (names that differ only by '.' versus
'_' collide), reservations held and released (a name per reservation, its partitions counted
against max.partitions until released), a big deletion holding the name until its files are
gone, auto-creation refused over the budget, and a growth that loses to a deletion."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.metadata import MetadataStore, partition_dir
from broker.protocol.errors import ErrorCode, KafkaError
from broker.topic_lifecycle import Topics


class HeldWorker(Executor):
    """Runs what it is handed only when told: the test sees the state in between."""

    def __init__(self) -> None:
        self.held: list[tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.held.append((future, fn, args))
        return future

    def run(self) -> None:
        held, self.held = self.held, []
        for future, fn, args in held:
            future.set_result(fn(*args))


class Env:
    def __init__(self, path: Path, settings: dict[str, str], worker: Executor) -> None:
        self.store = MetadataStore(BrokerConfig(data_dir=path, settings=settings), ManualClock(), recover=False)
        self.forgotten: list[str] = []
        self.topics = Topics(self.store, BrokerConfig(data_dir=path, settings=settings), worker, self.forgotten.append)


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Callable[..., Env]]:
    made: list[Env] = []
    pool = ThreadPoolExecutor(max_workers=1)

    def build(settings: dict[str, str] | None = None, worker: Executor | None = None) -> Env:
        env = Env(tmp_path / str(len(made)), settings or {}, worker or pool)
        made.append(env)
        return env

    yield build
    pool.shutdown(wait=True)
    for env in made:
        env.store.close(clean=True)


def _refused(call: Callable[[], object]) -> KafkaError:
    with pytest.raises(KafkaError) as caught:
        call()
    return caught.value


def test_names_differing_only_by_dot_and_underscore_collide_as_kafka_refuses(make: Callable[..., Env]) -> None:
    env = make()
    env.topics.create_topic("orders.placed", 1, {})
    env.topics.create_topic("audit_log", 1, {})
    for name, existing in [("orders_placed", "orders.placed"), ("audit.log", "audit_log")]:
        error = _refused(functools.partial(env.topics.check_new_topic, name, 1, 1, {}))
        assert error.code == ErrorCode.invalid_topic_exception
        assert f"collides with existing topic {existing!r}" in str(error.message)
        assert not env.topics.auto_create_allowed(name)
    # the same name again is no collision: it exists
    assert (
        _refused(lambda: env.topics.check_new_topic("orders.placed", 1, 1, {})).code == ErrorCode.topic_already_exists
    )
    # a name colliding with nothing passes, its configs as given
    assert env.topics.check_new_topic("orders-placed", 2, -1, {"retention.ms": "1000"}) == {"retention.ms": "1000"}
    assert env.topics.auto_create_allowed("orders-placed")


def test_a_new_topic_is_judged_with_kafkas_codes(make: Callable[..., Env]) -> None:
    env = make({"num.partitions": "2"})
    topics = env.topics
    cases: list[tuple[Callable[[], object], ErrorCode]] = [
        (lambda: topics.check_new_topic("bad name", 1, 1, {}), ErrorCode.invalid_topic_exception),
        (lambda: topics.check_new_topic("__consumer_offsets", 1, 1, {}), ErrorCode.invalid_request),
        (lambda: topics.check_new_topic("t", 0, 1, {}), ErrorCode.invalid_partitions),
        (lambda: topics.check_new_topic("t", 1, 2, {}), ErrorCode.invalid_replication_factor),
        (lambda: topics.check_new_topic("t", 1, 1, {"retention.ms": "soon"}), ErrorCode.invalid_config),
        (lambda: topics.check_new_topic("t", 1, 1, {"no.such.config": "1"}), ErrorCode.invalid_config),
    ]
    for call, code in cases:
        assert _refused(call).code == code
    assert topics.check_new_topic("t", -1, -1, {}) == {}  # num.partitions and the one replica
    assert not topics.auto_create_allowed("__consumer_offsets")
    assert not topics.auto_create_allowed("bad name")
    assert not make({"auto.create.topics.enable": "false"}).topics.auto_create_allowed("t")


def test_a_reserved_name_is_taken_until_each_reservation_is_released(make: Callable[..., Env]) -> None:
    topics = make().topics
    topics.reserve_topic("orders", 3)
    topics.reserve_topic("orders")  # e.g. its files still going while a creation is judged
    assert "orders" in topics.pending_topics
    assert _refused(lambda: topics.check_new_topic("orders", 1, 1, {})).code == ErrorCode.topic_already_exists
    assert not topics.auto_create_allowed("orders")
    topics.release_topic("orders")
    assert "orders" in topics.pending_topics
    topics.release_topic("orders", 3)
    assert "orders" not in topics.pending_topics
    assert topics.check_new_topic("orders", 1, 1, {}) == {}
    assert topics.auto_create_allowed("orders")


def test_the_partition_budget_counts_the_store_and_the_reserved_partitions(make: Callable[..., Env]) -> None:
    env = make({"max.partitions": "10"})
    topics = env.topics
    topics.create_topic("held", 4, {})
    topics.check_partition_budget(6)
    error = _refused(lambda: topics.check_partition_budget(7))
    assert error.code == ErrorCode.policy_violation
    assert "holds 4 partitions; 7 more would exceed max.partitions=10" in str(error.message)
    topics.reserve_topic("coming", 3)
    topics.check_partition_budget(3)
    assert _refused(lambda: topics.check_partition_budget(4)).code == ErrorCode.policy_violation
    topics.release_topic("coming", 3)
    topics.check_partition_budget(6)  # released: the budget is back
    topics.add_partitions("held", 10)
    assert env.store.partition_count() == 10
    assert _refused(lambda: topics.check_partition_budget(1)).code == ErrorCode.policy_violation


async def test_auto_creation_reserves_until_made_and_is_refused_over_the_budget(make: Callable[..., Env]) -> None:
    env = make({"num.partitions": "4", "max.partitions": "6"})
    topics = env.topics
    creation = topics.auto_create_off_loop("clicks")
    assert creation is not None
    assert creation.partitions == 4
    assert "clicks" in topics.pending_topics
    assert not topics.auto_create_allowed("clicks")  # a second asker creates nothing
    assert topics.auto_create_off_loop("views") is None  # 4 reserved + 4 > 6
    made = await creation.topic
    assert made is not None
    assert made.partitions == 4
    assert env.store.get("clicks") is made
    assert "clicks" not in topics.pending_topics
    assert topics.auto_create_off_loop("views") is None  # 4 held + 4 > 6
    assert env.store.get("views") is None
    topics.check_partition_budget(2)  # nothing left reserved


async def test_a_big_deletion_holds_the_name_until_its_files_are_gone(make: Callable[..., Env]) -> None:
    worker = HeldWorker()
    env = make(worker=worker)
    topics = env.topics
    small = env.store.create_topic("small", 1, {})
    small_dirs = [plog.directory for plog in small.logs]
    topics.delete_topic("small")  # its files go at once, on the loop
    assert not any(d.exists() for d in small_dirs)
    assert not worker.held
    assert "small" not in topics.pending_topics

    big = env.store.create_topic("big", Topics.INLINE_PARTITIONS + 1, {})
    dirs = [plog.directory for plog in big.logs]
    topics.delete_topic("big")
    assert env.store.get("big") is None
    assert env.forgotten == ["small", "big"]  # each topic's metric series dropped with it
    assert all(d.exists() for d in dirs)
    assert "big" in topics.pending_topics
    assert _refused(lambda: topics.check_new_topic("big", 1, 1, {})).code == ErrorCode.topic_already_exists
    worker.run()
    while "big" in topics.pending_topics:  # released by the removal's callback, on the loop
        await asyncio.sleep(0)
    assert not any(d.exists() for d in dirs)
    assert topics.check_new_topic("big", 1, 1, {}) == {}


async def test_a_topic_created_and_grown_off_the_loop(make: Callable[..., Env]) -> None:
    env = make()
    topics = env.topics
    created = await topics.create_topic_off_loop("wide", 3, {"retention.ms": "1000"})
    assert env.store.get("wide") is created
    assert created.partitions == 3
    await topics.add_partitions_off_loop("wide", 5)
    assert env.store.topics["wide"].partitions == 5
    assert env.store.partition_count() == 5


async def test_a_growth_that_loses_to_a_deletion_leaves_no_partition_behind(make: Callable[..., Env]) -> None:
    worker = HeldWorker()
    env = make(worker=worker)
    topics = env.topics
    env.store.create_topic("brief", 1, {})
    growing = asyncio.ensure_future(topics.add_partitions_off_loop("brief", 3))
    while not worker.held:  # the new partitions are to be made in the worker
        await asyncio.sleep(0)
    topics.delete_topic("brief")
    worker.run()
    with pytest.raises(KafkaError) as caught:
        await growing
    assert caught.value.code == ErrorCode.unknown_topic_or_partition
    assert env.store.get("brief") is None
    assert env.store.partition_count() == 0
    assert not any(partition_dir(env.store.data_dir, "brief", p).exists() for p in range(3))
    with pytest.raises(KafkaError) as gone:
        await topics.add_partitions_off_loop("brief", 4)
    assert gone.value.code == ErrorCode.unknown_topic_or_partition
