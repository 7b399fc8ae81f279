"""Share groups (KIP-932) as the dashboard reads them: ShareGroupDescribe v1 for the members and
their assignments, DescribeShareGroupOffsets v0 for each partition's start offset (the first
record the group is not done with), through the Kafka protocol like the rest of the reader.

aiokafka declares neither request, so they are declared here as its request structs (flexible
versions: compact strings and arrays, tagged fields).  A broker that does not serve them (an
Apache Kafka cluster without the `share.version` feature) gets its share groups listed without
details, and the reason said.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from io import BytesIO
from typing import Any

from aiokafka.errors import IncompatibleBrokerVersion, KafkaError
from aiokafka.protocol.abstract import AbstractType
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Boolean, CompactArray, CompactString, Int16, Int32, Int64, Schema, TaggedFields

from services.dashboard.model import GroupInfo, MemberInfo

__all__ = ["describe_share_groups"]

_SHARE_GROUP_DESCRIBE, _DESCRIBE_SHARE_GROUP_OFFSETS = 77, 90
ASSIGNOR_FALLBACK = "simple"


class _Uuid(AbstractType[bytes]):  # type: ignore[misc]
    """Kafka's uuid: 16 raw bytes."""

    @classmethod
    def encode(cls, value: bytes) -> bytes:
        return value

    @classmethod
    def decode(cls, data: BytesIO) -> bytes:
        return data.read(16)


_STRING = CompactString("utf-8")


class ShareGroupDescribeResponse_v1(Response):  # type: ignore[misc]
    API_KEY = _SHARE_GROUP_DESCRIBE
    API_VERSION = 1
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "groups",
            CompactArray(
                ("error_code", Int16),
                ("error_message", _STRING),
                ("group_id", _STRING),
                ("group_state", _STRING),
                ("group_epoch", Int32),
                ("assignment_epoch", Int32),
                ("assignor_name", _STRING),
                (
                    "members",
                    CompactArray(
                        ("member_id", _STRING),
                        ("rack_id", _STRING),
                        ("member_epoch", Int32),
                        ("client_id", _STRING),
                        ("client_host", _STRING),
                        ("subscribed_topic_names", CompactArray(_STRING)),
                        (
                            "assignment",
                            Schema(
                                (
                                    "topic_partitions",
                                    CompactArray(
                                        ("topic_id", _Uuid),
                                        ("topic_name", _STRING),
                                        ("partitions", CompactArray(Int32)),
                                        ("tags", TaggedFields),
                                    ),
                                ),
                                ("tags", TaggedFields),
                            ),
                        ),
                        ("tags", TaggedFields),
                    ),
                ),
                ("authorized_operations", Int32),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class ShareGroupDescribeRequest_v1(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = _SHARE_GROUP_DESCRIBE
    API_VERSION = 1
    RESPONSE_TYPE = ShareGroupDescribeResponse_v1
    SCHEMA = Schema(
        ("group_ids", CompactArray(_STRING)),
        ("include_authorized_operations", Boolean),
        ("tags", TaggedFields),
    )


class ShareGroupDescribeRequest(Request[ShareGroupDescribeRequest_v1]):  # type: ignore[misc]
    API_KEY = _SHARE_GROUP_DESCRIBE

    def __init__(self, group_ids: list[str]) -> None:
        self.group_ids = group_ids

    def build(self, request_struct_class: Any) -> Any:
        return request_struct_class(self.group_ids, False, {})


class DescribeShareGroupOffsetsResponse_v0(Response):  # type: ignore[misc]
    API_KEY = _DESCRIBE_SHARE_GROUP_OFFSETS
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "groups",
            CompactArray(
                ("group_id", _STRING),
                (
                    "topics",
                    CompactArray(
                        ("topic_name", _STRING),
                        ("topic_id", _Uuid),
                        (
                            "partitions",
                            CompactArray(
                                ("partition_index", Int32),
                                ("start_offset", Int64),
                                ("leader_epoch", Int32),
                                ("error_code", Int16),
                                ("error_message", _STRING),
                                ("tags", TaggedFields),
                            ),
                        ),
                        ("tags", TaggedFields),
                    ),
                ),
                ("error_code", Int16),
                ("error_message", _STRING),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class DescribeShareGroupOffsetsRequest_v0(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = _DESCRIBE_SHARE_GROUP_OFFSETS
    API_VERSION = 0
    RESPONSE_TYPE = DescribeShareGroupOffsetsResponse_v0
    SCHEMA = Schema(
        (
            "groups",
            CompactArray(
                ("group_id", _STRING),
                (
                    "topics",
                    CompactArray(("topic_name", _STRING), ("partitions", CompactArray(Int32)), ("tags", TaggedFields)),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class DescribeShareGroupOffsetsRequest(Request[DescribeShareGroupOffsetsRequest_v0]):  # type: ignore[misc]
    API_KEY = _DESCRIBE_SHARE_GROUP_OFFSETS

    def __init__(self, group_ids: list[str]) -> None:
        self.group_ids = group_ids

    def build(self, request_struct_class: Any) -> Any:
        # Topics null: every partition the group has state for.
        return request_struct_class([(group_id, None, {}) for group_id in self.group_ids], {})


Send = Callable[[Any, int], Awaitable[Any]]


async def describe_share_groups(send: Send, node_id: int, group_ids: list[str]) -> dict[str, GroupInfo]:
    """The share groups `group_ids` whose coordinator is `node_id`; each one unreadable comes
    back with its reason in `error` (a broker without share groups: all of them)."""
    try:
        described = (await send(ShareGroupDescribeRequest(group_ids), node_id)).to_object()
        offsets = (await send(DescribeShareGroupOffsetsRequest(group_ids), node_id)).to_object()
    except (IncompatibleBrokerVersion, NotImplementedError, KafkaError) as e:
        reason = f"share group details unavailable: {type(e).__name__}"
        return {g: GroupInfo(g, "Unknown", "share", "", (), error=reason, group_type="share") for g in group_ids}
    starts: dict[str, dict[tuple[str, int], int]] = {}
    for group in offsets["groups"]:
        starts[group["group_id"]] = {
            (t["topic_name"], p["partition_index"]): p["start_offset"]
            for t in group["topics"] or ()
            for p in t["partitions"]
            if p["error_code"] == 0 and p["start_offset"] >= 0
        }
    out: dict[str, GroupInfo] = {}
    for group in described["groups"]:
        group_id = group["group_id"]
        if group["error_code"]:
            out[group_id] = GroupInfo(
                group_id, "Unknown", "share", "", (), error=group["error_message"] or "", group_type="share"
            )
            continue
        members = tuple(
            MemberInfo(
                m["member_id"],
                m["client_id"],
                m["client_host"],
                tuple(
                    sorted(
                        (tp["topic_name"] or str(uuid.UUID(bytes=tp["topic_id"])), tuple(sorted(tp["partitions"])))
                        for tp in m["assignment"]["topic_partitions"]
                    )
                ),
            )
            for m in group["members"]
        )
        out[group_id] = GroupInfo(
            group_id,
            group["group_state"],
            "share",
            group["assignor_name"] or ASSIGNOR_FALLBACK,
            members,
            # A share group's "committed" position per partition is its start offset.
            committed=starts.get(group_id, {}),
            group_type="share",
        )
    return out
