"""The suite's tiers and shared fixtures.

Markers say what a test needs beyond Python (registered in pyproject.toml, `--strict-markers`):
``kafka`` (Apache Kafka's JVM), ``spark`` (PySpark's JVM), ``browser`` (Chromium), ``stack`` (a
whole `streamshop up`), ``fuzz`` (a fuzzer bounded by inputs), ``slow``, ``compose`` (a Docker
engine: tests/compose/, run apart by `make test-compose`).  `make test-fast` runs
the tests that need none of them; `make test` runs everything, in parallel (pytest-xdist): the
`kafka` tier on one worker (with the run's Apache Kafka cluster, started once), the `spark` tier
in two queues (the tests of the run's SparkSession; jobs and stacks with a Spark JVM of their
own), and the tests that share a module's fixture (a stack) together, so that each
expensive fixture starts once per run.

Every process the run starts carries the run's mark (tests.support.processes); one still alive
when the run ends fails it, after being killed.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import hypothesis
import pytest

from kit import telemetry
from registry.app import RunningRegistry
from streamshop import kafka_cluster, postgres
from streamshop.kafka_cluster import Cluster
from tests.support import examples as _examples  # noqa: F401 - registers the profiles
from tests.support import processes, runtime_view
from tests.support.fault_clients import Fleet
from tests.support.harness import BrokerProcess, ThreadBroker
from tests.support.registry import ThreadRegistry, registry
from tests.support.timeline import Timeline

# Every Spark JVM of the run (the shared session, and each analytics job or stack it starts, which
# inherit the environment) is short-lived and small: C1 alone starts one with about a third less
# CPU, on 2 cores shared with Kafka's JVMs. The job's behaviour is the same; only the JIT differs.
os.environ.setdefault("ANALYTICS_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")

# OpenTelemetry's SDK in the test process, as `serve_app` installs it in a service (no exporter):
# the in-process apps trace as the processes do (tests/support/spans.py records).  The aiohttp
# client is left alone: the tests' clients send the trace headers a test gives them.
telemetry.configure("tests", http_client=False)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# A heavy test's own timeout (pytest-timeout's default, 120 s, is for the rest): a JVM cluster or
# a stack with Spark starts within minutes on a busy 2-core machine, and the waits inside the
# tests are on conditions, so this only ends a test that hangs.
HEAVY = {"kafka": 900, "spark": 900, "stack": 900, "browser": 600, "fuzz": 600, "slow": 600, "compose": 2400}
# Session fixtures shared across modules: the tests that use one run on the kafka tier's worker.
SHARED = ("apache_kafka", "spark", "pg_server")

# Property tests count examples, never time: a loaded machine must not turn into failures.
# (tests/support/examples.py registers the profiles; `make test-fast` runs `streamshop-fast`.)
hypothesis.settings.load_profile("streamshop")


def pytest_configure(config: pytest.Config) -> None:
    processes.mark_run()
    processes.interrupt_on_sigterm()
    # The processes tests start run without the development tools (tests/support/runtime_view.py).
    # Not the controller of a parallel run: its workers run the tests, hypothesis included.
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        runtime_view.hide_dev_tools(os.environ)
    if not hasattr(config, "workerinput"):  # the controller sees every worker's reports
        config.pluginmanager.register(Timeline(), "streamshop-timeline")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        limits = [seconds for name, seconds in HEAVY.items() if item.get_closest_marker(name)]
        if limits and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(max(limits)))
        if item.get_closest_marker("xdist_group"):
            continue
        group = _group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def _group(item: pytest.Item) -> str | None:
    """The xdist group of a test: the JVM tiers each on one worker, in turn (2 cores run one
    Kafka cluster, one SparkSession's tests and one stack with its Spark job beside the light
    tests, not four of each), the run's Apache Kafka cluster with them; else a test sharing a
    module- or class-scoped fixture with its module's others."""
    if item.get_closest_marker("kafka"):
        return "kafka"
    info = getattr(item, "_fixtureinfo", None)
    scopes = {name: defs[-1].scope for name, defs in info.name2fixturedefs.items() if defs} if info else {}
    if "apache_kafka" in scopes:
        return "kafka"
    if "spark" in scopes:
        return "spark"
    if "pg_server" in scopes:
        return "postgres"  # the run's PostgreSQL server, started once
    if item.get_closest_marker("spark"):
        # Spark in a JVM of its own: a stack's analytics job (the second Spark tier, beside the
        # tests of the run's shared SparkSession), or an analytics job run alone (the third: its
        # SIGKILL tests take minutes, which the stacks' queue need not wait for).
        return "spark-stack" if item.get_closest_marker("stack") or item.get_closest_marker("browser") else "spark-jobs"
    if info is None:
        return None
    if any(scope in ("module", "class", "package") for scope in scopes.values()):
        return item.module.__name__ if item.module is not None else None
    return None


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):
        return  # a worker of a parallel run: the controller checks once they are all gone
    import os

    left = processes.leftovers(os.environ[processes.RUN_MARK], processes.ancestors())
    if not left:
        return
    processes.kill(set(left))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{len(left)} process(es) the run started were still running, now killed:"]
    lines += [f"  {pid}: {command}" for pid, command in sorted(left.items())]
    if reporter is not None:
        reporter.write_sep("=", "processes left behind", red=True)
        for line in lines:
            reporter.write_line(line, red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The run's SparkSession (local[2]), its JVM stopped at the end."""
    from tests.support.spark import start_spark, stop_spark

    session = start_spark()
    try:
        yield session
    finally:
        stop_spark(session)


@pytest.fixture(scope="session")
def apache_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The run's 3-node Apache Kafka cluster (KRaft, `streamshop kafka-cluster`): replication
    factor 3, min.insync.replicas 2.  A test that stops a node starts it again."""
    directory = tmp_path_factory.mktemp("kafka-cluster")
    try:
        yield kafka_cluster.start(directory, nodes=3, heap_mb=320, timeout=300)
    finally:
        kafka_cluster.stop(directory, grace=30)


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[postgres.Server]:
    """The run's PostgreSQL server (`streamshop postgres`), stopped at the end; each test makes
    its own database on it (tests.support.postgres.fresh_database)."""
    directory = tmp_path_factory.mktemp("postgres")
    try:
        yield postgres.start(directory, timeout=120)
    finally:
        postgres.stop(directory)


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., ThreadBroker]]:
    """Start in-thread brokers: `broker_factory(settings={...}, clock=...)`."""
    started: list[ThreadBroker] = []

    def make(settings: dict[str, str] | None = None, clock: object = None, name: str = "broker") -> ThreadBroker:
        b = ThreadBroker(tmp_path / name, settings, clock)  # type: ignore[arg-type]
        started.append(b)
        return b.start()

    yield make
    for b in started:
        b.close()


@pytest.fixture
def broker(broker_factory: Callable[..., ThreadBroker]) -> ThreadBroker:
    """A fresh broker with default settings."""
    return broker_factory()


@pytest.fixture
async def running_registry(broker: ThreadBroker) -> AsyncIterator[RunningRegistry]:
    """A real schema registry, in-process on the test's loop, storing in `broker`."""
    async with registry(broker.bootstrap) as running:
        yield running


@pytest.fixture(scope="session")
def shared_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadRegistry]:
    """A schema registry for tests that only register and look up the services' schemas (the
    services' tests, not the registry's): one per worker, on a broker of its own, started once
    instead of per test.  Its subjects gather every test's registrations of the same schemas."""
    broker = ThreadBroker(tmp_path_factory.mktemp("shared-registry-broker")).start()
    try:
        with ThreadRegistry(broker.bootstrap) as running:
            yield running
    finally:
        broker.close()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    """The fault tier's client processes, stopped when the test ends, failed or not."""
    clients = Fleet(tmp_path)
    try:
        yield clients
    finally:
        clients.close()


@pytest.fixture
def broker_process_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """Start `streamshop broker` child processes (killed at teardown)."""
    started: list[BrokerProcess] = []

    def make(
        settings: dict[str, str] | None = None,
        name: str = "broker",
        nofile: int | None = None,
        wrapper: Sequence[str] = (),
    ) -> BrokerProcess:
        b = BrokerProcess(tmp_path / name, settings, nofile=nofile, wrapper=wrapper)
        started.append(b)
        return b.start()

    yield make
    for b in started:
        b.kill()
