"""Kafka clients as child processes that write their history as JSON lines, so that a fault
test can SIGKILL or SIGSTOP one of them and still know what it was told and what it read
(tests/support/history.py).  Run as `python -m tests.support.fault_clients ROLE ...`:

- `consume`: a consumer group member (classic or `group.protocol=consumer`) that commits
  synchronously after each batch it reads, recording its assignments, reads and commits;
- `share`: a share-group member accepting each record it is given (or, with `--hold`,
  holding its first records unacknowledged until it is killed; with `--close-with-acks`,
  accepting its first records and closing at once, the acknowledgements sent by the close);
- `transact`: a transactional producer writing numbered transactions of a few records (with
  `--stall-at N`, stopping half-way through transaction N, its first records in the log).

With `--barrier`, every role creates its client, then waits for the test to release a
`Barrier`, so that several members send their first requests at once; every role stops
cleanly on SIGTERM.  Times are `time.monotonic()`: one clock for every process of the
machine.  `Fleet` starts, kills, pauses and stops them for a test; `confluent_delivery`
records a confluent-kafka producer's deliveries in a history."""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import (
    AcknowledgeType,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    ShareConsumer,
    TopicPartition,
)

from tests.support.history import (
    Acknowledged,
    CommitOutcome,
    Committed,
    Event,
    Fault,
    History,
    Left,
    Owned,
    Position,
    Produced,
    Read,
    Session,
    Stored,
    Transaction,
    TxnOutcome,
    append_jsonl,
    lost_to_group,
)
from tests.support.kafka_wire import connect

REPO = Path(__file__).resolve().parents[2]
_stopping = False


def _on_term(signum: int, frame: object) -> None:
    global _stopping  # noqa: PLW0603 - the one flag a signal handler sets
    _stopping = True


def _wait_for(barrier: Path | None, out: Path) -> None:
    """Say ready (`OUT.ready`), then block on a shared lock of `barrier`, which the test holds
    exclusively until every client is ready: released, they all go at the same instant."""
    if barrier is None:
        return
    out.with_suffix(".ready").touch()
    with barrier.open("rb") as f:
        fcntl.flock(f, fcntl.LOCK_SH)


def _value(message: Message) -> bytes:
    value = message.value()
    return value if isinstance(value, bytes) else b""


_Recorder = Callable[[Event], None]


def _recorder(out: Path) -> _Recorder:
    return lambda event: append_jsonl(out, event)


def consume(args: argparse.Namespace) -> int:
    record = _recorder(args.out)
    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.member,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "group.protocol": args.protocol,
        **({"debug": args.debug} if args.debug else {}),
    }
    if args.protocol == "classic":
        config |= {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "partition.assignment.strategy": "range"}
    consumer = Consumer(config)
    owned_since: dict[tuple[str, int], float] = {}

    def owned(partitions: list[TopicPartition], until: float | None) -> None:
        for tp in partitions:
            key = (tp.topic or "", tp.partition or 0)
            since = owned_since.pop(key, None) if until is not None else owned_since.setdefault(key, time.monotonic())
            if since is not None:
                record(
                    Owned(
                        client=args.member,
                        group=args.group,
                        member=args.member,
                        topic=key[0],
                        partition=key[1],
                        since=since,
                        until=until,
                    )
                )

    def on_assign(c: Consumer, partitions: list[TopicPartition]) -> None:
        owned(partitions, None)

    def on_revoke(c: Consumer, partitions: list[TopicPartition]) -> None:
        owned(partitions, time.monotonic())

    _wait_for(args.barrier, args.out)
    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    try:
        while not _stopping:
            batch = consumer.consume(100, 0.3)
            received = time.monotonic()
            nexts: dict[tuple[str, int], int] = {}
            for message in batch:
                if message.error() is not None:
                    continue
                key = (message.topic() or "", message.partition() or 0)
                offset = message.offset() or 0
                record(
                    Read(
                        client=args.member,
                        group=args.group,
                        member=args.member,
                        topic=key[0],
                        partition=key[1],
                        offset=offset,
                        value=_value(message),
                        requested_after=owned_since.get(key, received),
                        received=received,
                    )
                )
                nexts[key] = offset + 1
            # Only what it still owns: a partition revoked during that consume() (its callbacks
            # run there) is its successor's to commit.
            nexts = {key: offset for key, offset in nexts.items() if key in owned_since}
            if nexts:
                _commit(consumer, args, nexts, record)
    finally:
        record(Left(client=args.member, group=args.group, member=args.member, at=time.monotonic()))
        consumer.close()
    return 0


def _commit(consumer: Consumer, args: argparse.Namespace, nexts: dict[tuple[str, int], int], record: _Recorder) -> None:
    started = time.monotonic()
    offsets = [TopicPartition(t, p, o) for (t, p), o in nexts.items()]
    try:
        results = consumer.commit(offsets=offsets, asynchronous=False) or []
        failed = {(tp.topic or "", tp.partition or 0) for tp in results if tp.error is not None}
    except KafkaException:
        failed = set(nexts)
    done = time.monotonic()
    for (topic, partition), offset in nexts.items():
        outcome: CommitOutcome = "failed" if (topic, partition) in failed else "acked"
        record(
            Committed(
                client=args.member,
                group=args.group,
                member=args.member,
                topic=topic,
                partition=partition,
                offset=offset,
                outcome=outcome,
                started=started,
                done=done,
            )
        )


def share(args: argparse.Namespace) -> int:
    record = _recorder(args.out)
    consumer = ShareConsumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "client.id": args.member,
            "share.acknowledgement.mode": "explicit",
            "fetch.wait.max.ms": 200,
            "max.poll.records": args.max_records,
            **({"debug": args.debug} if args.debug else {}),
        }
    )
    _wait_for(args.barrier, args.out)
    consumer.subscribe([args.topic])
    # librdkafka asks for share records from poll(); a record it returns was acquired no
    # earlier than the start of the previous poll (a fetch still in flight when that poll
    # returned is delivered by this one).
    previous_poll = time.monotonic()
    try:
        while not _stopping:
            poll_start = time.monotonic()
            messages = [m for m in consumer.poll(0.3) if m.error() is None]
            received = time.monotonic()
            for m in messages:
                record(
                    Read(
                        client=args.member,
                        group=args.group,
                        member=args.member,
                        topic=m.topic() or "",
                        partition=m.partition() or 0,
                        offset=m.offset() or 0,
                        value=_value(m),
                        requested_after=previous_poll,
                        received=received,
                        delivery_count=m.delivery_count(),
                    )
                )
            previous_poll = poll_start
            if messages and args.hold:
                while not _stopping:  # hold them, unacknowledged, until killed
                    time.sleep(0.1)
                return 0
            if messages and args.close_with_acks:
                _accept_on_close(consumer, args, messages, record)
                return 0
            if messages:
                _accept(consumer, args, messages, record)
    finally:
        if not args.close_with_acks:
            record(Left(client=args.member, group=args.group, member=args.member, at=time.monotonic()))
            consumer.close()
    return 0


def _accept_on_close(
    consumer: ShareConsumer, args: argparse.Namespace, messages: list[Message], record: _Recorder
) -> None:
    """Accept, and leave: close() sends the pending acknowledgements and returns once the
    broker confirmed them (librdkafka's contract), or raises."""
    for m in messages:
        consumer.acknowledge(m, AcknowledgeType.ACCEPT)
    started = time.monotonic()
    record(Left(client=args.member, group=args.group, member=args.member, at=started))
    outcome: CommitOutcome = "acked"
    try:
        consumer.close()
    except KafkaException:
        outcome = "failed"
    done = time.monotonic()
    for m in messages:
        record(
            Acknowledged(
                client=args.member,
                group=args.group,
                member=args.member,
                topic=m.topic() or "",
                partition=m.partition() or 0,
                offset=m.offset() or 0,
                ack="accept",
                outcome=outcome,
                started=started,
                done=done,
            )
        )


def _accept(consumer: ShareConsumer, args: argparse.Namespace, messages: list[Message], record: _Recorder) -> None:
    for m in messages:
        consumer.acknowledge(m, AcknowledgeType.ACCEPT)
    started = time.monotonic()
    try:
        results = consumer.commit_sync(10)
        errors = {(tp.topic, tp.partition): err for tp, err in results.items()}
        answered = set(errors)
    except KafkaException:
        errors, answered = {}, set()
    done = time.monotonic()
    for m in messages:
        key = (m.topic() or "", m.partition() or 0)
        outcome: CommitOutcome = "acked" if key in answered and errors[key] is None else "failed"
        record(
            Acknowledged(
                client=args.member,
                group=args.group,
                member=args.member,
                topic=key[0],
                partition=key[1],
                offset=m.offset() or 0,
                ack="accept",
                outcome=outcome,
                started=started,
                done=done,
            )
        )


def transact(args: argparse.Namespace) -> int:
    """Transactions numbered from 0 of `--records` records each; before each commit the
    transaction is recorded as unknown, after it as committed or aborted."""
    client = args.out.stem  # two producers in turn may share a transactional id
    record = _recorder(args.out)
    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "transactional.id": args.transactional_id,
            "transaction.timeout.ms": args.transaction_timeout_ms,
            "linger.ms": 5,
        }
    )
    producer.init_transactions(30)
    _wait_for(args.barrier, args.out)
    for seq in range(args.transactions):
        if _stopping:
            break
        values = tuple(b"%s-%d-%d" % (client.encode(), seq, i) for i in range(args.records))

        def txn(outcome: TxnOutcome, values: tuple[bytes, ...] = values, seq: int = seq) -> Transaction:
            return Transaction(
                client=client,
                transactional_id=args.transactional_id,
                sequence=seq,
                topic=args.topic,
                values=values,
                outcome=outcome,
                at=time.monotonic(),
            )

        record(txn("unknown"))
        producer.begin_transaction()
        for i, value in enumerate(values):
            producer.produce(args.topic, value=value, partition=i % args.partitions)
            producer.poll(0)
            if seq == args.stall_at and i == len(values) // 2:
                # Half of it in the log, the rest never sent: wait to be killed.
                producer.flush(30)
                args.out.with_suffix(".stalled").touch()
                while not _stopping:
                    time.sleep(0.1)
                return 0
        record(txn(_finish(producer)))
    producer.flush(10)
    return 0


def _finish(producer: Producer) -> TxnOutcome:
    """Commit; a commit that times out is retried (it may have been done), one the
    transaction must abort for is aborted; a fatal error leaves the outcome unknown."""
    for _ in range(5):
        try:
            producer.commit_transaction(15)
        except KafkaException as e:
            error: KafkaError = e.args[0]
            if error.retriable():
                continue
            if error.txn_requires_abort():
                producer.abort_transaction(30)
                return "aborted"
            raise
        return "committed"
    return "unknown"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fault_clients")
    roles = parser.add_subparsers(dest="role", required=True)
    for name in ("consume", "share", "transact"):
        p = roles.add_parser(name)
        p.add_argument("--bootstrap", required=True)
        p.add_argument("--topic", required=True)
        p.add_argument("--out", type=Path, required=True)
        p.add_argument("--barrier", type=Path, help="a Barrier's file: wait until the test releases it")
        if name in ("consume", "share"):
            p.add_argument("--group", required=True)
            p.add_argument("--member", required=True)
            p.add_argument("--debug", help="librdkafka's debug contexts, logged to the client's .log")
    roles.choices["consume"].add_argument("--protocol", choices=("classic", "consumer"), default="classic")
    roles.choices["share"].add_argument("--hold", action="store_true")
    roles.choices["share"].add_argument(
        "--close-with-acks", action="store_true", help="accept the first records taken and close at once"
    )
    roles.choices["share"].add_argument("--max-records", type=int, default=50)
    t = roles.choices["transact"]
    t.add_argument("--transactional-id", required=True)
    t.add_argument("--transactions", type=int, default=1000)
    t.add_argument("--records", type=int, default=5)
    t.add_argument("--partitions", type=int, default=1)
    t.add_argument("--transaction-timeout-ms", type=int, default=10_000)
    t.add_argument("--stall-at", type=int, default=-1, help="stop mid-way through this transaction (OUT.stalled)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _on_term)
    roles: dict[str, Callable[[argparse.Namespace], int]] = {"consume": consume, "share": share, "transact": transact}
    return roles[args.role](args)


def spawn(role: str, out: Path, **options: object) -> subprocess.Popen[bytes]:
    """One client process; `options` are its flags (`max_records=10` -> `--max-records 10`,
    `hold=True` -> `--hold`).  Its output goes next to its history."""
    argv = [sys.executable, "-m", "tests.support.fault_clients", role, "--out", str(out)]
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is not False and value is not None:
            argv += [flag, str(value)]
    log = out.with_suffix(".log").open("ab")
    try:
        return subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=log, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    finally:
        log.close()


def confluent_delivery(history: History, client: str) -> Callable[[KafkaError | None, Message], None]:
    """An on_delivery callback recording each record's outcome: acked with its offset, or
    unknown (a timeout or a lost connection: it may still be in the log)."""

    def report(err: KafkaError | None, msg: Message) -> None:
        value = _value(msg)
        if err is None:
            history.add(
                Produced(
                    client=client,
                    topic=msg.topic() or "",
                    value=value,
                    outcome="acked",
                    partition=msg.partition(),
                    offset=msg.offset(),
                    at=time.monotonic(),
                )
            )
        else:
            history.add(
                Produced(client=client, topic=msg.topic() or "", value=value, outcome="unknown", at=time.monotonic())
            )

    return report


class KeyedProducer:
    """The fault tests' producer: confluent-kafka, idempotent, acks=all, retrying fast after a
    restart; records `prefix` + a counter on 64 keys, each outcome in `history` (client
    "producer")."""

    def __init__(self, bootstrap: str, topic: str, history: History, prefix: bytes, **extra: object) -> None:
        self.topic = topic
        self.prefix = prefix
        self.sent = 0
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 2,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 200,
                **extra,
            }
        )
        self._report = confluent_delivery(history, "producer")

    def send(self, count: int) -> None:
        """`count` more records handed to the client (some still in flight when a fault strikes)."""
        for _ in range(count):
            value = self.prefix + b"%06d" % self.sent
            self.producer.produce(self.topic, key=b"%d" % (self.sent % 64), value=value, on_delivery=self._report)
            self.sent += 1
            self.producer.poll(0)

    def stream(self, seconds: float) -> None:
        """Records for `seconds`, 20 at a time, delivery reports read between."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.send(20)
            self.producer.poll(0.02)

    def flush(self, timeout: float) -> int:
        """`Producer.flush`: the records still undelivered after `timeout` seconds."""
        return int(self.producer.flush(timeout))


class Fleet:
    """The client processes of one test, each with its history file; `close` stops them all,
    also when the test failed (SIGTERM, then SIGKILL after a grace)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.jsonl"

    def start(self, role: str, name: str, **options: object) -> subprocess.Popen[bytes]:
        proc = spawn(role, self.path(name), **options)
        self.procs[name] = proc
        return proc

    def kill(self, name: str, history: History) -> None:
        """SIGKILL one client, on record (a killed member's ownerships end there)."""
        history.add(Fault(what="SIGKILL", target=name, at=time.monotonic()))
        self.procs[name].kill()
        self.procs[name].wait(10)

    def pause(self, name: str, history: History) -> None:
        """SIGSTOP one client: alive, its connections open, but silent."""
        history.add(Fault(what="SIGSTOP", target=name, at=time.monotonic()))
        self.procs[name].send_signal(signal.SIGSTOP)

    def resume(self, name: str, history: History) -> None:
        history.add(Fault(what="SIGCONT", target=name, at=time.monotonic()))
        self.procs[name].send_signal(signal.SIGCONT)

    def history(self, name: str) -> list[Event]:
        h = History()
        h.load(self.path(name))
        return h.events

    def count(self, name: str, kind: type[Event]) -> int:
        """How many events of `kind` client `name` has recorded so far."""
        return sum(1 for e in self.history(name) if isinstance(e, kind))

    def wait_for_group(self, produced: History, group: str, members: Sequence[str]) -> None:
        """Wait until `members` of `group` have read every record `produced` holds as stored."""

        def read_all() -> bool:
            h = History(list(produced.events))
            for name in members:
                h.extend(self.history(name))
            return lost_to_group(h, group) == []

        wait_until(read_all, "the group to read every stored record")

    def load_into(self, history: History) -> None:
        for name in self.procs:
            history.extend(self.history(name))

    def stop(self, name: str, grace: float = 30) -> int:
        proc = self.procs[name]
        if proc.poll() is None:
            proc.terminate()
            try:
                return proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
        return proc.wait(10)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
                proc.send_signal(signal.SIGCONT)  # a paused one too
        for name in self.procs:
            self.stop(name, grace=15)


class Barrier:
    """Clients started with `barrier=barrier.path` block until `release`: held exclusively
    here, each waits for a shared lock of the file, so all wake together."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = path.open("wb")
        fcntl.flock(self._file, fcntl.LOCK_EX)

    def release_when_ready(self, fleet: Fleet, names: list[str], timeout: float = 120) -> float:
        """Release once every client in `names` said it is ready; the instant of the release."""
        wait_until(lambda: all(fleet.path(n).with_suffix(".ready").exists() for n in names), "clients ready", timeout)
        released = time.monotonic()
        self.close()
        return released

    def close(self) -> None:
        if not self._file.closed:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Poll `condition` until it holds; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def producer_sessions(bootstrap: str, topic: str, partitions: int) -> dict[Position, Session]:
    """The producer id and epoch each data record of `topic` was written under, read over the
    wire: the consumer APIs do not show a batch's producer."""
    out: dict[Position, Session] = {}
    with connect(bootstrap) as conn:
        for partition in range(partitions):
            for header, records in conn.read_batches(topic, partition):
                if header.is_control:
                    continue
                for r in records:
                    out[(topic, partition, r.offset)] = (header.producer_id, header.producer_epoch)
    return out


def read_back(history: History, bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed") -> int:
    """Read every partition of `topic` from the start to its end into `history` as `Stored`
    events; the number read."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "fault-read-back",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        at_end: set[int] = {p for p, end in ends.items() if end == 0}
        count = 0
        deadline = time.monotonic() + 60
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"read back of {topic} stuck: at the end of {sorted(at_end)}"
            for m in consumer.consume(500, 0.5):
                error = m.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, error
                    if (m.offset() or 0) >= ends[m.partition() or 0]:
                        at_end.add(m.partition() or 0)
                    continue
                history.add(Stored(topic=topic, partition=m.partition() or 0, offset=m.offset() or 0, value=_value(m)))
                count += 1
        return count
    finally:
        consumer.close()


if __name__ == "__main__":
    sys.exit(main())
