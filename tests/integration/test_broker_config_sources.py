"""DescribeConfigs reports where a broker setting comes from as Kafka 4.1 does: an address given
at start with `--advertise` is the static `advertised.listeners`, and `min.insync.replicas` is
the cluster-wide default a Kafka 4.1 cluster starts with (DYNAMIC_DEFAULT_BROKER_CONFIG), for the
broker, for the cluster-wide resource and for every topic that does not override it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from broker.app import start_broker
from broker.config import BrokerConfig
from tests.support.configs import BROKER, DEFAULT_CONFIG, STATIC_BROKER_CONFIG, TOPIC, describe
from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import connect

DYNAMIC_TOPIC_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 3
MIN_ISR = "min.insync.replicas"


class AdvertisedBroker(ThreadBroker):
    """A broker started as `streamshop broker --advertise HOST:PORT` starts one."""

    def __init__(self, data_dir: Path, advertise: tuple[str, int], settings: dict[str, str] | None = None) -> None:
        super().__init__(data_dir, settings)
        self.advertise = advertise

    def start(self) -> ThreadBroker:
        self.thread.start()
        config = BrokerConfig(
            data_dir=self.data_dir,
            listen=("127.0.0.1", self.port),
            advertise=self.advertise,
            admin_listen=("127.0.0.1", 0),
            settings=self.settings,
        )
        self.running = self.run(start_broker(config))
        return self


def test_an_address_advertised_at_start_is_the_static_advertised_listeners(tmp_path: Path) -> None:
    broker = AdvertisedBroker(tmp_path / "broker", ("broker.example", 19092)).start()
    try:
        _, configs = describe(broker.bootstrap, BROKER, "1", ("advertised.listeners",))
    finally:
        broker.close()
    advertised = configs["advertised.listeners"]
    assert (advertised.value, advertised.source, advertised.read_only) == (
        "PLAINTEXT://broker.example:19092",
        STATIC_BROKER_CONFIG,
        True,
    )
    # Kafka's default is null: no DEFAULT_CONFIG synonym.
    assert advertised.synonyms == [("advertised.listeners", "PLAINTEXT://broker.example:19092", STATIC_BROKER_CONFIG)]


def test_min_insync_replicas_is_a_cluster_wide_default_for_the_broker_and_its_topics(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    broker = broker_factory(settings={MIN_ISR: "1"})
    with connect(broker.bootstrap) as conn:
        assert conn.create_topic("isr.default").error_code == 0
        assert conn.create_topic("isr.set", configs={MIN_ISR: "1"}).error_code == 0
    chain = [
        (MIN_ISR, "1", DYNAMIC_DEFAULT_BROKER_CONFIG),
        (MIN_ISR, "1", STATIC_BROKER_CONFIG),
        (MIN_ISR, "1", DEFAULT_CONFIG),
    ]

    setting = describe(broker.bootstrap, BROKER, "1", (MIN_ISR,))[1][MIN_ISR]
    assert (setting.value, setting.source, setting.read_only, setting.synonyms) == (
        "1",
        DYNAMIC_DEFAULT_BROKER_CONFIG,
        False,
        chain,
    )
    cluster_wide = describe(broker.bootstrap, BROKER, "")[1]
    assert list(cluster_wide) == [MIN_ISR]
    assert (cluster_wide[MIN_ISR].value, cluster_wide[MIN_ISR].source, cluster_wide[MIN_ISR].synonyms) == (
        "1",
        DYNAMIC_DEFAULT_BROKER_CONFIG,
        chain[:1],
    )
    default = describe(broker.bootstrap, TOPIC, "isr.default", (MIN_ISR,))[1][MIN_ISR]
    assert (default.value, default.source, default.synonyms) == ("1", DYNAMIC_DEFAULT_BROKER_CONFIG, chain)
    overridden = describe(broker.bootstrap, TOPIC, "isr.set", (MIN_ISR,))[1][MIN_ISR]
    assert (overridden.source, overridden.synonyms) == (
        DYNAMIC_TOPIC_CONFIG,
        [(MIN_ISR, "1", DYNAMIC_TOPIC_CONFIG), *chain],
    )
