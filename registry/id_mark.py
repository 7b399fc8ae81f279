"""The id high-water mark: the highest schema id the registry ever handed out, kept outside the
`_schemas` topic, in a compacted topic of its own (`<topic>_ids`).

Ids are `max id in _schemas + 1`, as Confluent's and Karapace's are; neither keeps anything
else, so a `_schemas` topic deleted (and created again) hands out id 1 again while records
written with the old ids are still in other topics, and they then decode against the wrong
schemas. The mark is written by the primary in the same transaction as the schema record that
takes a new id (both or neither are visible), with the position the `_schemas` log had then: a
live log only grows, compaction included, so a `_schemas` topic that ends at or before that
position has lost its history, and the registry refuses to start on it (`check`).  The mark
also keeps ids from going back when compaction removes the record of a permanently deleted
schema that had the highest id.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from confluent_kafka import KafkaError, TopicPartition
from confluent_kafka.aio import AIOConsumer

from contracts import bounded_json
from registry.log_records import Record, encode

KEY = encode({"keytype": "ID_HIGH_WATER_MARK", "magic": 0})


@dataclass(frozen=True, slots=True)
class Mark:
    schema_id: int = 0  # the highest id handed out
    position: int = 0  # the `_schemas` log's end offset when it was handed out

    def record(self) -> Record:
        return KEY, encode({"id": self.schema_id, "position": self.position})


def ids_topic(topic: str) -> str:
    return f"{topic}_ids"


def parse(value: bytes | None) -> Mark | None:
    """The mark of a record; None for anything else (a tombstone, a foreign record)."""
    if value is None:
        return None
    try:
        data = bounded_json.loads(value)
    except Exception:
        return None
    if not isinstance(data, dict):
        return None
    schema_id, position = data.get("id"), data.get("position")
    if not isinstance(schema_id, int) or not isinstance(position, int) or schema_id < 0 or position < 0:
        return None
    return Mark(schema_id, position)


async def read(consumer: AIOConsumer, topic: str, within: float) -> Mark:
    """The highest mark in `topic` (read to its end, committed records only)."""
    deadline = time.monotonic() + within
    await consumer.assign([TopicPartition(topic, 0, 0)])
    best = Mark()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"timed out reading the id high-water mark from {topic}")
        message = await asyncio.wait_for(consumer.poll(min(0.5, remaining)), remaining + 1)
        if message is None:
            continue
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                return best
            raise RuntimeError(f"reading {topic}: {error}")
        if message.key() == KEY:
            mark = parse(message.value())
            if mark is not None and mark.schema_id >= best.schema_id:
                best = mark
        # anything else in the topic is not the registry's: left alone


def check(mark: Mark, schemas_topic: str, schemas_end: int) -> str | None:
    """Why the registry must not serve on this `_schemas` log, or None."""
    if mark.schema_id == 0 or schemas_end > mark.position:
        return None
    return (
        f"the schemas topic {schemas_topic} lost its history: it ends at offset {schemas_end}, but schema ids "
        f"up to {mark.schema_id} were handed out when it had {mark.position} records ({ids_topic(schemas_topic)}), "
        "and records written with them would decode against other schemas; restore the topic from a backup, "
        f"or, to start afresh knowing that old records then no longer decode, delete {ids_topic(schemas_topic)} too"
    )
