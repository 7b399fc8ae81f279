"""Consumer-group members for the group integration tests, with either real client.

A member subscribes, processes every record it receives (records it as `Processed`) and
then commits the offsets of what it processed: at-least-once, as a service would.  It
reports what happens to it as events (assigned, processed, committed, closed), so the
same `Member` view serves a member running in a thread of the test process
(`ThreadMember`) and one running as a child process (`ChildMember`, which can be
SIGKILLed: `python -m tests.support.group_clients SPEC_JSON` prints one JSON event per
line, each flushed before the commit that follows it).

An assignment *epoch* counts a member's rebalance callbacks: records one member
processed from one partition within one epoch form a contiguous processing *run*.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CLIENTS = ("aiokafka", "confluent")

Event = dict[str, Any]
Emit = Callable[[Event], None]


@dataclass(frozen=True)
class MemberSpec:
    client: str  # "aiokafka" or "confluent"
    bootstrap: str
    group: str
    topics: tuple[str, ...]
    name: str  # also the client id, so the broker's view can be matched
    session_timeout_ms: int | None = None  # None: the client's default
    heartbeat_interval_ms: int | None = None
    protocol: str = "classic"  # confluent only: "consumer" is KIP-848's (the broker times the heartbeats)
    instance_id: str | None = None  # group.instance.id: a static member


@dataclass(frozen=True)
class Processed:
    member: str
    epoch: int
    partition: int
    offset: int
    key: str
    value: str


# --- the consumer loops (run in a thread or as the child's main) ---------------------


def run_member(spec: MemberSpec, emit: Emit, stop: threading.Event) -> None:
    if spec.client == "confluent":
        _run_confluent(spec, emit, stop)
    elif spec.client == "aiokafka":
        asyncio.run(_run_aiokafka(spec, emit, stop))
    else:
        raise ValueError(f"unknown client {spec.client!r}")


def _processed(
    spec: MemberSpec, epoch: int, partition: int, offset: int, *, key: bytes | None, value: bytes | None
) -> Event:
    return {
        "event": "processed",
        "member": spec.name,
        "epoch": epoch,
        "partition": partition,
        "offset": offset,
        "key": (key or b"").decode(),
        "value": (value or b"").decode(),
    }


def _run_confluent(spec: MemberSpec, emit: Emit, stop: threading.Event) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf: dict[str, Any] = {
        "bootstrap.servers": spec.bootstrap,
        "group.id": spec.group,
        "client.id": spec.name,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if spec.session_timeout_ms is not None:
        conf["session.timeout.ms"] = spec.session_timeout_ms
    if spec.heartbeat_interval_ms is not None:
        conf["heartbeat.interval.ms"] = spec.heartbeat_interval_ms
    if spec.protocol != "classic":
        conf["group.protocol"] = spec.protocol
    if spec.instance_id is not None:
        conf["group.instance.id"] = spec.instance_id
    consumer = Consumer(conf)
    epoch = 0
    # The classic protocol (eager) hands over the whole assignment at each rebalance; KIP-848's
    # is incremental: on_assign gives the partitions added, on_revoke those taken away.
    incremental = spec.protocol != "classic"
    held: set[int] = set()

    def assigned(added: list[Any], removed: list[Any]) -> None:
        nonlocal epoch, held
        epoch += 1
        if incremental:
            held = (held | {tp.partition for tp in added}) - {tp.partition for tp in removed}
        else:
            held = {tp.partition for tp in added}
        emit({"event": "assigned", "epoch": epoch, "partitions": sorted(held)})

    try:
        consumer.subscribe(
            list(spec.topics),
            on_assign=lambda _c, ps: assigned(ps, []),
            on_revoke=lambda _c, ps: assigned([], ps),
            on_lost=lambda _c, ps: assigned([], ps),
        )
        emit({"event": "started"})
        while not stop.is_set():
            last: dict[tuple[str, int], int] = {}
            for msg in consumer.consume(num_messages=500, timeout=0.05):
                if msg.error() is not None:
                    emit({"event": "error", "error": str(msg.error())})
                    continue
                partition, offset = msg.partition() or 0, msg.offset() or 0
                emit(_processed(spec, epoch, partition, offset, key=msg.key(), value=msg.value()))
                last[(msg.topic() or "", partition)] = offset
            if not last:
                continue
            try:
                done = consumer.commit(
                    offsets=[TopicPartition(t, p, o + 1) for (t, p), o in last.items()], asynchronous=False
                )
            except KafkaException as e:
                emit({"event": "commit_failed", "error": str(e)})
                continue
            ok = {tp.partition: tp.offset for tp in done or () if tp.error is None}
            emit({"event": "committed", "offsets": ok})
    finally:
        consumer.close()
        emit({"event": "closed"})


async def _run_aiokafka(spec: MemberSpec, emit: Emit, stop: threading.Event) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.errors import KafkaError
    from aiokafka.structs import TopicPartition

    kwargs: dict[str, Any] = {}
    if spec.session_timeout_ms is not None:
        kwargs["session_timeout_ms"] = spec.session_timeout_ms
    if spec.heartbeat_interval_ms is not None:
        kwargs["heartbeat_interval_ms"] = spec.heartbeat_interval_ms
    consumer = AIOKafkaConsumer(
        bootstrap_servers=spec.bootstrap,
        group_id=spec.group,
        client_id=spec.name,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **kwargs,
    )
    epoch = 0

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            nonlocal epoch
            epoch += 1
            emit({"event": "assigned", "epoch": epoch, "partitions": []})

        async def on_partitions_assigned(self, assigned: Any) -> None:
            nonlocal epoch
            epoch += 1
            emit({"event": "assigned", "epoch": epoch, "partitions": sorted(tp.partition for tp in assigned)})

    await consumer.start()
    try:
        consumer.subscribe(list(spec.topics), listener=Listener())
        emit({"event": "started"})
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=50, max_records=500)
            last: dict[TopicPartition, int] = {}
            for tp, records in batches.items():
                for rec in records:
                    emit(_processed(spec, epoch, rec.partition, rec.offset, key=rec.key, value=rec.value))
                    last[tp] = rec.offset
            if not last:
                continue
            try:
                await consumer.commit({tp: o + 1 for tp, o in last.items()})
            except KafkaError as e:
                emit({"event": "commit_failed", "error": repr(e)})
                continue
            emit({"event": "committed", "offsets": {tp.partition: o + 1 for tp, o in last.items()}})
    finally:
        await consumer.stop()
        emit({"event": "closed"})


# --- what the tests see of a member --------------------------------------------------


class Member:
    """One member's observable state, fed by its events (thread-safe)."""

    def __init__(self, spec: MemberSpec, journal: Journal) -> None:
        self.spec = spec
        self.name = spec.name
        self.journal = journal
        self._lock = threading.Lock()
        self._processed: list[Processed] = []
        self._assignment: frozenset[int] = frozenset()
        self._assignments: list[frozenset[int]] = []  # every assignment held, in order
        self._committed: dict[int, int] = {}
        self.commit_failures = 0
        self.errors: list[str] = []
        self.started = threading.Event()
        self.closed = threading.Event()

    def apply(self, event: Event) -> None:
        kind = event["event"]
        with self._lock:
            if kind == "processed":
                rec = Processed(**{k: v for k, v in event.items() if k != "event"})
                self._processed.append(rec)
                self.journal.add(rec)
            elif kind == "assigned":
                self._assignment = frozenset(event["partitions"])
                self._assignments.append(self._assignment)
            elif kind == "committed":
                for p, o in event["offsets"].items():
                    self._committed[int(p)] = max(o, self._committed.get(int(p), 0))
            elif kind == "commit_failed":
                self.commit_failures += 1
            elif kind == "error":
                self.errors.append(event["error"])
            elif kind == "started":
                self.started.set()
            elif kind == "closed":
                self._assignment = frozenset()
                self.closed.set()

    @property
    def assignment(self) -> frozenset[int]:
        with self._lock:
            return self._assignment

    @property
    def assignments(self) -> list[frozenset[int]]:
        with self._lock:
            return list(self._assignments)

    @property
    def processed(self) -> list[Processed]:
        with self._lock:
            return list(self._processed)

    @property
    def committed(self) -> dict[int, int]:
        with self._lock:
            return dict(self._committed)

    @property
    def alive(self) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        """Stop cleanly: the client leaves the group."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {sorted(self.assignment)}>"


class Journal:
    """Every record the members of a pool processed, in the order they processed it
    (a total order across members of the test process; per member for children)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[Processed] = []

    def add(self, rec: Processed) -> None:
        with self._lock:
            self._records.append(rec)

    def records(self, group_members: Iterable[Member] | None = None) -> list[Processed]:
        with self._lock:
            records = list(self._records)
        if group_members is None:
            return records
        names = {m.name for m in group_members}
        return [r for r in records if r.member in names]


class ThreadMember(Member):
    """A member in a thread of the test process (aiokafka on its own event loop)."""

    def __init__(self, spec: MemberSpec, journal: Journal) -> None:
        super().__init__(spec, journal)
        self._stop = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=f"member-{spec.name}", daemon=True)

    def _main(self) -> None:
        try:
            run_member(self.spec, self.apply, self._stop)
        except BaseException as e:  # reported by close()
            self._failure = e

    def start(self) -> ThreadMember:
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    def request_stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(20)
        assert not self._thread.is_alive(), f"{self.name} did not close"
        if self._failure is not None:
            raise AssertionError(f"{self.name} failed") from self._failure


class ChildMember(Member):
    """A member in a child process: `close` is SIGTERM (the client leaves the group),
    `kill` is SIGKILL (it just vanishes; the broker notices at session timeout)."""

    def __init__(self, spec: MemberSpec, journal: Journal) -> None:
        super().__init__(spec, journal)
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._terminated = False
        self.returncode: int | None = None

    def start(self) -> ChildMember:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.group_clients", json.dumps(asdict(self.spec))],
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        self._reader = threading.Thread(target=self._read, args=(self.proc,), name=f"reader-{self.name}", daemon=True)
        self._reader.start()
        return self

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line cut short by SIGKILL
            self.apply(event)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM, once): it closes its consumer, leaving the group."""
        if self.proc is not None and not self._terminated and self.proc.poll() is None:
            self.started.wait(20)  # SIGTERM before its handler is installed would just kill it
            self._terminated = True
            self.proc.send_signal(signal.SIGTERM)

    def _wait(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(10)
        assert self._reader is not None
        self._reader.join(10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self.proc = None
        self.returncode = code
        return code

    def close(self) -> None:
        if self.proc is None:
            return
        self.terminate()
        code = self._wait(20)
        assert code == 0, f"{self.name} exited with {code}"

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no last commit."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self._wait(10)


class MemberPool:
    """Starts members and closes every one of them at the end (a test's fixture)."""

    def __init__(self) -> None:
        self.journal = Journal()
        self.members: list[Member] = []
        self._count = 0

    def _spec(self, client: str, bootstrap: str, group: str, topics: str | Iterable[str], **opts: Any) -> MemberSpec:
        self._count += 1
        name = opts.pop("name", None) or f"{group}-{client}-{self._count}"
        topics = (topics,) if isinstance(topics, str) else tuple(topics)
        return MemberSpec(client, bootstrap, group, topics, name, **opts)

    def thread(self, client: str, bootstrap: str, group: str, topics: str | Iterable[str], **opts: Any) -> ThreadMember:
        member = ThreadMember(self._spec(client, bootstrap, group, topics, **opts), self.journal)
        self.members.append(member)
        return member.start()

    def child(self, client: str, bootstrap: str, group: str, topics: str | Iterable[str], **opts: Any) -> ChildMember:
        member = ChildMember(self._spec(client, bootstrap, group, topics, **opts), self.journal)
        self.members.append(member)
        return member.start()

    def close_all(self) -> None:
        """Close every member still running (all at once, so the group winds down
        without a rebalance per member); re-raises the first failure."""
        failures: list[BaseException] = []
        for member in self.members:
            if isinstance(member, ThreadMember):
                member.request_stop()
            elif isinstance(member, ChildMember):
                member.terminate()
        for member in self.members:
            try:
                member.close()
            except BaseException as e:  # close the rest first
                failures.append(e)
        if failures:
            raise failures[0]


@contextlib.contextmanager
def member_pool() -> Iterator[MemberPool]:
    pool = MemberPool()
    try:
        yield pool
    finally:
        pool.close_all()


# --- waiting and checking ------------------------------------------------------------


def wait_until(predicate: Callable[[], object], timeout: float, what: str, step: float = 0.02) -> float:
    """Poll until `predicate()` is true; returns the seconds it took."""
    start = time.monotonic()
    deadline = start + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)
    return time.monotonic() - start


def is_balanced(members: Iterable[Member], partitions: int) -> bool:
    """The members' assignments are disjoint and together cover every partition."""
    seen: list[int] = []
    for m in members:
        seen.extend(m.assignment)
    return sorted(seen) == list(range(partitions))


def wait_balanced(members: list[Member], partitions: int, sizes: list[int] | None = None, timeout: float = 10) -> float:
    """Wait until the members share the partitions; with `sizes`, until their sorted
    assignment sizes are exactly that too (so a member that joined late, and got nothing
    in a generation it missed, is not mistaken for a settled group)."""

    def settled() -> bool:
        if not is_balanced(members, partitions):
            return False
        return sizes is None or sorted(len(m.assignment) for m in members) == sizes

    return wait_until(settled, timeout, f"{len(members)} members to share {partitions} partitions (now {members})")


def keyed_records(keys: int, per_key: int, start: int = 0) -> list[dict[str, Any]]:
    """`per_key` records for each of `keys` keys, interleaved; the value is `key:seq`."""
    return [
        {"key": f"k{k}".encode(), "value": f"k{k}:{seq}".encode()}
        for seq in range(start, start + per_key)
        for k in range(keys)
    ]


def seq_of(value: str) -> int:
    return int(value.rsplit(":", 1)[1])


def produce(bootstrap: str, topic: str, records: Iterable[Mapping[str, Any]]) -> set[tuple[int, int]]:
    """Produce with an idempotent producer (per-key order is the log's order); returns
    the (partition, offset) of every record."""
    from tests.support.kafka_clients import confluent_produce

    delivered = confluent_produce(bootstrap, topic, records, {"enable.idempotence": True})
    return {(m.partition() or 0, m.offset() or 0) for m in delivered}


def coverage(records: Iterable[Processed]) -> Counter[tuple[int, int]]:
    return Counter((r.partition, r.offset) for r in records)


def assert_each_exactly_once(records: Iterable[Processed], produced: set[tuple[int, int]]) -> None:
    seen = coverage(records)
    missing = produced - set(seen)
    extra = set(seen) - produced
    twice = {k: n for k, n in seen.items() if n > 1}
    assert not missing, f"{len(missing)} records never processed, e.g. {sorted(missing)[:5]}"
    assert not extra, f"{len(extra)} records processed that were not produced, e.g. {sorted(extra)[:5]}"
    assert not twice, f"{len(twice)} records processed more than once, e.g. {sorted(twice.items())[:5]}"


def assert_at_least_once(records: Iterable[Processed], produced: set[tuple[int, int]]) -> None:
    seen = set(coverage(records))
    missing = produced - seen
    assert not missing, f"{len(missing)} records never processed, e.g. {sorted(missing)[:5]}"
    assert seen <= produced, f"unexpected records {sorted(seen - produced)[:5]}"


def runs(records: Iterable[Processed]) -> dict[tuple[str, int, int], list[Processed]]:
    """Contiguous processing runs: (member, epoch, partition) -> records in the order the
    member processed them."""
    out: dict[tuple[str, int, int], list[Processed]] = {}
    for rec in records:
        out.setdefault((rec.member, rec.epoch, rec.partition), []).append(rec)
    return out


def assert_runs_in_order(records: Iterable[Processed]) -> int:
    """Per-key order within every contiguous processing run: in each run, offsets go up
    by exactly 1 from one record to the next (the member read one unbroken slice of the
    partition), and each key's sequence numbers go up by exactly 1 (it saw that key's
    records in the order they were produced, none skipped, none repeated).  Returns the
    number of runs."""
    all_runs = runs(records)
    for run_id, run in all_runs.items():
        offsets = [r.offset for r in run]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), f"run {run_id} is not contiguous"
        last_seq: dict[str, int] = {}
        for r in run:
            seq = seq_of(r.value)
            if r.key in last_seq:
                assert seq == last_seq[r.key] + 1, f"run {run_id}: {r.key} went {last_seq[r.key]} -> {seq}"
            last_seq[r.key] = seq
    return len(all_runs)


# --- the child process ---------------------------------------------------------------


def _child_main(raw_spec: str) -> int:
    data = json.loads(raw_spec)
    data["topics"] = tuple(data["topics"])
    spec = MemberSpec(**data)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _sig, _frame: stop.set())

    def emit(event: Event) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()  # before the commit that follows: a SIGKILL loses no report

    run_member(spec, emit, stop)
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1]))
