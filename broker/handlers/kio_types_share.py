"""kio's classes of the share group APIs (KIP-932): ShareGroupHeartbeat, ShareGroupDescribe,
ShareFetch, ShareAcknowledge and the share-group offset APIs, in a module of their own as
kio_types_txn.py.  For type checking only; tests/unit/test_handler_types.py checks them."""

from __future__ import annotations

from typing import TypeAlias

from kio.schema.alter_share_group_offsets import v0 as alter_share_group_offsets_v0
from kio.schema.delete_share_group_offsets import v0 as delete_share_group_offsets_v0
from kio.schema.describe_share_group_offsets import v0 as describe_share_group_offsets_v0
from kio.schema.list_config_resources import v0 as list_config_resources_v0
from kio.schema.list_config_resources import v1 as list_config_resources_v1
from kio.schema.share_acknowledge import v1 as share_acknowledge_v1
from kio.schema.share_fetch import v1 as share_fetch_v1
from kio.schema.share_group_describe import v1 as share_group_describe_v1
from kio.schema.share_group_heartbeat import v1 as share_group_heartbeat_v1

ShareGroupHeartbeatRequest: TypeAlias = share_group_heartbeat_v1.ShareGroupHeartbeatRequest
ShareGroupHeartbeatResponse: TypeAlias = share_group_heartbeat_v1.ShareGroupHeartbeatResponse
ShareGroupDescribeRequest: TypeAlias = share_group_describe_v1.ShareGroupDescribeRequest
ShareGroupDescribeResponse: TypeAlias = share_group_describe_v1.ShareGroupDescribeResponse
ShareFetchRequest: TypeAlias = share_fetch_v1.ShareFetchRequest
ShareFetchResponse: TypeAlias = share_fetch_v1.ShareFetchResponse
ShareAcknowledgeRequest: TypeAlias = share_acknowledge_v1.ShareAcknowledgeRequest
ShareAcknowledgeResponse: TypeAlias = share_acknowledge_v1.ShareAcknowledgeResponse
# Kafka 4.1 serves v0 only of the three offset APIs (v1 of DescribeShareGroupOffsets, with
# lag, came later).
DescribeShareGroupOffsetsRequest: TypeAlias = describe_share_group_offsets_v0.DescribeShareGroupOffsetsRequest
DescribeShareGroupOffsetsResponse: TypeAlias = describe_share_group_offsets_v0.DescribeShareGroupOffsetsResponse
AlterShareGroupOffsetsRequest: TypeAlias = alter_share_group_offsets_v0.AlterShareGroupOffsetsRequest
AlterShareGroupOffsetsResponse: TypeAlias = alter_share_group_offsets_v0.AlterShareGroupOffsetsResponse
DeleteShareGroupOffsetsRequest: TypeAlias = delete_share_group_offsets_v0.DeleteShareGroupOffsetsRequest
DeleteShareGroupOffsetsResponse: TypeAlias = delete_share_group_offsets_v0.DeleteShareGroupOffsetsResponse

# ListConfigResources (Kafka 4.1) lists group configs among others: here beside the share APIs.
ListConfigResourcesRequest: TypeAlias = (
    list_config_resources_v0.ListConfigResourcesRequest | list_config_resources_v1.ListConfigResourcesRequest
)
ListConfigResourcesResponse: TypeAlias = (
    list_config_resources_v0.ListConfigResourcesResponse | list_config_resources_v1.ListConfigResourcesResponse
)
