"""`streamshop produce` and `streamshop consume`: the console producer and consumer.

produce: one record per stdin line, optionally `key<sep>value`, sent as it is, checked as JSON,
or JSON encoded as Confluent-framed Avro with a subject's schema; a summary on stderr; exit
status 1 if a line was rejected or a delivery failed.
consume: values on stdout (optionally `partition:offset`, headers, key and schema id before it,
tab-separated), Avro decoded to JSON through the registry; without --group the partitions are
assigned, nothing is committed.  A record that cannot be shown in the format asked for is
reported on stderr and makes the exit status 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import IO, Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from streamshop.clients import CLIENT_ID, CommandError, StopSignal, client_config, error_text, parse_pairs, warn
from streamshop.formats import FormatError, RecordEncoder, Renderer, headers_text

MAX_ERRORS_SHOWN = 5
_FATAL_CONSUME_ERRORS = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED}


class _Deliveries:
    def __init__(self) -> None:
        self.ok = 0
        self.failed = 0

    def __call__(self, error: KafkaError | None, _message: Any) -> None:
        if error is None:
            self.ok += 1
            return
        self.failed += 1
        if self.failed <= MAX_ERRORS_SHOWN:
            warn("produce", f"delivery failed: {error_text(error)}")


def _records(stream: IO[bytes], separator: bytes | None) -> Any:
    """(line number, key, value) per line; key None when unkeyed, value None for a bad line."""
    for number, raw in enumerate(stream, 1):
        line = raw.rstrip(b"\n").removesuffix(b"\r")
        if separator is None:
            yield number, None, line
            continue
        key, sep, value = line.partition(separator)
        yield number, (key if sep else None), (value if sep else None)


def produce(args: argparse.Namespace) -> int:
    headers: list[tuple[str, str | bytes | None]] = [
        (k, v.encode()) for k, v in parse_pairs(args.header, "--header").items()
    ]
    separator = args.key_separator.encode() if args.key_separator else None
    try:
        encoder = RecordEncoder(args.value_format, args.registry, args.topic, args.subject, args.schema_id)
    except FormatError as e:
        raise CommandError(str(e)) from None
    producer = Producer(
        client_config(
            args.bootstrap,
            args.client_config,
            {"acks": args.acks, "linger.ms": 5, "message.timeout.ms": int(args.timeout * 1000)},
        )
    )
    deliveries = _Deliveries()
    skipped = 0
    started = time.monotonic()
    partition = {} if args.partition is None else {"partition": args.partition}
    try:
        for number, key, text in _records(sys.stdin.buffer, separator):
            if text is None:
                skipped += 1
                warn("produce", f"line {number}: no key separator {args.key_separator!r}; line skipped")
                continue
            try:
                value = encoder.encode(text)
            except FormatError as e:
                skipped += 1
                warn("produce", f"line {number}: {e}; line skipped")
                continue
            while True:
                try:
                    producer.produce(
                        args.topic, value, key, headers=headers or None, on_delivery=deliveries, **partition
                    )
                    break
                except BufferError:
                    producer.poll(0.1)  # the local queue is full: wait for deliveries
                except KafkaException as e:
                    raise CommandError(error_text(e)) from None
            producer.poll(0)
    except KeyboardInterrupt:
        warn("produce", "interrupted; flushing what was read")
    finally:
        unsent = producer.flush(args.timeout)
    failed = deliveries.failed + unsent
    elapsed = time.monotonic() - started
    summary = f"{deliveries.ok} records sent to {args.topic} in {elapsed:.2f} s"
    if failed or skipped:
        summary += f"; {failed} failed, {skipped} lines skipped"
    warn("produce", summary)
    return 1 if failed or skipped else 0


def _start_offset(args: argparse.Namespace) -> int:
    if args.offset is not None:
        return int(args.offset)
    return OFFSET_BEGINNING if args.from_beginning else OFFSET_END


def _assign(consumer: Consumer, args: argparse.Namespace) -> None:
    try:
        metadata = consumer.list_topics(args.topic, timeout=args.request_timeout)
    except KafkaException as e:
        raise CommandError(error_text(e)) from None
    topic = metadata.topics.get(args.topic)
    if topic is None or topic.error is not None:
        raise CommandError(f"{args.topic}: {error_text(topic.error) if topic else 'no metadata'}")
    partitions = sorted(topic.partitions)
    if args.partition is not None:
        if args.partition not in topic.partitions:
            raise CommandError(f"{args.topic} has no partition {args.partition} (it has {len(partitions)})")
        partitions = [args.partition]
    start = _start_offset(args)
    consumer.assign([TopicPartition(args.topic, p, start) for p in partitions])


class _Printer:
    """One output line per record: [partition:offset] [headers] [key] [schema id] value."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.keys = Renderer(args.key_format, args.registry, lambda text: warn("consume", text))
        self.values = Renderer(args.value_format, args.registry, lambda text: warn("consume", text))
        self.failed = 0

    def line(self, message: Any) -> bytes | None:
        args = self.args
        parts: list[bytes] = []
        if args.print_offset:
            parts.append(f"{message.partition()}:{message.offset()}".encode())
        if args.print_headers:
            parts.append(headers_text(message.headers()))
        try:
            if args.print_key:
                parts.append(self.keys.render(message.key()))
            value = self.values.render(message.value())
        except FormatError as e:
            self.failed += 1
            warn("consume", f"{message.topic()} {message.partition()}:{message.offset()}: {e}; record skipped")
            return None
        if args.print_schema_id:
            schema_id = self.values.schema_id
            parts.append(b"-" if schema_id is None else str(schema_id).encode())
        parts.append(value)
        return b"\t".join(parts) + b"\n"


def consume(args: argparse.Namespace) -> int:
    if args.group and (args.partition is not None or args.offset is not None):
        raise CommandError("--partition and --offset select partitions by hand; they cannot be used with --group")
    if args.offset is not None and args.partition is None:
        raise CommandError("--offset needs --partition")
    settings: dict[str, Any] = {
        "group.id": args.group or CLIENT_ID,
        "enable.auto.commit": bool(args.group),
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
    }
    consumer = Consumer(client_config(args.bootstrap, args.client_config, settings))
    out = sys.stdout.buffer
    printer = _Printer(args)
    count = 0
    status = 0
    try:
        if args.group:
            consumer.subscribe([args.topic])
        else:
            _assign(consumer, args)
        idle_since = time.monotonic()
        with StopSignal() as stop:
            while not stop and (args.max_messages is None or count < args.max_messages):
                if args.timeout is not None and time.monotonic() - idle_since >= args.timeout:
                    break
                wanted = 500 if args.max_messages is None else min(500, args.max_messages - count)
                messages = consumer.consume(wanted, 0.2)
                for message in messages:
                    error = message.error()
                    if error is not None:
                        warn("consume", error_text(error))
                        if error.code() in _FATAL_CONSUME_ERRORS or error.fatal():
                            status = 1
                            stop.event.set()
                        continue
                    line = printer.line(message)
                    if line is not None:
                        out.write(line)
                    count += 1
                if messages:
                    out.flush()
                    idle_since = time.monotonic()
    finally:
        consumer.close()
    summary = f"processed a total of {count} messages"
    if printer.failed:
        summary += f"; {printer.failed} could not be shown as {args.value_format}"
        status = 1
    warn("consume", summary)
    return status
