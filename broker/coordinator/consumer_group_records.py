"""A consumer group's records on `__consumer_offsets` (the consumer group protocol, KIP-848),
split the way Kafka splits them so each change rewrites only its own key: the group's epoch
and subscribed topics (`cg`), each member's metadata (`cgm`), the target assignment's epoch
(`cgt`) and each member's target (`cgtm`), each member's current assignment (`cgc`).
Written by broker/coordinator/consumer_groups.py; `replay` reads them back."""

from __future__ import annotations

import uuid
from typing import Any

from broker.coordinator.assignors import Assignment
from broker.coordinator.consumer_group import ClassicProtocol, ConsumerGroup, ConsumerMember, MemberState
from broker.coordinator.records import Rec
from broker.replay import is_int, need

RECORD_KINDS = frozenset({"cg", "cgm", "cgt", "cgtm", "cgc"})


def group_record(group: ConsumerGroup) -> Rec:
    # With the subscribed topics the target was computed from (Kafka stores their metadata
    # too): after a restart the first heartbeat finds them unchanged and bumps nothing.
    subscribed = [[name, topic_id.bytes, count] for name, topic_id, count in sorted(group.subscribed, key=str)]
    return ["cg", group.group_id], {"epoch": group.epoch, "subscribed": subscribed}


def member_record(group: ConsumerGroup, m: ConsumerMember) -> Rec:
    return ["cgm", group.group_id, m.member_id], {
        "instance": m.instance_id,
        "rack": m.rack_id,
        "client": m.client_id,
        "host": m.client_host,
        "topics": list(m.topic_names),
        "regex": m.topic_regex,
        "regex_topics": sorted(m.regex_topics),
        "assignor": m.server_assignor,
        "rebalance_ms": m.rebalance_timeout_ms,
        "classic": None
        if m.classic is None
        else {"protocols": [list(p) for p in m.classic.protocols], "session_ms": m.classic.session_timeout_ms},
    }


def target_record(group: ConsumerGroup, member_id: str) -> Rec:
    return ["cgtm", group.group_id, member_id], {"partitions": _pack(group.target.get(member_id, {}))}


def current_record(group: ConsumerGroup, m: ConsumerMember) -> Rec:
    return ["cgc", group.group_id, m.member_id], {
        "epoch": m.epoch,
        "previous": m.previous_epoch,
        "state": m.state.value,
        "assigned": _pack(m.assigned),
        "revoking": _pack(m.revoking),
    }


def member_tombstones(group_id: str, member_id: str) -> list[Rec]:
    return [([kind, group_id, member_id], None) for kind in ("cgm", "cgtm", "cgc")]


def replay(groups: dict[str, ConsumerGroup], key: list[Any], value: dict[str, Any] | None) -> None:
    """Apply one record of a consumer group; raises, changing nothing, on a shape the
    coordinator does not write."""
    kind, group_id = key[0], key[1]
    if kind in ("cg", "cgt"):
        need(len(key) == 2, "group key is malformed")
    else:
        need(len(key) == 3 and isinstance(key[2], str), "member key is malformed")
    if value is None:
        _replay_tombstone(groups, kind, group_id, key)
        return
    group = groups.get(group_id)
    if group is None:  # registered below, once the record has been read whole
        group = ConsumerGroup(group_id)
    if kind == "cg":
        need(is_int(value.get("epoch"), 32), "group epoch is malformed")
        subscribed = _subscribed(value.get("subscribed", []))
        group.epoch, group.subscribed = value["epoch"], subscribed
    elif kind == "cgt":
        need(is_int(value.get("epoch"), 32), "assignment epoch is malformed")
        group.assignment_epoch = value["epoch"]
    elif kind == "cgtm":
        group.target[key[2]] = _unpack(value.get("partitions"))
    elif kind == "cgm":
        _replay_member(group, key[2], value)
    else:
        state, epoch, previous = value.get("state"), value.get("epoch"), value.get("previous")
        need(is_int(epoch, 32) and is_int(previous, 32), "member epochs are malformed")
        need(isinstance(state, str) and state in {s.value for s in MemberState}, "member state is malformed")
        assigned, revoking = _unpack(value.get("assigned")), _unpack(value.get("revoking"))
        current = _stored_member(group, key[2])
        current.state, current.epoch, current.previous_epoch = MemberState(state), value["epoch"], value["previous"]
        current.assigned, current.revoking = assigned, revoking
    groups.setdefault(group_id, group)


def _replay_member(group: ConsumerGroup, member_id: str, value: dict[str, Any]) -> None:
    topics = value.get("topics")
    need(isinstance(topics, list) and all(isinstance(t, str) for t in topics), "member topics are malformed")
    strings = ("instance", "rack", "regex", "assignor")
    need(all(value.get(k) is None or isinstance(value.get(k), str) for k in strings), "member fields are malformed")
    need(isinstance(value.get("client"), str) and isinstance(value.get("host"), str), "member client is malformed")
    need(is_int(value.get("rebalance_ms"), 32), "member rebalance timeout is malformed")
    matched = value.get("regex_topics", [])
    need(isinstance(matched, list) and all(isinstance(t, str) for t in matched), "member matches are malformed")
    classic = _classic(value.get("classic"))
    member = _stored_member(group, member_id)
    if member.instance_id is not None and group.static.get(member.instance_id) == member_id:
        del group.static[member.instance_id]
    member.instance_id, member.rack_id = value.get("instance"), value.get("rack")
    member.client_id, member.client_host = value["client"], value["host"]
    member.topic_names, member.topic_regex = tuple(value["topics"]), value.get("regex")
    member.regex_topics = frozenset(matched)
    member.server_assignor, member.rebalance_timeout_ms = value.get("assignor"), value["rebalance_ms"]
    member.classic = classic
    if member.instance_id is not None:
        group.static[member.instance_id] = member_id


def _stored_member(group: ConsumerGroup, member_id: str) -> ConsumerMember:
    member = group.members.get(member_id)
    if member is None:
        member = group.members[member_id] = ConsumerMember(member_id)
    return member


def _replay_tombstone(groups: dict[str, ConsumerGroup], kind: str, group_id: str, key: list[Any]) -> None:
    group = groups.get(group_id)
    if group is None:
        return
    if kind == "cg":
        del groups[group_id]
    elif kind == "cgm":
        member = group.members.pop(key[2], None)
        if member is not None and member.instance_id is not None and group.static.get(member.instance_id) == key[2]:
            del group.static[member.instance_id]
    elif kind == "cgtm":
        group.target.pop(key[2], None)


def _subscribed(value: object) -> frozenset[tuple[str, uuid.UUID, int]]:
    need(isinstance(value, list), "group subscription is malformed")
    assert isinstance(value, list)
    need(
        all(
            isinstance(t, list)
            and len(t) == 3
            and isinstance(t[0], str)
            and isinstance(t[1], bytes)
            and len(t[1]) == 16
            and is_int(t[2], 32)
            for t in value
        ),
        "group subscription is malformed",
    )
    return frozenset((t[0], uuid.UUID(bytes=t[1]), t[2]) for t in value)


def _classic(value: object) -> ClassicProtocol | None:
    if value is None:
        return None
    need(isinstance(value, dict), "member's classic protocols are malformed")
    assert isinstance(value, dict)
    protocols, session = value.get("protocols"), value.get("session_ms")
    need(
        isinstance(protocols, list)
        and len(protocols) > 0
        and all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], bytes) for p in protocols
        )
        and is_int(session, 32),
        "member's classic protocols are malformed",
    )
    assert isinstance(protocols, list)
    assert isinstance(session, int)
    return ClassicProtocol(tuple((p[0], p[1]) for p in protocols), session)


def _pack(assignment: Assignment) -> dict[bytes, list[int]]:
    return {topic.bytes: sorted(parts) for topic, parts in assignment.items()}


def _unpack(value: object) -> Assignment:
    need(isinstance(value, dict), "assignment is malformed")
    assert isinstance(value, dict)
    out: Assignment = {}
    for topic, parts in value.items():
        need(isinstance(topic, bytes) and len(topic) == 16, "assignment topic id is malformed")
        need(
            isinstance(parts, list) and all(is_int(p, 32) and p >= 0 for p in parts), "assignment partitions malformed"
        )
        out[uuid.UUID(bytes=topic)] = frozenset(parts)
    return out
