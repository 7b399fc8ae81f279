"""A classic group's record on `__consumer_offsets` (kind `g`): its generation, protocol,
leader and every member with its metadata and assignment, one record per group (compacted
by key), so a restart brings back the members with their ids and the assignment of the
generation they are in."""

from __future__ import annotations

from typing import Any

from broker.coordinator.group import Group, GroupState, Member
from broker.coordinator.records import Rec
from broker.replay import is_int, need


def group_record(group: Group, empty_since: int | None) -> Rec:
    return (
        ["g", group.group_id],
        {
            "generation": group.generation,
            "protocol_type": group.protocol_type,
            "protocol": group.protocol_name,
            "leader": group.leader,
            "empty_since": empty_since,
            "members": [
                [
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.session_timeout_ms,
                    m.rebalance_timeout_ms,
                    m.metadata_for(group.protocol_name or ""),
                    m.assignment,
                ]
                for m in group.members.values()
            ],
        },
    )


def tombstone(group_id: str) -> Rec:
    return ["g", group_id], None


def read_group(group_id: str, value: dict[str, Any], now: int, initial_delay_ms: int) -> tuple[Group, int | None]:
    """The group a record stores and since when it has been empty (None: it has members);
    raises, before building anything, on a shape never written."""
    generation: Any = value.get("generation")
    members: Any = value.get("members")
    protocol_type, protocol, leader = value.get("protocol_type"), value.get("protocol"), value.get("leader")
    need(is_int(generation) and isinstance(members, list), "group value is malformed")
    need(all(x is None or isinstance(x, str) for x in (protocol_type, protocol, leader)), "group names malformed")
    need(all(_member_row(m) for m in members), "a member of the group is malformed")
    empty_since: Any = value.get("empty_since")
    group = Group(group_id, initial_delay_ms)
    group.generation = generation
    group.protocol_type = protocol_type
    group.protocol_name = protocol
    group.leader = leader
    for m in members:
        member = Member(
            member_id=m[0],
            group_instance_id=m[1],
            client_id=m[2],
            client_host=m[3],
            session_timeout_ms=m[4],
            rebalance_timeout_ms=m[5],
            protocol_type=group.protocol_type or "",
            protocols=[(group.protocol_name or "", m[6])],
            last_heartbeat_ms=now,
            assignment=m[7],
        )
        group.members[member.member_id] = member
        if member.group_instance_id:
            group.static_members[member.group_instance_id] = member.member_id
    # Members come back after a restart with their ids: a generation in progress
    # resumes as Stable and expires members that do not return.
    group.state = GroupState.STABLE if group.members else GroupState.EMPTY
    if group.members:
        return group, None
    return group, empty_since if is_int(empty_since) else now


def _member_row(m: object) -> bool:
    """[member_id, instance_id, client_id, host, session_ms, rebalance_ms, metadata, assignment]"""
    return (
        isinstance(m, list)
        and len(m) == 8
        and isinstance(m[0], str)
        and (m[1] is None or isinstance(m[1], str))
        and isinstance(m[2], str)
        and isinstance(m[3], str)
        and is_int(m[4])
        and is_int(m[5])
        and isinstance(m[6], bytes)
        and isinstance(m[7], bytes)
    )
