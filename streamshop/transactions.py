"""`streamshop transactions`: list, describe and find hanging transactions, like Kafka's
`kafka-transactions.sh`, against the bundled broker or Apache Kafka.

librdkafka has no admin API for transactions, so this tool speaks through kafka-python's
admin client (ListTransactions, DescribeTransactions); `-X` takes the same librdkafka
settings as the other tools and they are translated.  describe also shows, per partition of
an open transaction, the high watermark, the last stable offset and the LSO lag between them:
the records read_committed consumers cannot read until the transaction ends.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from streamshop.clients import CommandError, parse_pairs, table

# librdkafka setting -> kafka-python keyword (and a converter).
_SETTINGS: dict[str, tuple[str, Any]] = {
    "security.protocol": ("security_protocol", str.upper),
    "sasl.mechanism": ("sasl_mechanism", str),
    "sasl.mechanisms": ("sasl_mechanism", str),
    "sasl.username": ("sasl_plain_username", str),
    "sasl.password": ("sasl_plain_password", str),
    "ssl.ca.location": ("ssl_cafile", str),
    "ssl.certificate.location": ("ssl_certfile", str),
    "ssl.key.location": ("ssl_keyfile", str),
    "ssl.endpoint.identification.algorithm": ("ssl_check_hostname", lambda v: v.lower() == "https"),
    "client.id": ("client_id", str),
}


def kafka_python_config(bootstrap: str, extra: list[str]) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap_servers": bootstrap, "client_id": "streamshop-transactions"}
    for key, value in parse_pairs(extra, "-X").items():
        if key not in _SETTINGS:
            raise CommandError(f"-X {key} is not a setting this command can pass on ({', '.join(sorted(_SETTINGS))})")
        name, convert = _SETTINGS[key]
        config[name] = convert(value)
    return config


def _admin(args: argparse.Namespace) -> Any:
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        return KafkaAdminClient(
            request_timeout_ms=int(args.timeout * 1000), **kafka_python_config(args.bootstrap, args.client_config)
        )
    except KafkaError as e:
        raise CommandError(f"cannot connect: {e}") from None


def _call(what: str, fn: Any, *a: Any, **kw: Any) -> Any:
    from kafka.errors import KafkaError

    try:
        return fn(*a, **kw)
    except KafkaError as e:
        raise CommandError(f"{what}: {type(e).__name__}: {e}") from None


def list_(args: argparse.Namespace) -> int:
    admin = _admin(args)
    try:
        by_broker = _call(
            "ListTransactions",
            admin.list_transactions,
            state_filters=args.state or None,
            producer_id_filters=args.producer_id or None,
        )
        listings = [t for per_broker in by_broker.values() for t in per_broker]
    finally:
        admin.close()
    rows = sorted(
        (
            {"transactional_id": t.transactional_id, "producer_id": t.producer_id, "state": t.state.value}
            for t in listings
        ),
        key=lambda r: r["transactional_id"],
    )
    if args.json:
        print(json.dumps(rows, indent=2))
    elif rows:
        print(
            table(
                ["TRANSACTIONAL-ID", "PRODUCER-ID", "STATE"],
                [(r["transactional_id"], r["producer_id"], r["state"]) for r in rows],
            )
        )
    return 0


def _stable_offsets(
    args: argparse.Namespace, partitions: list[tuple[str, int]]
) -> dict[tuple[str, int], tuple[int, int]]:
    """(high watermark, last stable offset) per partition."""
    from kafka import KafkaConsumer, TopicPartition

    if not partitions:
        return {}
    config = kafka_python_config(args.bootstrap, args.client_config)
    tps = [TopicPartition(t, p) for t, p in partitions]
    ends: dict[str, dict[Any, int]] = {}
    for isolation in ("read_uncommitted", "read_committed"):
        # Without a group it commits nothing: said here, kafka-python does not warn that it turns
        # auto-commit off (a warning on stderr around the command's answer).
        consumer = KafkaConsumer(
            isolation_level=isolation,
            request_timeout_ms=int(args.timeout * 1000) + 1,
            **{"enable_auto_commit": False, **config},
        )
        try:
            ends[isolation] = _call("ListOffsets", consumer.end_offsets, tps)
        finally:
            consumer.close()
    return {(tp.topic, tp.partition): (ends["read_uncommitted"][tp], ends["read_committed"][tp]) for tp in tps}


def describe(args: argparse.Namespace) -> int:
    admin = _admin(args)
    try:
        described = _call("DescribeTransactions", admin.describe_transactions, args.transactional_ids)
    finally:
        admin.close()
    now = int(time.time() * 1000)
    out = []
    for transactional_id in args.transactional_ids:
        d = described[transactional_id]
        partitions = sorted((tp.topic, tp.partition) for tp in d.topic_partitions if not tp.topic.startswith("__"))
        offsets = _stable_offsets(args, partitions)
        out.append(
            {
                "transactional_id": transactional_id,
                "state": d.state.value,
                "producer_id": d.producer_id,
                "producer_epoch": d.producer_epoch,
                "timeout_ms": d.transaction_timeout_ms,
                "start_time_ms": d.transaction_start_time_ms if d.transaction_start_time_ms >= 0 else None,
                "duration_ms": now - d.transaction_start_time_ms if d.transaction_start_time_ms >= 0 else None,
                "partitions": [
                    {
                        "topic": t,
                        "partition": p,
                        "high_watermark": offsets[(t, p)][0],
                        "last_stable_offset": offsets[(t, p)][1],
                        "lso_lag": offsets[(t, p)][0] - offsets[(t, p)][1],
                    }
                    for t, p in partitions
                ],
                "groups_partitions": sorted(
                    f"{tp.topic}-{tp.partition}" for tp in d.topic_partitions if tp.topic.startswith("__")
                ),
            }
        )
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    for i, txn in enumerate(out):
        if i:
            print()
        print(
            table(
                ["TRANSACTIONAL-ID", "STATE", "PRODUCER-ID", "EPOCH", "TIMEOUT-MS", "DURATION-MS"],
                [
                    (
                        txn["transactional_id"],
                        txn["state"],
                        txn["producer_id"],
                        txn["producer_epoch"],
                        txn["timeout_ms"],
                        "-" if txn["duration_ms"] is None else txn["duration_ms"],
                    )
                ],
            )
        )
        if txn["partitions"]:
            print()
            print(
                table(
                    ["TOPIC", "PARTITION", "HIGH-WATERMARK", "LAST-STABLE-OFFSET", "LSO-LAG"],
                    [
                        (p["topic"], p["partition"], p["high_watermark"], p["last_stable_offset"], p["lso_lag"])
                        for p in txn["partitions"]
                    ],
                )
            )
    return 0


def find_hanging(args: argparse.Namespace) -> int:
    """Open transactions older than --max-timeout-ms (Kafka's tool: the broker's
    transaction.max.timeout.ms, by default 15 minutes)."""
    admin = _admin(args)
    try:
        by_broker = _call(
            "ListTransactions", admin.list_transactions, state_filters=["Ongoing", "PrepareCommit", "PrepareAbort"]
        )
        ids = [t.transactional_id for per_broker in by_broker.values() for t in per_broker]
        described = _call("DescribeTransactions", admin.describe_transactions, ids) if ids else {}
    finally:
        admin.close()
    now = int(time.time() * 1000)
    hanging = sorted(
        (tid, d.producer_id, d.state.value, now - d.transaction_start_time_ms)
        for tid, d in described.items()
        if d.transaction_start_time_ms >= 0 and now - d.transaction_start_time_ms > args.max_timeout_ms
    )
    if args.json:
        print(
            json.dumps(
                [{"transactional_id": t, "producer_id": p, "state": s, "duration_ms": ms} for t, p, s, ms in hanging],
                indent=2,
            )
        )
    elif hanging:
        print(table(["TRANSACTIONAL-ID", "PRODUCER-ID", "STATE", "DURATION-MS"], hanging))
    return 1 if hanging else 0
