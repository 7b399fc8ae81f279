"""`streamshop analytics run` and `streamshop analytics replay`: the jobs as one process.

`run` starts one streaming query per job (`analytics.jobs`) in a local SparkSession, all
committing to one consumer group (`analytics` by default): each query commits only its own
topics' partitions, standalone (no group membership), so the group's committed offsets are the
union of the three and `streamshop groups describe analytics` shows every job's lag.  Every
micro-batch goes through the job's ledger (`analytics.ledger`) to Parquet and the results topic
(`analytics.sinks`), and prints one progress line.  With `--once` each query processes what is
available when it starts (`trigger(availableNow=True)`), commits it and stops; without it, a
micro-batch every `--trigger` seconds until SIGTERM or Ctrl-C, which stop the queries cleanly.

`replay` recomputes everything from the earliest retained offsets into `DATA_DIR/replay`
(emptied first), publishing to `<results topic>.replay` and committing to `<group>-replay`: the
running job, its group and its results are left alone.

Every option can be set by an `ANALYTICS_*` environment variable (flags win; analytics.settings).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from confluent_kafka import KafkaError, KafkaException
from opentelemetry.trace import Span
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.listener import StreamingQueryListener
from pyspark.sql.streaming.query import StreamingQuery

from analytics import offsets as off
from analytics.jobs import JOBS, Job, aggregate, facts_of, reader_schema
from analytics.ledger import Ledger, next_generation
from analytics.settings import AnalyticsConfig
from analytics.sinks import ParquetOutputs, ResultsTopic, now
from analytics.tracing import BatchTracer, topics_of
from kit import process, telemetry
from kit.process import StartupError
from kit.start_phases import StartPhases
from schemas.blocking_registry import shown

__all__ = ["AnalyticsConfig", "replay", "run", "run_jobs"]

# Seconds a stop waits for the batch in progress to finish: within the grace a supervisor gives
# before SIGKILL (Docker's 10 s, `streamshop up`'s 30 s), leaving time for Spark's own shutdown.
STOP_GRACE = 5.0
# Seconds a query may take to its first batch before the next query starts anyway.
FIRST_BATCH_WAIT = 120.0
# Starting a query of a Python data source, Spark starts the Python process that serves its
# offsets and gives it a fixed ten seconds to connect back; on a saturated host it can miss
# them, and the query fails before its first batch, having read nothing. Such a query is
# started again (from its checkpoint), up to this many times in all, after a pause that grows
# (a start-up storm of other processes passes; one more try at once would meet it again).
START_ATTEMPTS = 6
START_PAUSES = (5.0, 10.0, 20.0, 30.0, 30.0)
MISSED_CONNECT_BACK = "to connect back"
# The line printed before the ready line: the start's phases (kit.start_phases), e.g.
# `streamshop analytics start: python 0.4 s, imports 2.1 s, ..., total 31.0 s`.
START_LINE = "streamshop analytics start"

# -- progress ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchStats:
    records: int
    values: int
    quarantined: int
    late: int
    superseded: int
    seconds: float


class Progress(StreamingQueryListener):
    """One line per micro-batch, once Spark reports it done: the sink's figures plus the lag
    (records between the batch's end and the latest offsets the source saw)."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self._lock = threading.Lock()
        self._stats: dict[tuple[str, int], BatchStats] = {}
        self._printed: dict[str, int] = {}
        self.lag: dict[str, int | None] = {}

    def record(self, job: str, batch_id: int, stats: BatchStats) -> None:
        with self._lock:
            self._stats[(job, batch_id)] = stats

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        name = str(progress.name or "")
        if not name.startswith("analytics-"):  # another query of a shared session
            return
        job = name.removeprefix("analytics-")
        batch_id = int(progress.batchId)
        lag = _lag(progress.sources)
        with self._lock:
            stats = self._stats.pop((job, batch_id), None)
            self.lag[job] = lag
            self._printed[job] = max(batch_id, self._printed.get(job, -1))
            if stats is None:  # a batch the sink never saw (no data): nothing to say
                return
            print(
                f"analytics {job} batch {batch_id}: {stats.records:,} records, {stats.values:,} metric values, "
                f"{stats.quarantined:,} quarantined, {stats.late:,} late"
                + (f", {stats.superseded} earlier batch(es) superseded" if stats.superseded else "")
                + f", lag {_count(lag)} ({stats.seconds:.2f} s)",
                file=self.out,
                flush=True,
            )

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass

    def printed(self, job: str) -> int:
        with self._lock:
            return self._printed.get(job, -1)


def _lag(sources: Sequence[Any]) -> int | None:
    """Records between the batch's end and the latest offsets the source saw; None when the
    source reported no latest offsets (a batch run again after a restart is planned from
    Spark's checkpoint, without asking the source)."""
    total = 0
    for source in sources:
        latest, end = _offsets(source.latestOffset), _offsets(source.endOffset)
        if latest is None or end is None:
            return None
        total += sum(max(0, o - end.get(tp, 0)) for tp, o in latest.items())
    return total


def _count(n: int | None) -> str:
    return "unknown" if n is None else f"{n:,}"


def _offsets(text: str | None) -> dict[tuple[str, int], int] | None:
    try:
        parsed = json.loads(text or "")
    except ValueError:
        return None
    return off.flatten(parsed) if isinstance(parsed, dict) else None


# -- the sink ----------------------------------------------------------------------------------


class JobSink:
    """`foreachBatch` of one job: aggregate, ledger, Parquet, topic, progress."""

    def __init__(self, job: Job, config: AnalyticsConfig, progress: Progress, topic: ResultsTopic) -> None:
        self.job = job
        state = config.data_dir / "state" / job.name
        self.generation = next_generation(state)
        self.ledger = Ledger(state, job.name, self.generation, int(config.lateness_seconds * 1000))
        self.parquet = ParquetOutputs(config.data_dir)
        self.topic = topic
        self.facts = job.facts()
        self.arity = {f.kind: len(f.dims) for f in self.facts}
        self.progress = progress
        self.batches = 0
        self.last_batch: int | None = None
        self.tracer = BatchTracer(job.name, config.group_id, config.kafka_conf())
        self.topics = topics_of(job.subscription)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        with self.tracer.batch(batch_id, self.topics) as span:
            self._batch(df, batch_id, span)

    def _batch(self, df: DataFrame, batch_id: int, span: Span) -> None:
        started = time.monotonic()
        if not self.ledger.started:
            self.ledger.start()
        facts, quarantined = facts_of(aggregate(df, self.facts).collect(), self.arity)
        self.tracer.done(span, facts.records, facts.coverage)
        applied = self.ledger.apply(batch_id, facts)
        computed_at = now()
        self.parquet.write_metrics(self.job.name, self.generation, batch_id, applied.values, computed_at)
        self.parquet.write_quarantine(self.job.name, self.generation, batch_id, quarantined)
        self.topic.publish(self.job.name, self.generation, batch_id, applied.values, computed_at)
        self.batches += 1
        self.last_batch = batch_id
        stats = BatchStats(
            records=facts.records,
            values=len(applied.values),
            quarantined=len(quarantined),
            late=applied.late,
            superseded=len(applied.superseded),
            seconds=time.monotonic() - started,
        )
        self.progress.record(self.job.name, batch_id, stats)


# -- running -----------------------------------------------------------------------------------


@contextmanager
def _locked(data_dir: Path, *, empty: bool = False) -> Iterator[None]:
    """One job per data directory: generations and state files assume a single writer.
    `empty`: delete everything in it first (a replay starts from nothing)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / ".lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StartupError(f"another analytics job is using {data_dir}") from None
        if empty:
            for child in data_dir.iterdir():
                if child.name != ".lock":
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _start_query(spark: SparkSession, job: Job, config: AnalyticsConfig, sink: JobSink) -> StreamingQuery:
    options = {
        "bootstrap.servers": config.bootstrap_servers,
        **job.subscription,
        "schema.registry.url": config.registry_url,
        "readerSchema": reader_schema(job.fields),
        "group.id": config.group_id,
        "startingOffsets": config.starting_offsets,
        **{f"kafka.{k}": v for k, v in config.kafka.items()},
    }
    if config.max_records_per_trigger is not None:
        options["maxRecordsPerTrigger"] = str(config.max_records_per_trigger)
    stream = spark.readStream.format("streamshop-kafka").options(**options).load()
    writer = (
        stream.writeStream.queryName(f"analytics-{job.name}")
        .foreachBatch(sink)
        .option("checkpointLocation", str(config.data_dir / "checkpoints" / job.name))
    )
    writer = (
        writer.trigger(availableNow=True)
        if config.once
        else writer.trigger(processingTime=f"{config.trigger_seconds} seconds")
    )
    return writer.start()


def run_jobs(
    config: AnalyticsConfig,
    *,
    spark: SparkSession | None = None,
    stop: threading.Event | None = None,
    out: IO[str] | None = None,
    empty: bool = False,
    clock: StartPhases | None = None,
) -> int:
    """Run the configured jobs until they finish (`once`) or `stop` is set; the exit status:
    0, or 1 when a query failed (its error is printed).  Uses `spark` if given (tests share
    one session), else starts a local one and stops it at the end.  `empty`: start from an
    empty data directory (replays).  `clock`: the start's phases so far (`_run`'s), which the
    line printed before the ready line continues; by default, phases from this call."""
    out = out if out is not None else sys.stdout
    stop = stop if stop is not None else threading.Event()
    clock = clock if clock is not None else StartPhases(time.monotonic(), process_start=False)
    if spark is None and config.python_env is not None and not config.python_env.is_file():
        # Before anything starts: Spark would fail its context's start on it with a stack trace.
        raise StartupError(
            f"no packed environment at {config.python_env}: "
            f"`streamshop analytics pack --output {config.python_env}` builds it"
        )
    with _locked(config.data_dir, empty=empty):
        # The broker and the registry first: without them there is no point starting Spark.
        topics = {
            name: ResultsTopic(config.kafka_conf(), config.registry_url, config.results_topic) for name in config.jobs
        }
        try:
            for topic in topics.values():
                topic.ensure()
        except (OSError, KafkaException) as e:
            detail: object = e
            if isinstance(e, TimeoutError):
                detail = "no answer in time"
            elif isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
                detail = e.args[0].str()
            raise StartupError(
                f"cannot set up the results topic {config.results_topic} (broker {config.bootstrap_servers}, "
                f"registry {shown(config.registry_url)}): {detail}"
            ) from e
        clock.mark("topics")
        own_session = spark is None
        session = spark if spark is not None else _timed_session(config, clock)
        progress = Progress(out)
        session.streams.addListener(progress)
        sinks = [JobSink(JOBS[name], config, progress, topics[name]) for name in config.jobs]
        queries: list[tuple[JobSink, StreamingQuery]] = []
        try:
            for sink in sinks:
                queries.append((sink, _started(session, sink, config, stop, out, clock=None if queries else clock)))
                if len(queries) == 1:
                    # Ready once the first query is past its first batch (it commits from now on);
                    # the others start one at a time after it, each waiting for its own.
                    print(clock.line(START_LINE), file=out, flush=True)
                    print(
                        f"streamshop analytics ready: jobs {','.join(config.jobs)}, group {config.group_id}, "
                        f"data {config.data_dir}, results topic {config.results_topic}"
                        + (", once" if config.once else f", trigger {config.trigger_seconds:g} s")
                        + _where(session),
                        file=out,
                        flush=True,
                    )
            _wait(queries, stop)
        finally:
            _stop_between_batches([query for _, query in queries])
            status = _report(queries, progress, out)
            session.streams.removeListener(progress)
            for topic in topics.values():
                topic.close()
            for sink in sinks:
                sink.tracer.close()
            if own_session:
                from analytics.spark import stop_spark_session

                stop_spark_session(session)
    return status


def _started(
    session: SparkSession,
    sink: JobSink,
    config: AnalyticsConfig,
    stop: threading.Event,
    out: IO[str],
    *,
    clock: StartPhases | None = None,
) -> StreamingQuery:
    """The job's query, started and past its first batch (or failed, or stopped): a start that
    failed because Spark's Python process missed its connect-back is tried again.  `clock`: marks
    the last attempt's start and first batch, and the attempts before it as one phase."""
    name = sink.job.name
    for attempt in range(1, START_ATTEMPTS + 1):
        attempt_began = time.monotonic()
        query = _start_query(session, sink.job, config, sink)
        query_started = time.monotonic()
        _first_batch(query, stop)
        error = query.exception()
        if error is None or MISSED_CONNECT_BACK not in str(error) or attempt == START_ATTEMPTS or stop.is_set():
            if clock is not None:
                if attempt > 1:
                    clock.mark(f"query {name} failed starts", at=attempt_began)
                clock.mark(f"query {name} started", at=query_started)
                # A stop (or a failure, or the wait's limit) before any batch is no first batch.
                done = query.lastProgress is not None
                clock.mark(f"query {name} first batch" if done else f"query {name} no first batch")
            break
        pause = START_PAUSES[min(attempt, len(START_PAUSES)) - 1]
        print(
            f"analytics {sink.job.name}: Spark's Python process did not connect back in time; "
            f"starting the query again in {pause:g} s ({attempt + 1} of {START_ATTEMPTS})",
            file=out,
            flush=True,
        )
        if stop.wait(pause):
            break  # stopping: the failed start is reported as it is
    return query


def _first_batch(query: StreamingQuery, stop: threading.Event, limit: float = FIRST_BATCH_WAIT) -> None:
    """Wait until `query` has run its first batch (or failed, or `limit` passed) before the next
    starts.  Each query of a Python data source makes Spark start Python processes that must
    connect back to the JVM within Spark's fixed ten seconds; started all at once on a busy
    machine, they compete for the cores and some miss it.  One at a time, each starts alone."""
    deadline = time.monotonic() + limit
    while not stop.is_set() and query.isActive and query.lastProgress is None and time.monotonic() < deadline:
        stop.wait(0.1)


def _wait(queries: Sequence[tuple[Any, StreamingQuery]], stop: threading.Event, poll: float = 0.25) -> None:
    """Until `stop`, every query has finished (`--once`), or one query has failed: the others are
    then stopped by the caller and the job exits 1, so that its supervisor (`streamshop up`, a
    container's restart policy) restarts it from the checkpoints, rather than a process that runs
    on with one job dead."""
    while not stop.is_set():
        if any(q.exception() is not None for _, q in queries) or not any(q.isActive for _, q in queries):
            return
        stop.wait(poll)


def _stop_between_batches(queries: Sequence[StreamingQuery], grace: float = STOP_GRACE) -> None:
    """Stop each query between two batches when one finishes within `grace` seconds: a stop in
    the middle of a batch interrupts its Spark job, which is safe (the batch is planned again
    from the checkpoint) but fills the log with the interrupted job's stack traces."""
    deadline = time.monotonic() + grace
    for query in queries:
        while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
            time.sleep(0.05)
        query.stop()


def _where(session: SparkSession) -> str:
    """``, master URL, ui URL``: where the job runs, for the console's table."""
    context = session.sparkContext
    ui = context.uiWebUrl
    return f", master {context.master}" + (f", ui {ui}" if ui else "")


def _timed_session(config: AnalyticsConfig, clock: StartPhases) -> SparkSession:
    """`_session`, its time told apart as the JVM recorded it: until the driver's JVM started
    (`spark-submit`'s scripts and its launcher JVM), until its SparkContext began (the JVM's own
    start, the Py4J gateway, the Python side's conf), and the context and session up.  One phase
    when the JVM's times do not fall within the call (a JVM already running)."""
    from analytics.spark import jvm_start_times

    began = time.monotonic()
    session = _session(config)
    ended = time.monotonic()
    # Wall-clock times to this process's monotonic clock; the JVM's are in whole milliseconds.
    offset = time.time() - ended
    jvm, context = (t - offset for t in jvm_start_times(session))
    if began - 0.01 <= jvm <= context <= ended + 0.01:
        clock.mark("spark launch", at=jvm)
        clock.mark("jvm start", at=context)
        clock.mark("spark context", at=ended)
    else:
        clock.mark("spark session", at=ended)
    return session


def _session(config: AnalyticsConfig) -> SparkSession:
    from analytics.spark import spark_session

    # Each batch's aggregate is small: two shuffle partitions keep the per-task overhead low.
    conf = {"spark.sql.shuffle.partitions": "2"}
    if not config.spark_master.startswith("local"):
        # On a cluster the master's page links to the application's web UI: serve it (on a free
        # port, on loopback as the driver binds) and name it in the ready line.
        conf |= {"spark.ui.enabled": "true", "spark.ui.port": "0"}
    return spark_session(
        "streamshop-analytics",
        master=config.spark_master,
        conf=conf,
        java_options=config.java_options,
        python_env=config.python_env,
    )


def _report(queries: Sequence[tuple[JobSink, StreamingQuery]], progress: Progress, out: IO[str]) -> int:
    status = 0
    for sink, query in queries:
        if sink.last_batch is not None:
            # Progress events arrive asynchronously: let the last batch's line be printed first.
            deadline = time.monotonic() + 10
            while progress.printed(sink.job.name) < sink.last_batch and time.monotonic() < deadline:
                time.sleep(0.05)
        error = query.exception()
        if error is not None:
            print(f"analytics {sink.job.name}: query failed: {error}", file=sys.stderr, flush=True)
            status = 1
        print(
            f"analytics {sink.job.name}: stopped after {sink.batches} batch(es), generation {sink.generation}, "
            f"lag {_count(progress.lag.get(sink.job.name, 0))}",
            file=out,
            flush=True,
        )
    return status


# -- CLI entry points --------------------------------------------------------------------------


def _run(args: argparse.Namespace, jobs: Callable[..., int]) -> int:
    """Settings (2 when one cannot be used), logging, then `jobs` until done or SIGTERM/SIGINT."""

    def body() -> int:
        # From the stamp `streamshop.cli` took: the project's modules (PySpark's among them) and
        # the command line.
        clock = StartPhases()
        clock.mark("imports")
        config = AnalyticsConfig.from_args(args)
        process.start_logging(config, "analytics")
        telemetry.configure("analytics")  # a batch's span (analytics.tracing), exported per OTEL_*
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        clock.mark("settings")
        try:
            return jobs(config, stop=stop, clock=clock)
        finally:
            telemetry.shutdown()

    return process.main("streamshop analytics", body)


def run(args: argparse.Namespace) -> int:
    """`streamshop analytics run`."""
    return _run(args, run_jobs)


def replay(args: argparse.Namespace) -> int:
    """`streamshop analytics replay`: a fresh, bounded recomputation beside the live job."""
    return _run(args, replay_jobs)


def replay_jobs(
    config: AnalyticsConfig,
    *,
    spark: SparkSession | None = None,
    stop: threading.Event | None = None,
    out: IO[str] | None = None,
    clock: StartPhases | None = None,
) -> int:
    """`config.replay()` run once from an empty data directory; then its consumer group is
    deleted: it only carried the replay's progress, and left behind it would show as a group
    falling ever further behind."""
    replayed = config.replay()
    status = run_jobs(replayed, spark=spark, stop=stop, out=out, empty=True, clock=clock)
    if status == 0:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(dict[str, str | int | float | bool](replayed.kafka_conf()))
        for future in admin.delete_consumer_groups([replayed.group_id], request_timeout=30).values():
            future.result(timeout=30)
    return status
