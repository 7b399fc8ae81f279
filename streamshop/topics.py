"""`streamshop topics`: create, list, describe, delete and alter topics with confluent-kafka's
AdminClient, so the same command works against the bundled broker and Apache Kafka."""

from __future__ import annotations

import argparse
import base64
import json
from concurrent.futures import Future
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from streamshop.clients import CLIENT_ID, CommandError, client_config, error_text, parse_pairs, table, warn


def _admin(args: argparse.Namespace) -> AdminClient:
    return AdminClient(client_config(args.bootstrap, args.client_config))


def _results(futures: dict[Any, Future[Any]], timeout: float) -> tuple[dict[Any, Any], dict[Any, str]]:
    """Split AdminClient futures into results and `NAME: message` errors."""
    done: dict[Any, Any] = {}
    failed: dict[Any, str] = {}
    for key, future in futures.items():
        try:
            done[key] = future.result(timeout)
        except KafkaException as e:
            failed[key] = error_text(e)
        except TimeoutError:
            failed[key] = f"no answer within {timeout:g} s"
    return done, failed


def _report(failed: dict[Any, str], label: Any = str) -> int:
    for key, message in failed.items():
        warn("topics", f"{label(key)}: {message}")
    return 1 if failed else 0


def create(args: argparse.Namespace) -> int:
    topic = NewTopic(
        args.name,
        num_partitions=args.partitions if args.partitions is not None else -1,
        replication_factor=args.replication_factor if args.replication_factor is not None else -1,
        config=parse_pairs(args.config, "--config"),
    )
    admin = _admin(args)
    futures = admin.create_topics([topic], request_timeout=args.timeout)
    if args.if_not_exists:
        futures = {name: _tolerate(f, KafkaError.TOPIC_ALREADY_EXISTS, "exists") for name, f in futures.items()}
    done, failed = _results(futures, args.timeout)
    for name, outcome in done.items():
        print(f"topic {name} already exists" if outcome == "exists" else f"created topic {name}")
    return _report(failed)


def _tolerate(future: Future[Any], code: int, outcome: str) -> Future[Any]:
    """`future`, with the error `code` turned into the result `outcome` (--if-exists and
    --if-not-exists, as kafka-topics.sh)."""
    out: Future[Any] = Future()

    def copy(done: Future[Any]) -> None:
        error = done.exception()
        first = error.args[0] if isinstance(error, KafkaException) and error.args else None
        if error is None:
            out.set_result(done.result())
        elif isinstance(first, KafkaError) and first.code() == code:
            out.set_result(outcome)
        else:
            out.set_exception(error)

    future.add_done_callback(copy)
    return out


def list_(args: argparse.Namespace) -> int:
    admin = _admin(args)
    try:
        metadata = admin.list_topics(timeout=args.timeout)
    except KafkaException as e:
        raise CommandError(error_text(e)) from None
    topics = sorted(metadata.topics.values(), key=lambda t: t.topic or "")
    if args.json:
        print(json.dumps([{"name": t.topic, "partitions": len(t.partitions)} for t in topics], indent=2))
    elif topics:
        print(table(["TOPIC", "PARTITIONS"], [(t.topic, len(t.partitions)) for t in topics]))
    return 0


def _watermarks(args: argparse.Namespace, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
    # A consumer that never subscribes or commits: group.id is only required by the client.
    consumer = Consumer(client_config(args.bootstrap, args.client_config, {"group.id": CLIENT_ID}))
    marks: dict[int, tuple[int, int]] = {}
    try:
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=args.timeout, cached=False)
            marks[p] = (low, high)
        return marks
    finally:
        consumer.close()


def _topic_id(value: Any) -> str | None:
    """Kafka's text form of a topic id (URL-safe base64 without padding, as kafka-topics.sh
    prints it); str() of librdkafka's Uuid uses the standard alphabet instead."""
    if value is None:
        return None
    mask = (1 << 64) - 1
    bits = (value.get_most_significant_bits() & mask) << 64 | (value.get_least_significant_bits() & mask)
    return base64.urlsafe_b64encode(bits.to_bytes(16, "big")).decode().rstrip("=")


def _describe_one(args: argparse.Namespace, description: Any, configs: dict[str, Any]) -> dict[str, Any]:
    partitions = sorted(description.partitions, key=lambda p: p.id)
    marks = _watermarks(args, description.name, [p.id for p in partitions])
    return {
        "name": description.name,
        "id": _topic_id(description.topic_id),
        "internal": description.is_internal,
        "partitions": [
            {
                "partition": p.id,
                "leader": p.leader.id if p.leader is not None else None,
                "replicas": [n.id for n in p.replicas],
                "isr": [n.id for n in p.isr],
                "log_start_offset": marks[p.id][0],
                "log_end_offset": marks[p.id][1],
            }
            for p in partitions
        ],
        "configs": {name: entry.value for name, entry in sorted(configs.items())},
        "overrides": {
            name: entry.value
            for name, entry in sorted(configs.items())
            if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        },
    }


def _print_description(topic: dict[str, Any]) -> None:
    print(f"Topic: {topic['name']}  id: {topic['id']}  partitions: {len(topic['partitions'])}")
    rows = [
        (
            p["partition"],
            p["leader"],
            ",".join(map(str, p["replicas"])),
            ",".join(map(str, p["isr"])),
            p["log_start_offset"],
            p["log_end_offset"],
        )
        for p in topic["partitions"]
    ]
    print(table(["PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START", "LOG-END"], rows))
    overrides = topic["overrides"]
    print("Configs (overrides):" + ("" if overrides else " none"))
    for name, value in overrides.items():
        print(f"  {name}={value}")
    print("Configs (defaults):")
    for name, value in topic["configs"].items():
        if name not in overrides:
            print(f"  {name}={value}")


def describe(args: argparse.Namespace) -> int:
    admin = _admin(args)
    names = list(dict.fromkeys(args.names))
    described, failed = _results(
        admin.describe_topics(TopicCollection(names), request_timeout=args.timeout), args.timeout
    )
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in described]
    configs, config_failed = _results(
        admin.describe_configs(resources, request_timeout=args.timeout) if resources else {}, args.timeout
    )
    for resource, message in config_failed.items():
        failed[resource.name] = message
    out = []
    for resource, entries in configs.items():
        try:
            out.append(_describe_one(args, described[resource.name], entries))
        except KafkaException as e:
            failed[resource.name] = error_text(e)
    out.sort(key=lambda t: names.index(t["name"]))
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for i, topic in enumerate(out):
            if i:
                print()
            _print_description(topic)
    return _report(failed)


def delete(args: argparse.Namespace) -> int:
    admin = _admin(args)
    futures = admin.delete_topics(list(dict.fromkeys(args.names)), request_timeout=args.timeout)
    if args.if_exists:
        futures = {name: _tolerate(f, KafkaError.UNKNOWN_TOPIC_OR_PART, "absent") for name, f in futures.items()}
    done, failed = _results(futures, args.timeout)
    for name, outcome in done.items():
        print(f"topic {name} does not exist" if outcome == "absent" else f"deleted topic {name}")
    return _report(failed)


def alter(args: argparse.Namespace) -> int:
    sets = parse_pairs(args.set, "--set")
    if args.partitions is None and not sets and not args.delete:
        raise CommandError("nothing to alter: give --partitions N, --set KEY=VALUE or --delete KEY")
    admin = _admin(args)
    status = 0
    if args.partitions is not None:
        done, failed = _results(
            admin.create_partitions([NewPartitions(args.name, args.partitions)], request_timeout=args.timeout),
            args.timeout,
        )
        for name in done:
            print(f"topic {name} now has {args.partitions} partitions")
        status |= _report(failed)
    if sets or args.delete:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in sets.items()]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in args.delete]
        resource = ConfigResource(ResourceType.TOPIC, args.name, incremental_configs=entries)
        done, failed = _results(admin.incremental_alter_configs([resource], request_timeout=args.timeout), args.timeout)
        if done:
            changes = [f"{k}={v}" for k, v in sets.items()] + [f"-{k}" for k in args.delete]
            print(f"altered configs of topic {args.name}: {' '.join(changes)}")
        status |= _report(failed, label=lambda r: r.name)
    return status
