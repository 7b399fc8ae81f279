"""`streamshop groups`: list, describe, delete consumer groups and reset their offsets with
confluent-kafka's AdminClient, so the same command works against the bundled broker and
Apache Kafka (like `kafka-consumer-groups.sh`).

describe shows, per partition, the committed offset, the log end offset and the lag
(log end - committed; unknown while nothing is committed), and the members with their
assignments.  Share groups (KIP-932), which librdkafka's admin client does not see, are listed
and described by `share_groups.py`: per partition their start offset, lag and records in
flight.  reset-offsets lives in `reset_offsets.py`.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterable
from concurrent.futures import Future
from datetime import datetime
from typing import Any

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from contracts import commit_note
from streamshop.clients import CommandError, client_config, error_text, table, warn
from streamshop.share_groups import describe_share, list_share, print_share_group

# Kafka's names of the group states (DescribeGroups, kafka-consumer-groups.sh).
_STATE_NAMES = {
    ConsumerGroupState.UNKNOWN: "Unknown",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.EMPTY: "Empty",
}
_INACTIVE = {"Empty", "Dead"}
# OffsetSpec's constructors (earliest, latest, for_timestamp) have no type hints.
_SPEC: Any = OffsetSpec

Partition = tuple[str, int]


def _admin(args: argparse.Namespace) -> AdminClient:
    return AdminClient(client_config(args.bootstrap, args.client_config))


def _state(value: Any) -> str:
    return _STATE_NAMES.get(value, str(getattr(value, "name", value)))


def _type(value: object) -> str | None:
    """The group's protocol, as ListGroups v5 and ConsumerGroupDescribe report it: "classic" or
    "consumer" (KIP-848); None from a broker that does not say."""
    kind = getattr(value, "name", None)
    return kind.lower() if kind in ("CLASSIC", "CONSUMER") else None


def _protocol_type(is_simple: bool) -> str:
    # librdkafka reports only whether the protocol type is empty (a "simple" group whose
    # offsets were committed without joining); every group its consumers join is "consumer".
    return "" if is_simple else "consumer"


def _wait(future: Future[Any], timeout: float) -> Any:
    try:
        return future.result(timeout)
    except KafkaException as e:
        raise CommandError(error_text(e)) from None
    except TimeoutError:
        raise CommandError(f"no answer within {timeout:g} s") from None


def _error_code(e: KafkaException) -> int | None:
    if e.args and isinstance(e.args[0], KafkaError):
        return int(e.args[0].code())
    return None


def _offset(value: int | None) -> int | None:
    """None for librdkafka's "no offset" sentinels (-1001 and other negatives)."""
    return value if value is not None and value >= 0 else None


def _cell(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


# --- list -------------------------------------------------------------------------------


def list_(args: argparse.Namespace) -> int:
    admin = _admin(args)  # referenced until the answer: a collected client cancels its requests
    result = _wait(admin.list_consumer_groups(request_timeout=args.timeout), args.timeout)
    for error in result.errors or ():
        warn("groups", error_text(error))
    groups = sorted(
        (
            {
                "group": listing.group_id,
                "state": _state(getattr(listing, "state", ConsumerGroupState.UNKNOWN)),
                "type": _type(listing.type),
                "protocol_type": _protocol_type(listing.is_simple_consumer_group),
            }
            for listing in result.valid or ()
        ),
        key=lambda g: g["group"],
    )
    listed = {g["group"] for g in groups}
    shares = [g for g in list_share(args) if g["group"] not in listed]
    groups = sorted([*groups, *shares], key=lambda g: g["group"])
    if args.json:
        print(json.dumps(groups, indent=2))
    elif groups:
        print(
            table(
                ["GROUP", "STATE", "TYPE", "PROTOCOL-TYPE"],
                [(g["group"], g["state"], _cell(g["type"]), _cell(g["protocol_type"])) for g in groups],
            )
        )
    return 1 if result.errors else 0


# --- describe ---------------------------------------------------------------------------


def _log_end_offsets(admin: AdminClient, partitions: Iterable[Partition], timeout: float) -> dict[Partition, int]:
    """Log end offsets (the high watermark, as Kafka's tools report); partitions that no
    longer exist are left out."""
    wanted = {TopicPartition(t, p): _SPEC.latest() for t, p in sorted(set(partitions))}
    if not wanted:
        return {}
    out: dict[Partition, int] = {}
    for tp, future in admin.list_offsets(wanted, request_timeout=timeout).items():
        try:
            out[(tp.topic, tp.partition)] = int(future.result(timeout).offset)
        except KafkaException:
            continue
    return out


def _committed(admin: AdminClient, group_id: str, timeout: float) -> tuple[dict[Partition, int], list[str | None]]:
    """The group's committed offsets, and the metadata committed with them."""
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id)], request_timeout=timeout)
    result = _wait(futures[group_id], timeout)
    out: dict[Partition, int] = {}
    metadata: list[str | None] = []
    for tp in result.topic_partitions or ():
        offset = _offset(tp.offset)
        if tp.error is None and offset is not None:
            out[(tp.topic, tp.partition)] = offset
            metadata.append(tp.metadata)
    return out, metadata


def _describe_one(admin: AdminClient, description: Any, timeout: float) -> dict[str, Any]:
    """The describe record of one group; /api/groups/{id} of the broker has the same shape."""
    group_id = description.group_id
    members = []
    owner: dict[Partition, Any] = {}
    for m in description.members:
        assignment: dict[str, list[int]] = {}
        for tp in m.assignment.topic_partitions if m.assignment is not None else ():
            assignment.setdefault(tp.topic, []).append(tp.partition)
            owner[(tp.topic, tp.partition)] = m
        members.append(
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.host,
                "group_instance_id": m.group_instance_id,
                "assignment": {t: sorted(ps) for t, ps in sorted(assignment.items())},
            }
        )
    members.sort(key=lambda m: m["member_id"])
    committed, metadata = _committed(admin, group_id, timeout)
    committer = commit_note.newest(metadata)
    keys = sorted(set(committed) | set(owner))
    ends = _log_end_offsets(admin, keys, timeout)
    partitions = []
    for key in keys:
        offset = committed.get(key)
        end = ends.get(key)
        partitions.append(
            {
                "topic": key[0],
                "partition": key[1],
                "committed_offset": offset,
                "log_end_offset": end,
                "lag": end - offset if end is not None and offset is not None else None,
                "member_id": owner[key].member_id if key in owner else None,
            }
        )
    return {
        "group": group_id,
        "state": _state(description.state),
        "type": _type(description.type),
        "protocol_type": _protocol_type(description.is_simple_consumer_group),
        "protocol": description.partition_assignor or "",
        "member_count": len(members),
        "lag": sum(p["lag"] for p in partitions if p["lag"] is not None),
        "members": members,
        "partitions": partitions,
        # A job that commits without joining (the analytics job), from its commits' metadata.
        "committer": committer.to_json(int(time.time() * 1000)) if committer is not None else None,
    }


def _print_group(group: dict[str, Any]) -> None:
    protocol = "/".join(p for p in (group["protocol_type"], group["protocol"]) if p) or "-"
    print(
        f"Group: {group['group']}  state: {group['state']}  protocol: {protocol}  "
        f"members: {group['member_count']}  lag: {group['lag']}"
    )
    members = {m["member_id"]: m for m in group["members"]}
    if group["partitions"]:
        rows = []
        for p in group["partitions"]:
            member = members.get(p["member_id"], {})
            rows.append(
                (
                    p["topic"],
                    p["partition"],
                    _cell(p["committed_offset"]),
                    _cell(p["log_end_offset"]),
                    _cell(p["lag"]),
                    _cell(p["member_id"]),
                    _cell(member.get("host")),
                    _cell(member.get("client_id")),
                )
            )
        headers = ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
        print(table(headers, rows))
    if not group["members"]:
        print(f"Consumer group '{group['group']}' has no active members.")
        committer = group["committer"]
        if committer is not None:
            state = "alive" if committer["alive"] else "not committing (stopped?)"
            batch = "" if committer["batch_age_s"] is None else f", last batch {committer['batch_age_s']:g} s ago"
            print(
                f"It is committed to by job {committer['job']} (client {committer['client']}): last commit "
                f"{committer['age_s']:g} s ago{batch}, at least every {committer['every_s']:g} s while running: "
                f"{state}."
            )
        return
    print()
    member_rows = [
        (
            m["member_id"],
            _cell(m["group_instance_id"]),
            m["client_id"],
            m["host"],
            sum(len(ps) for ps in m["assignment"].values()),
            " ".join(f"{t}:{','.join(map(str, ps))}" for t, ps in m["assignment"].items()) or "-",
        )
        for m in group["members"]
    ]
    print(table(["MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "#PARTITIONS", "ASSIGNMENT"], member_rows))


def describe(args: argparse.Namespace) -> int:
    admin = _admin(args)
    names = list(dict.fromkeys(args.groups))
    futures = admin.describe_consumer_groups(names, request_timeout=args.timeout)
    found: dict[str, dict[str, Any]] = {}
    # A group librdkafka does not find may be a share group; its error stands if it is not one.
    unknown: dict[str, str] = {}
    failed = 0
    for name in names:
        try:
            description = futures[name].result(args.timeout)
            if _state(description.state) == "Dead":
                # DescribeGroups before v6 answers an unknown group as Dead, without an error.
                unknown[name] = f"group {name!r} does not exist"
                continue
            found[name] = _describe_one(admin, description, args.timeout)
        except KafkaException as e:
            if _error_code(e) == KafkaError.GROUP_ID_NOT_FOUND:
                unknown[name] = error_text(e)
            else:
                warn("groups", f"{name}: {error_text(e)}")
                failed += 1
        except CommandError as e:
            warn("groups", f"{name}: {error_text(e)}")
            failed += 1
        except TimeoutError:
            warn("groups", f"{name}: no answer within {args.timeout:g} s")
            failed += 1
    if unknown:
        try:
            found |= describe_share(args, list(unknown), lambda keys: _log_end_offsets(admin, keys, args.timeout))
        except CommandError as e:
            warn("groups", str(e))
    for name, reason in unknown.items():
        if name not in found:
            warn("groups", f"{name}: {reason}")
            failed += 1
    out = [found[name] for name in names if name in found]
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for i, group in enumerate(out):
            if i:
                print()
            if group["type"] == "share":
                print_share_group(group, _cell)
            else:
                _print_group(group)
    return 1 if failed else 0


# --- delete -----------------------------------------------------------------------------


def delete(args: argparse.Namespace) -> int:
    names = list(dict.fromkeys(args.groups))
    admin = _admin(args)
    futures = admin.delete_consumer_groups(names, request_timeout=args.timeout)
    status = 0
    for name in names:
        try:
            futures[name].result(args.timeout)
            print(f"deleted group {name}")
        except KafkaException as e:
            warn("groups", f"{name}: {error_text(e)}")
            status = 1
        except TimeoutError:
            warn("groups", f"{name}: no answer within {args.timeout:g} s")
            status = 1
    return status


# --- reset-offsets ----------------------------------------------------------------------


def parse_datetime(text: str) -> int:
    """Milliseconds since the epoch of an ISO 8601 date-time; without a UTC offset it is
    local time, as kafka-consumer-groups.sh takes it."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(f"--to-datetime {text!r}: expected ISO 8601, e.g. 2026-01-31T12:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp() * 1000)


def _ensure_inactive(admin: AdminClient, group_id: str, timeout: float) -> None:
    try:
        description = admin.describe_consumer_groups([group_id], request_timeout=timeout)[group_id].result(timeout)
    except KafkaException as e:
        if _error_code(e) == KafkaError.GROUP_ID_NOT_FOUND:
            return  # a group that does not exist yet has no members either
        raise CommandError(error_text(e)) from None
    except TimeoutError:
        raise CommandError(f"no answer within {timeout:g} s") from None
    state = _state(description.state)
    if description.members or state not in _INACTIVE:
        raise CommandError(
            f"group {group_id!r} has {len(description.members)} active member(s) (state {state}); offsets can "
            "only be reset while the group is inactive: stop its consumers first"
        )


def _partitions(admin: AdminClient, topic: str, wanted: list[int] | None, timeout: float) -> list[int]:
    futures = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)
    try:
        description = _wait(futures[topic], timeout)
    except CommandError as e:
        raise CommandError(f"{topic}: {e}") from None
    existing = sorted(p.id for p in description.partitions)
    if wanted is None:
        return existing
    missing = sorted(set(wanted) - set(existing))
    if missing:
        raise CommandError(f"{topic} has no partition {', '.join(map(str, missing))} (it has {len(existing)})")
    return sorted(set(wanted))


def _list_offsets(admin: AdminClient, specs: dict[Partition, Any], timeout: float) -> dict[Partition, int]:
    futures = admin.list_offsets(
        {TopicPartition(t, p): spec for (t, p), spec in specs.items()}, request_timeout=timeout
    )
    return {(tp.topic, tp.partition): int(_wait(f, timeout).offset) for tp, f in futures.items()}
