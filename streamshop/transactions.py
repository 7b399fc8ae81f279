"""`streamshop transactions`: list, describe and find hanging transactions, like Kafka's
`kafka-transactions.sh`, against the bundled broker or Apache Kafka.

librdkafka has no admin API for transactions, so ListTransactions and DescribeTransactions are
sent as kio requests over aiokafka's connections (streamshop/raw_requests.py), as the share
groups are.  describe also shows, per partition of an open transaction, the high watermark, the
last stable offset and the LSO lag between them: the records read_committed consumers cannot
read until the transaction ends.  Those offsets come from the tools' client, confluent-kafka's
ListOffsets at each isolation level; `-X` takes the same librdkafka settings as the other tools.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterable
from typing import Any

from streamshop.clients import CommandError, client_config, error_text, table
from streamshop.transaction_requests import (
    DescribedTransaction,
    describe_transactions,
    error_name,
    list_transactions,
)

# ListTransactions' states of a transaction that has not ended.
_OPEN = ("Ongoing", "PrepareCommit", "PrepareAbort")


class _Listing:
    """One transaction as ListTransactions names it."""

    def __init__(self, transactional_id: str, producer_id: int, state: str) -> None:
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.state = state


def _failed(request: str, code: int, detail: str) -> CommandError:
    return CommandError(f"{request}: {error_name(code)}: [Error {code}] {detail}")


async def _list(admin: Any, states: Iterable[str], producer_ids: Iterable[int]) -> list[_Listing]:
    """ListTransactions on every broker (each coordinates its share of the transactional ids)."""
    from services.dashboard.kafka_requests import ask
    from streamshop.raw_requests import node_ids

    request = list_transactions(states, producer_ids)
    found: list[_Listing] = []
    for node_id in node_ids(admin):
        answer = await ask(admin._send_request, request, node_id)
        if answer.error_code:
            raise _failed("ListTransactions", int(answer.error_code), f"on broker {node_id}")
        found.extend(
            _Listing(str(t.transactional_id), int(t.producer_id), t.transaction_state)
            for t in answer.transaction_states
        )
    return found


async def _describe(admin: Any, transactional_ids: Iterable[str]) -> dict[str, DescribedTransaction]:
    """DescribeTransactions of each id at its transaction coordinator (FindCoordinator with key
    type 1); an id the coordinator answers with an error fails the command."""
    from services.dashboard.kafka_requests import ask

    by_coordinator: dict[int, list[str]] = {}
    for transactional_id in dict.fromkeys(transactional_ids):
        by_coordinator.setdefault(await admin.find_coordinator(transactional_id, 1), []).append(transactional_id)
    described: dict[str, DescribedTransaction] = {}
    for node_id, ids in by_coordinator.items():
        answer = await ask(admin._send_request, describe_transactions(ids), node_id)
        for t in answer.transaction_states:
            if t.error_code:
                raise _failed(
                    "DescribeTransactions",
                    int(t.error_code),
                    f"DescribeTransactionsRequest failed for transactional id '{t.transactional_id}'.",
                )
            described[str(t.transactional_id)] = t
    return described


def _partitions(d: DescribedTransaction) -> list[tuple[str, int]]:
    return [(str(topic.topic), int(p)) for topic in d.topics for p in topic.partitions]


def list_(args: argparse.Namespace) -> int:
    from streamshop.raw_requests import run

    async def work(admin: Any) -> list[_Listing]:
        return await _list(admin, args.state, args.producer_id)

    listings = run(args, "ListTransactions", work)
    rows = [
        {"transactional_id": t.transactional_id, "producer_id": t.producer_id, "state": t.state}
        for t in sorted(listings, key=lambda t: t.transactional_id)
    ]
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
    """(high watermark, last stable offset) per partition: ListOffsets' latest offset read
    uncommitted, then read committed."""
    from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    if not partitions:
        return {}
    try:
        admin = AdminClient(client_config(args.bootstrap, args.client_config))
    except KafkaException as e:
        raise CommandError(f"cannot connect: {error_text(e)}") from None
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]  # confluent-kafka ships no types here
    ends: dict[IsolationLevel, dict[tuple[str, int], int]] = {}
    for isolation in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
        futures = admin.list_offsets(
            {TopicPartition(t, p): latest for t, p in partitions},
            isolation_level=isolation,
            request_timeout=args.timeout,
        )
        try:
            ends[isolation] = {
                (tp.topic, tp.partition): int(f.result(args.timeout).offset) for tp, f in futures.items()
            }
        except KafkaException as e:
            raise CommandError(f"ListOffsets: {error_text(e)}") from None
        except TimeoutError:
            raise CommandError(f"ListOffsets: no answer within {args.timeout:g} s") from None
    return {
        key: (ends[IsolationLevel.READ_UNCOMMITTED][key], ends[IsolationLevel.READ_COMMITTED][key])
        for key in partitions
    }


def describe(args: argparse.Namespace) -> int:
    from streamshop.raw_requests import run

    async def work(admin: Any) -> dict[str, DescribedTransaction]:
        return await _describe(admin, args.transactional_ids)

    described = run(args, "DescribeTransactions", work)
    now = int(time.time() * 1000)
    out = []
    for transactional_id in args.transactional_ids:
        d = described[transactional_id]
        partitions = sorted({(t, p) for t, p in _partitions(d) if not t.startswith("__")})
        offsets = _stable_offsets(args, partitions)
        out.append(
            {
                "transactional_id": transactional_id,
                "state": d.transaction_state,
                "producer_id": int(d.producer_id),
                "producer_epoch": int(d.producer_epoch),
                "timeout_ms": int(d.transaction_timeout_ms),
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
                "groups_partitions": sorted({f"{t}-{p}" for t, p in _partitions(d) if t.startswith("__")}),
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
    from streamshop.raw_requests import run

    async def work(admin: Any) -> dict[str, DescribedTransaction]:
        ids = [t.transactional_id for t in await _list(admin, _OPEN, ())]
        return await _describe(admin, ids) if ids else {}

    described = run(args, "transactions", work)
    now = int(time.time() * 1000)
    hanging = sorted(
        (tid, int(d.producer_id), d.transaction_state, now - d.transaction_start_time_ms)
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
