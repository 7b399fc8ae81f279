"""`streamshop groups reset-offsets`, as `kafka-consumer-groups.sh --reset-offsets`: it prints the
plan and changes nothing unless `--execute` is given; groups by name or `--all-groups`, topics by
`--topic NAME[:P,P...]` or `--all-topics` (those the group has committed offsets for); one target
(`--to-earliest`, `--to-latest`, `--to-current`, `--to-offset`, `--shift-by`, `--to-datetime`,
`--by-duration`, `--to-timestamp`); `--export` prints the plan as CSV.  A group with active
members is refused: their own commits would overwrite the reset."""

from __future__ import annotations

import argparse
import csv
import re
import sys
import time
from datetime import timedelta
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from streamshop.clients import CommandError, error_text, table, warn
from streamshop.groups import (
    _SPEC,
    Partition,
    _admin,
    _cell,
    _committed,
    _ensure_inactive,
    _list_offsets,
    _partitions,
    _wait,
    parse_datetime,
)

_DURATION = re.compile(
    r"^P(?:(?P<days>\d+)D)?(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)


def parse_duration(text: str) -> timedelta:
    """An ISO 8601 duration as Java's `Duration.parse` reads it: PnDTnHnMn.nS (e.g. PT15M, P1DT2H)."""
    match = _DURATION.match(text.strip().upper())
    if match is None or text.strip().upper() in ("P", "PT") or text.strip().upper().endswith("T"):
        raise CommandError(f"--by-duration {text!r}: expected an ISO 8601 duration such as PT15M or P1DT2H")
    parts = {k: float(v) for k, v in match.groupdict().items() if v is not None}
    return timedelta(**parts)


def _topic_specs(values: list[str]) -> list[tuple[str, list[int] | None]]:
    """`--topic NAME` or `--topic NAME:0,2` (partitions), as Kafka's tool takes them."""
    specs: list[tuple[str, list[int] | None]] = []
    for value in values:
        name, sep, partitions = value.partition(":")
        if not sep:
            specs.append((value, None))
            continue
        try:
            specs.append((name, [int(p) for p in partitions.split(",") if p.strip()]))
        except ValueError:
            raise CommandError(f"--topic {value!r}: expected NAME or NAME:PARTITION[,PARTITION...]") from None
    return specs


def _groups(admin: AdminClient, args: argparse.Namespace) -> list[str]:
    named = list(dict.fromkeys([*args.groups, *args.group]))
    if args.all_groups:
        if named:
            raise CommandError("name groups or give --all-groups, not both")
        listing = _wait(admin.list_consumer_groups(request_timeout=args.timeout), args.timeout)
        return sorted(g.group_id for g in listing.valid or ())
    if not named:
        raise CommandError("name the group(s) to reset (GROUP or --group), or give --all-groups")
    return named


def _keys(admin: AdminClient, args: argparse.Namespace, current: dict[Partition, int]) -> list[Partition]:
    if args.all_topics:
        if args.topic:
            raise CommandError("give --topic or --all-topics, not both")
        return sorted(current)
    if not args.topic:
        raise CommandError("name the topic(s) to reset (--topic), or give --all-topics")
    keys: list[Partition] = []
    for name, partitions in _topic_specs(args.topic):
        wanted = partitions if partitions is not None else args.partition
        keys += [(name, p) for p in _partitions(admin, name, wanted, args.timeout)]
    return sorted(dict.fromkeys(keys))


def _targets(
    admin: AdminClient, args: argparse.Namespace, keys: list[Partition], current: dict[Partition, int]
) -> dict[Partition, int]:
    if not keys:
        return {}
    earliest = _list_offsets(admin, dict.fromkeys(keys, _SPEC.earliest()), args.timeout)
    latest = _list_offsets(admin, dict.fromkeys(keys, _SPEC.latest()), args.timeout)

    def clamp(offset: int, key: Partition) -> int:
        # As Kafka's tool: an offset outside the log is moved to its nearest end.
        return min(max(offset, earliest[key]), latest[key])

    if args.to_earliest:
        return earliest
    if args.to_latest:
        return latest
    if args.to_current:
        # A partition without a committed offset gets the log end, as in Kafka's tool.
        return {k: current.get(k, latest[k]) for k in keys}
    if args.to_offset is not None:
        return {k: clamp(args.to_offset, k) for k in keys}
    if args.shift_by is not None:
        missing = [k for k in keys if k not in current]
        if missing:
            t, p = missing[0]
            raise CommandError(f"cannot shift {t}[{p}]: the group has no committed offset there")
        return {k: clamp(current[k] + args.shift_by, k) for k in keys}
    if args.to_datetime is not None:
        millis = parse_datetime(args.to_datetime)
    elif args.by_duration is not None:
        millis = int((time.time() - parse_duration(args.by_duration).total_seconds()) * 1000)
    else:
        millis = args.to_timestamp
    found = _list_offsets(admin, dict.fromkeys(keys, _SPEC.for_timestamp(millis)), args.timeout)
    # No record at or after the time: the end of the log.
    return {k: found[k] if found[k] >= 0 else latest[k] for k in keys}


def _export(plans: dict[str, list[tuple[Partition, int | None, int]]]) -> None:
    writer = csv.writer(sys.stdout, lineterminator="\n")
    several = len(plans) > 1
    for group, rows in plans.items():
        for (topic, partition), _previous, new in rows:
            writer.writerow([group, topic, partition, new] if several else [topic, partition, new])


def reset_offsets(args: argparse.Namespace) -> int:
    if args.to_offset is not None and args.to_offset < 0:
        raise CommandError("--to-offset must be 0 or more")
    if args.to_datetime is not None:
        parse_datetime(args.to_datetime)  # a typo fails before anything is asked of the broker
    if args.by_duration is not None:
        parse_duration(args.by_duration)
    admin = _admin(args)
    plans: dict[str, list[tuple[Partition, int | None, int]]] = {}
    for group_id in _groups(admin, args):
        _ensure_inactive(admin, group_id, args.timeout)
        current, _ = _committed(admin, group_id, args.timeout)
        keys = _keys(admin, args, current)
        targets = _targets(admin, args, keys, current)
        plans[group_id] = [(k, current.get(k), targets[k]) for k in keys]
    if args.export:
        _export(plans)
    else:
        rows: list[tuple[Any, ...]] = [
            (group, t, p, _cell(previous), new) for group, plan in plans.items() for (t, p), previous, new in plan
        ]
        print(table(["GROUP", "TOPIC", "PARTITION", "PREVIOUS-OFFSET", "NEW-OFFSET"], rows))
    if not args.execute:
        warn("groups", "dry run: no offsets changed (add --execute to commit the offsets above)")
        return 0
    status = 0
    for group_id, plan in plans.items():
        if not plan:
            continue
        request = ConsumerGroupTopicPartitions(group_id, [TopicPartition(t, p, new) for (t, p), _, new in plan])
        futures = admin.alter_consumer_group_offsets([request], request_timeout=args.timeout)
        result = _wait(futures[group_id], args.timeout)
        failed = [tp for tp in result.topic_partitions or () if tp.error is not None]
        for tp in failed:
            warn("groups", f"{group_id}: {tp.topic}[{tp.partition}]: {error_text(tp.error)}")
        if failed:
            status = 1
        else:
            warn("groups", f"reset {len(plan)} partition(s) for group {group_id}")
    return status
