"""Share groups (KIP-932) in `streamshop groups`.  librdkafka 2.16's admin client neither lists
nor describes them, so they are read with the dashboard's requests (kio's message classes) over
aiokafka's connections (streamshop/raw_requests.py): ListGroups v5 finds them,
ShareGroupDescribe v1 gives the members and their assignments, DescribeShareGroupOffsets v0
each partition's start offset.  That is the Kafka
protocol, so an Apache Kafka cluster with share groups enabled answers as the bundled broker does.

A share group has no committed offset: per partition it has a start offset, the first record
it is not done with; records past it finish out of order.  Over Kafka 4.1's protocol its lag is
therefore log end minus start offset (records already acknowledged past the start count as
not done) and the records in flight are unknown.  The bundled broker's admin API knows both:
given `--admin-url`, describe reads share groups from its /api/groups/{id}, whose record has
the same shape.
"""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from streamshop.clients import CommandError, table, warn

Partition = tuple[str, int]
LogEnds = Callable[[Iterable[Partition]], dict[Partition, int]]

# --- list -------------------------------------------------------------------------------


def list_share(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The cluster's share groups as `groups list` shows them; none from a broker without
    ListGroups v5 (it has no share groups), or where aiokafka is not installed (said)."""
    try:
        from services.dashboard.kafka_reader import LIST_GROUP_TYPES
        from services.dashboard.kafka_requests import ask
        from streamshop.raw_requests import UNSUPPORTED, node_ids, run
    except ImportError as e:
        warn("groups", f"share groups not listed: {e.name} is missing (the tools extra brings it)")
        return []

    async def work(admin: Any) -> list[dict[str, Any]]:
        found: dict[str, str] = {}
        for node_id in node_ids(admin):
            try:
                answer = await ask(admin._send_request, LIST_GROUP_TYPES, node_id)
            except UNSUPPORTED:
                continue
            for g in answer.groups:
                if g.group_type == "share":
                    found[g.group_id] = g.group_state
        return [
            {"group": g, "state": state, "type": "share", "protocol_type": "share"}
            for g, state in sorted(found.items())
        ]

    return run(args, "share groups", work)


# --- describe ---------------------------------------------------------------------------


def describe_share(args: argparse.Namespace, names: list[str], log_ends: LogEnds) -> dict[str, dict[str, Any]]:
    """The describe record of each of `names` that is a share group; the others are left out
    (not a share group, or a cluster that does not serve the share APIs)."""
    if getattr(args, "admin_url", None):
        return {name: found for name in names if (found := _from_admin_api(args.admin_url, name, args.timeout))}
    try:
        from services.dashboard.share_groups import describe_share_groups
        from streamshop.raw_requests import run
    except ImportError:
        return {}

    async def work(admin: Any) -> list[Any]:
        by_node: dict[int, list[str]] = {}
        for name in names:
            by_node.setdefault(await admin.find_coordinator(name), []).append(name)

        async def send(request: Any, node_id: int) -> Any:
            return await admin._send_request(request, node_id)

        found: list[Any] = []
        for node_id, ids in by_node.items():
            found.extend((await describe_share_groups(send, node_id, ids)).values())
        return found

    groups = [g for g in run(args, "share groups", work) if g.group_type == "share" and g.error is None]
    return {g.group_id: _record(g, log_ends) for g in groups}


def _record(group: Any, log_ends: LogEnds) -> dict[str, Any]:
    """A share group read over the Kafka protocol (services.dashboard's GroupInfo), in the
    shape of the admin API's record."""
    members = [
        {
            "member_id": m.member_id,
            "client_id": m.client_id,
            "host": m.client_host,
            "group_instance_id": None,
            "assignment": {topic: list(parts) for topic, parts in m.assignment},
        }
        for m in sorted(group.members, key=lambda m: m.member_id)
    ]
    starts: dict[Partition, int] = dict(group.committed)
    keys = sorted(set(starts) | {(t, p) for m in group.members for t, parts in m.assignment for p in parts})
    ends = log_ends(keys)
    partitions = []
    for key in keys:
        start, end = starts.get(key), ends.get(key)
        partitions.append(
            {
                "topic": key[0],
                "partition": key[1],
                "start_offset": start,
                "log_end_offset": end,
                # Over the protocol an upper bound: acknowledged records past the start are counted.
                "lag": max(0, end - start) if start is not None and end is not None else None,
                "in_flight": None,  # not in Kafka 4.1's protocol
            }
        )
    return {
        "group": group.group_id,
        "state": group.state,
        "type": "share",
        "protocol_type": "share",
        "protocol": group.protocol,
        "member_count": len(members),
        "lag": sum(p["lag"] for p in partitions if p["lag"] is not None),
        "members": members,
        "partitions": partitions,
        "committer": None,
    }


def _from_admin_api(url: str, group_id: str, timeout: float) -> dict[str, Any] | None:
    """The bundled broker's own record of a share group (exact lag, records in flight)."""
    address = f"{url.rstrip('/')}/api/groups/{urllib.parse.quote(group_id, safe='')}"
    try:
        with urllib.request.urlopen(address, timeout=timeout) as response:
            found: dict[str, Any] = json.loads(response.read())
    except urllib.error.HTTPError as e:
        e.close()
        if e.code == 404:
            return None
        raise CommandError(f"{address}: HTTP {e.code}") from None
    except (OSError, ValueError) as e:
        raise CommandError(f"{address}: {e}") from None
    return found if found.get("type") == "share" else None


def print_share_group(group: dict[str, Any], cell: Callable[[object], str]) -> None:
    print(
        f"Group: {group['group']}  type: share  state: {group['state']}  assignor: {group['protocol'] or '-'}  "
        f"members: {group['member_count']}  lag: {group['lag']}"
    )
    holders: dict[Partition, int] = {}
    for m in group["members"]:
        for topic, parts in m["assignment"].items():
            for p in parts:
                holders[(topic, p)] = holders.get((topic, p), 0) + 1
    if group["partitions"]:
        rows = [
            (
                p["topic"],
                p["partition"],
                cell(p["start_offset"]),
                cell(p["log_end_offset"]),
                cell(p["lag"]),
                cell(p["in_flight"]),
                holders.get((p["topic"], p["partition"]), 0),
            )
            for p in group["partitions"]
        ]
        headers = ["TOPIC", "PARTITION", "START-OFFSET", "LOG-END-OFFSET", "LAG", "IN-FLIGHT", "#MEMBERS"]
        print(table(headers, rows))
    if not group["members"]:
        print(f"Share group '{group['group']}' has no active members.")
        return
    print()
    member_rows = [
        (
            m["member_id"],
            m["client_id"],
            m["host"],
            sum(len(ps) for ps in m["assignment"].values()),
            " ".join(f"{t}:{','.join(map(str, ps))}" for t, ps in m["assignment"].items()) or "-",
        )
        for m in group["members"]
    ]
    print(table(["MEMBER-ID", "CLIENT-ID", "HOST", "#PARTITIONS", "ASSIGNMENT"], member_rows))
