"""Share groups (KIP-932) as the dashboard reads them: ShareGroupDescribe v1 for the members and
their assignments, DescribeShareGroupOffsets v0 for each partition's start offset (the first
record the group is not done with), through the Kafka protocol like the rest of the reader.

aiokafka declares neither request: both are kio's message classes, sent through aiokafka's
connections (services/dashboard/kafka_requests.py).  A broker that does not serve them (an Apache Kafka cluster
without the `share.version` feature) gets its share groups listed without details, and the reason
said.
"""

from __future__ import annotations

import uuid

from aiokafka.errors import IncompatibleBrokerVersion, KafkaError
from kio.schema.describe_share_group_offsets.v0.request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
)
from kio.schema.describe_share_group_offsets.v0.response import DescribeShareGroupOffsetsResponse
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.share_group_describe.v1.response import ShareGroupDescribeResponse
from kio.schema.types import GroupId

from services.dashboard.kafka_requests import KioRequest, Send, ask
from services.dashboard.model import GroupInfo, MemberInfo

__all__ = ["describe_share_group_offsets", "describe_share_groups", "share_group_describe"]

ASSIGNOR_FALLBACK = "simple"
_NO_TOPIC_ID = uuid.UUID(int=0)  # kio reads the all-zero uuid as None


def share_group_describe(group_ids: list[str]) -> KioRequest[ShareGroupDescribeResponse]:
    return KioRequest(
        ShareGroupDescribeRequest(group_ids=tuple(GroupId(g) for g in group_ids), include_authorized_operations=False),
        ShareGroupDescribeResponse,
    )


def describe_share_group_offsets(group_ids: list[str]) -> KioRequest[DescribeShareGroupOffsetsResponse]:
    # Topics null: every partition the group has state for.
    groups = tuple(DescribeShareGroupOffsetsRequestGroup(group_id=GroupId(g), topics=None) for g in group_ids)
    return KioRequest(DescribeShareGroupOffsetsRequest(groups=groups), DescribeShareGroupOffsetsResponse)


async def describe_share_groups(send: Send, node_id: int, group_ids: list[str]) -> dict[str, GroupInfo]:
    """The share groups `group_ids` whose coordinator is `node_id`; each one unreadable comes
    back with its reason in `error` (a broker without share groups: all of them)."""
    try:
        described = await ask(send, share_group_describe(group_ids), node_id)
        offsets = await ask(send, describe_share_group_offsets(group_ids), node_id)
    except (IncompatibleBrokerVersion, NotImplementedError, KafkaError) as e:
        reason = f"share group details unavailable: {type(e).__name__}"
        return {g: GroupInfo(g, "Unknown", "share", "", (), error=reason, group_type="share") for g in group_ids}
    starts: dict[str, dict[tuple[str, int], int]] = {}
    for positions in offsets.groups:
        starts[positions.group_id] = {
            (str(t.topic_name), int(p.partition_index)): int(p.start_offset)
            for t in positions.topics
            for p in t.partitions
            if p.error_code == 0 and p.start_offset >= 0
        }
    out: dict[str, GroupInfo] = {}
    for group in described.groups:
        group_id = str(group.group_id)
        if group.error_code:
            out[group_id] = GroupInfo(
                group_id, "Unknown", "share", "", (), error=group.error_message or "", group_type="share"
            )
            continue
        members = tuple(
            MemberInfo(
                m.member_id,
                m.client_id,
                m.client_host,
                tuple(
                    sorted(
                        (
                            tp.topic_name or str(tp.topic_id or _NO_TOPIC_ID),
                            tuple(sorted(int(p) for p in tp.partitions)),
                        )
                        for tp in m.assignment.topic_partitions
                    )
                ),
            )
            for m in group.members
        )
        out[group_id] = GroupInfo(
            group_id,
            group.group_state,
            "share",
            group.assignor_name or ASSIGNOR_FALLBACK,
            members,
            # A share group's "committed" position per partition is its start offset.
            committed=starts.get(group_id, {}),
            group_type="share",
        )
    return out
