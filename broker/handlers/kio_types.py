"""kio's request and response classes of every API the broker serves: per API, one union
over the versions it serves, which its handler is typed with.

For type checking only.  The handlers import these names under TYPE_CHECKING: loading every
class at run time would add half a second to the broker's start, and kio's index loads the
class of a version when a client first uses it.  The dispatcher hands a handler kio's
decoding of its frame, an instance of the class of the frame's version;
tests/unit/test_handler_types.py checks that each union holds exactly the classes of the
versions its API serves, so that hand-over is what the handler's type says.  The transaction
APIs' unions are in broker/handlers/kio_types_txn.py.
"""

from __future__ import annotations

from typing import TypeAlias

from kio.schema.alter_client_quotas import v0 as alter_client_quotas_v0
from kio.schema.alter_client_quotas import v1 as alter_client_quotas_v1
from kio.schema.alter_configs import v0 as alter_configs_v0
from kio.schema.alter_configs import v1 as alter_configs_v1
from kio.schema.alter_configs import v2 as alter_configs_v2
from kio.schema.alter_partition_reassignments import v0 as alter_partition_reassignments_v0
from kio.schema.alter_partition_reassignments import v1 as alter_partition_reassignments_v1
from kio.schema.alter_replica_log_dirs import v1 as alter_replica_log_dirs_v1
from kio.schema.alter_replica_log_dirs import v2 as alter_replica_log_dirs_v2
from kio.schema.alter_user_scram_credentials import v0 as alter_user_scram_credentials_v0
from kio.schema.api_versions import v0 as api_versions_v0
from kio.schema.api_versions import v1 as api_versions_v1
from kio.schema.api_versions import v2 as api_versions_v2
from kio.schema.api_versions import v3 as api_versions_v3
from kio.schema.api_versions import v4 as api_versions_v4
from kio.schema.consumer_group_describe import v0 as consumer_group_describe_v0
from kio.schema.consumer_group_describe import v1 as consumer_group_describe_v1
from kio.schema.consumer_group_heartbeat import v0 as consumer_group_heartbeat_v0
from kio.schema.consumer_group_heartbeat import v1 as consumer_group_heartbeat_v1
from kio.schema.create_acls import v1 as create_acls_v1
from kio.schema.create_acls import v2 as create_acls_v2
from kio.schema.create_acls import v3 as create_acls_v3
from kio.schema.create_partitions import v0 as create_partitions_v0
from kio.schema.create_partitions import v1 as create_partitions_v1
from kio.schema.create_partitions import v2 as create_partitions_v2
from kio.schema.create_partitions import v3 as create_partitions_v3
from kio.schema.create_topics import v2 as create_topics_v2
from kio.schema.create_topics import v3 as create_topics_v3
from kio.schema.create_topics import v4 as create_topics_v4
from kio.schema.create_topics import v5 as create_topics_v5
from kio.schema.create_topics import v6 as create_topics_v6
from kio.schema.create_topics import v7 as create_topics_v7
from kio.schema.delete_acls import v1 as delete_acls_v1
from kio.schema.delete_acls import v2 as delete_acls_v2
from kio.schema.delete_acls import v3 as delete_acls_v3
from kio.schema.delete_groups import v0 as delete_groups_v0
from kio.schema.delete_groups import v1 as delete_groups_v1
from kio.schema.delete_groups import v2 as delete_groups_v2
from kio.schema.delete_records import v0 as delete_records_v0
from kio.schema.delete_records import v1 as delete_records_v1
from kio.schema.delete_records import v2 as delete_records_v2
from kio.schema.delete_topics import v1 as delete_topics_v1
from kio.schema.delete_topics import v2 as delete_topics_v2
from kio.schema.delete_topics import v3 as delete_topics_v3
from kio.schema.delete_topics import v4 as delete_topics_v4
from kio.schema.delete_topics import v5 as delete_topics_v5
from kio.schema.delete_topics import v6 as delete_topics_v6
from kio.schema.describe_acls import v1 as describe_acls_v1
from kio.schema.describe_acls import v2 as describe_acls_v2
from kio.schema.describe_acls import v3 as describe_acls_v3
from kio.schema.describe_client_quotas import v0 as describe_client_quotas_v0
from kio.schema.describe_client_quotas import v1 as describe_client_quotas_v1
from kio.schema.describe_cluster import v0 as describe_cluster_v0
from kio.schema.describe_cluster import v1 as describe_cluster_v1
from kio.schema.describe_cluster import v2 as describe_cluster_v2
from kio.schema.describe_configs import v1 as describe_configs_v1
from kio.schema.describe_configs import v2 as describe_configs_v2
from kio.schema.describe_configs import v3 as describe_configs_v3
from kio.schema.describe_configs import v4 as describe_configs_v4
from kio.schema.describe_groups import v0 as describe_groups_v0
from kio.schema.describe_groups import v1 as describe_groups_v1
from kio.schema.describe_groups import v2 as describe_groups_v2
from kio.schema.describe_groups import v3 as describe_groups_v3
from kio.schema.describe_groups import v4 as describe_groups_v4
from kio.schema.describe_groups import v5 as describe_groups_v5
from kio.schema.describe_groups import v6 as describe_groups_v6
from kio.schema.describe_log_dirs import v1 as describe_log_dirs_v1
from kio.schema.describe_log_dirs import v2 as describe_log_dirs_v2
from kio.schema.describe_log_dirs import v3 as describe_log_dirs_v3
from kio.schema.describe_log_dirs import v4 as describe_log_dirs_v4
from kio.schema.describe_quorum import v0 as describe_quorum_v0
from kio.schema.describe_quorum import v1 as describe_quorum_v1
from kio.schema.describe_quorum import v2 as describe_quorum_v2
from kio.schema.describe_topic_partitions import v0 as describe_topic_partitions_v0
from kio.schema.describe_user_scram_credentials import v0 as describe_user_scram_credentials_v0
from kio.schema.elect_leaders import v0 as elect_leaders_v0
from kio.schema.elect_leaders import v1 as elect_leaders_v1
from kio.schema.elect_leaders import v2 as elect_leaders_v2
from kio.schema.fetch import v4 as fetch_v4
from kio.schema.fetch import v5 as fetch_v5
from kio.schema.fetch import v6 as fetch_v6
from kio.schema.fetch import v7 as fetch_v7
from kio.schema.fetch import v8 as fetch_v8
from kio.schema.fetch import v9 as fetch_v9
from kio.schema.fetch import v10 as fetch_v10
from kio.schema.fetch import v11 as fetch_v11
from kio.schema.fetch import v12 as fetch_v12
from kio.schema.fetch import v13 as fetch_v13
from kio.schema.fetch import v14 as fetch_v14
from kio.schema.fetch import v15 as fetch_v15
from kio.schema.fetch import v16 as fetch_v16
from kio.schema.fetch import v17 as fetch_v17
from kio.schema.fetch import v18 as fetch_v18
from kio.schema.find_coordinator import v0 as find_coordinator_v0
from kio.schema.find_coordinator import v1 as find_coordinator_v1
from kio.schema.find_coordinator import v2 as find_coordinator_v2
from kio.schema.find_coordinator import v3 as find_coordinator_v3
from kio.schema.find_coordinator import v4 as find_coordinator_v4
from kio.schema.find_coordinator import v5 as find_coordinator_v5
from kio.schema.find_coordinator import v6 as find_coordinator_v6
from kio.schema.heartbeat import v0 as heartbeat_v0
from kio.schema.heartbeat import v1 as heartbeat_v1
from kio.schema.heartbeat import v2 as heartbeat_v2
from kio.schema.heartbeat import v3 as heartbeat_v3
from kio.schema.heartbeat import v4 as heartbeat_v4
from kio.schema.incremental_alter_configs import v0 as incremental_alter_configs_v0
from kio.schema.incremental_alter_configs import v1 as incremental_alter_configs_v1
from kio.schema.join_group import v0 as join_group_v0
from kio.schema.join_group import v1 as join_group_v1
from kio.schema.join_group import v2 as join_group_v2
from kio.schema.join_group import v3 as join_group_v3
from kio.schema.join_group import v4 as join_group_v4
from kio.schema.join_group import v5 as join_group_v5
from kio.schema.join_group import v6 as join_group_v6
from kio.schema.join_group import v7 as join_group_v7
from kio.schema.join_group import v8 as join_group_v8
from kio.schema.join_group import v9 as join_group_v9
from kio.schema.leave_group import v0 as leave_group_v0
from kio.schema.leave_group import v1 as leave_group_v1
from kio.schema.leave_group import v2 as leave_group_v2
from kio.schema.leave_group import v3 as leave_group_v3
from kio.schema.leave_group import v4 as leave_group_v4
from kio.schema.leave_group import v5 as leave_group_v5
from kio.schema.list_groups import v0 as list_groups_v0
from kio.schema.list_groups import v1 as list_groups_v1
from kio.schema.list_groups import v2 as list_groups_v2
from kio.schema.list_groups import v3 as list_groups_v3
from kio.schema.list_groups import v4 as list_groups_v4
from kio.schema.list_groups import v5 as list_groups_v5
from kio.schema.list_offsets import v1 as list_offsets_v1
from kio.schema.list_offsets import v2 as list_offsets_v2
from kio.schema.list_offsets import v3 as list_offsets_v3
from kio.schema.list_offsets import v4 as list_offsets_v4
from kio.schema.list_offsets import v5 as list_offsets_v5
from kio.schema.list_offsets import v6 as list_offsets_v6
from kio.schema.list_offsets import v7 as list_offsets_v7
from kio.schema.list_offsets import v8 as list_offsets_v8
from kio.schema.list_offsets import v9 as list_offsets_v9
from kio.schema.list_offsets import v10 as list_offsets_v10
from kio.schema.list_partition_reassignments import v0 as list_partition_reassignments_v0
from kio.schema.metadata import v0 as metadata_v0
from kio.schema.metadata import v1 as metadata_v1
from kio.schema.metadata import v2 as metadata_v2
from kio.schema.metadata import v3 as metadata_v3
from kio.schema.metadata import v4 as metadata_v4
from kio.schema.metadata import v5 as metadata_v5
from kio.schema.metadata import v6 as metadata_v6
from kio.schema.metadata import v7 as metadata_v7
from kio.schema.metadata import v8 as metadata_v8
from kio.schema.metadata import v9 as metadata_v9
from kio.schema.metadata import v10 as metadata_v10
from kio.schema.metadata import v11 as metadata_v11
from kio.schema.metadata import v12 as metadata_v12
from kio.schema.metadata import v13 as metadata_v13
from kio.schema.offset_commit import v2 as offset_commit_v2
from kio.schema.offset_commit import v3 as offset_commit_v3
from kio.schema.offset_commit import v4 as offset_commit_v4
from kio.schema.offset_commit import v5 as offset_commit_v5
from kio.schema.offset_commit import v6 as offset_commit_v6
from kio.schema.offset_commit import v7 as offset_commit_v7
from kio.schema.offset_commit import v8 as offset_commit_v8
from kio.schema.offset_commit import v9 as offset_commit_v9
from kio.schema.offset_commit import v10 as offset_commit_v10
from kio.schema.offset_delete import v0 as offset_delete_v0
from kio.schema.offset_fetch import v1 as offset_fetch_v1
from kio.schema.offset_fetch import v2 as offset_fetch_v2
from kio.schema.offset_fetch import v3 as offset_fetch_v3
from kio.schema.offset_fetch import v4 as offset_fetch_v4
from kio.schema.offset_fetch import v5 as offset_fetch_v5
from kio.schema.offset_fetch import v6 as offset_fetch_v6
from kio.schema.offset_fetch import v7 as offset_fetch_v7
from kio.schema.offset_fetch import v8 as offset_fetch_v8
from kio.schema.offset_fetch import v9 as offset_fetch_v9
from kio.schema.offset_fetch import v10 as offset_fetch_v10
from kio.schema.produce import v3 as produce_v3
from kio.schema.produce import v4 as produce_v4
from kio.schema.produce import v5 as produce_v5
from kio.schema.produce import v6 as produce_v6
from kio.schema.produce import v7 as produce_v7
from kio.schema.produce import v8 as produce_v8
from kio.schema.produce import v9 as produce_v9
from kio.schema.produce import v10 as produce_v10
from kio.schema.produce import v11 as produce_v11
from kio.schema.produce import v12 as produce_v12
from kio.schema.produce import v13 as produce_v13
from kio.schema.sasl_authenticate import v0 as sasl_authenticate_v0
from kio.schema.sasl_authenticate import v1 as sasl_authenticate_v1
from kio.schema.sasl_authenticate import v2 as sasl_authenticate_v2
from kio.schema.sasl_handshake import v1 as sasl_handshake_v1
from kio.schema.sync_group import v0 as sync_group_v0
from kio.schema.sync_group import v1 as sync_group_v1
from kio.schema.sync_group import v2 as sync_group_v2
from kio.schema.sync_group import v3 as sync_group_v3
from kio.schema.sync_group import v4 as sync_group_v4
from kio.schema.sync_group import v5 as sync_group_v5

AlterConfigsRequest: TypeAlias = (
    alter_configs_v0.AlterConfigsRequest | alter_configs_v1.AlterConfigsRequest | alter_configs_v2.AlterConfigsRequest
)
AlterConfigsResponse: TypeAlias = (
    alter_configs_v0.AlterConfigsResponse
    | alter_configs_v1.AlterConfigsResponse
    | alter_configs_v2.AlterConfigsResponse
)
AlterUserScramCredentialsRequest: TypeAlias = alter_user_scram_credentials_v0.AlterUserScramCredentialsRequest
AlterUserScramCredentialsResponse: TypeAlias = alter_user_scram_credentials_v0.AlterUserScramCredentialsResponse
ApiVersionsRequest: TypeAlias = (
    api_versions_v0.ApiVersionsRequest
    | api_versions_v1.ApiVersionsRequest
    | api_versions_v2.ApiVersionsRequest
    | api_versions_v3.ApiVersionsRequest
    | api_versions_v4.ApiVersionsRequest
)
ApiVersionsResponse: TypeAlias = (
    api_versions_v0.ApiVersionsResponse
    | api_versions_v1.ApiVersionsResponse
    | api_versions_v2.ApiVersionsResponse
    | api_versions_v3.ApiVersionsResponse
    | api_versions_v4.ApiVersionsResponse
)
CreateAclsRequest: TypeAlias = (
    create_acls_v1.CreateAclsRequest | create_acls_v2.CreateAclsRequest | create_acls_v3.CreateAclsRequest
)
CreateAclsResponse: TypeAlias = (
    create_acls_v1.CreateAclsResponse | create_acls_v2.CreateAclsResponse | create_acls_v3.CreateAclsResponse
)
CreatePartitionsRequest: TypeAlias = (
    create_partitions_v0.CreatePartitionsRequest
    | create_partitions_v1.CreatePartitionsRequest
    | create_partitions_v2.CreatePartitionsRequest
    | create_partitions_v3.CreatePartitionsRequest
)
CreatePartitionsResponse: TypeAlias = (
    create_partitions_v0.CreatePartitionsResponse
    | create_partitions_v1.CreatePartitionsResponse
    | create_partitions_v2.CreatePartitionsResponse
    | create_partitions_v3.CreatePartitionsResponse
)
CreateTopicsRequest: TypeAlias = (
    create_topics_v2.CreateTopicsRequest
    | create_topics_v3.CreateTopicsRequest
    | create_topics_v4.CreateTopicsRequest
    | create_topics_v5.CreateTopicsRequest
    | create_topics_v6.CreateTopicsRequest
    | create_topics_v7.CreateTopicsRequest
)
CreateTopicsResponse: TypeAlias = (
    create_topics_v2.CreateTopicsResponse
    | create_topics_v3.CreateTopicsResponse
    | create_topics_v4.CreateTopicsResponse
    | create_topics_v5.CreateTopicsResponse
    | create_topics_v6.CreateTopicsResponse
    | create_topics_v7.CreateTopicsResponse
)
DeleteAclsRequest: TypeAlias = (
    delete_acls_v1.DeleteAclsRequest | delete_acls_v2.DeleteAclsRequest | delete_acls_v3.DeleteAclsRequest
)
DeleteAclsResponse: TypeAlias = (
    delete_acls_v1.DeleteAclsResponse | delete_acls_v2.DeleteAclsResponse | delete_acls_v3.DeleteAclsResponse
)
DeleteGroupsRequest: TypeAlias = (
    delete_groups_v0.DeleteGroupsRequest | delete_groups_v1.DeleteGroupsRequest | delete_groups_v2.DeleteGroupsRequest
)
DeleteGroupsResponse: TypeAlias = (
    delete_groups_v0.DeleteGroupsResponse
    | delete_groups_v1.DeleteGroupsResponse
    | delete_groups_v2.DeleteGroupsResponse
)
DeleteRecordsRequest: TypeAlias = (
    delete_records_v0.DeleteRecordsRequest
    | delete_records_v1.DeleteRecordsRequest
    | delete_records_v2.DeleteRecordsRequest
)
DeleteRecordsResponse: TypeAlias = (
    delete_records_v0.DeleteRecordsResponse
    | delete_records_v1.DeleteRecordsResponse
    | delete_records_v2.DeleteRecordsResponse
)
DeleteTopicsRequest: TypeAlias = (
    delete_topics_v1.DeleteTopicsRequest
    | delete_topics_v2.DeleteTopicsRequest
    | delete_topics_v3.DeleteTopicsRequest
    | delete_topics_v4.DeleteTopicsRequest
    | delete_topics_v5.DeleteTopicsRequest
    | delete_topics_v6.DeleteTopicsRequest
)
DeleteTopicsResponse: TypeAlias = (
    delete_topics_v1.DeleteTopicsResponse
    | delete_topics_v2.DeleteTopicsResponse
    | delete_topics_v3.DeleteTopicsResponse
    | delete_topics_v4.DeleteTopicsResponse
    | delete_topics_v5.DeleteTopicsResponse
    | delete_topics_v6.DeleteTopicsResponse
)
DescribeAclsRequest: TypeAlias = (
    describe_acls_v1.DescribeAclsRequest | describe_acls_v2.DescribeAclsRequest | describe_acls_v3.DescribeAclsRequest
)
DescribeAclsResponse: TypeAlias = (
    describe_acls_v1.DescribeAclsResponse
    | describe_acls_v2.DescribeAclsResponse
    | describe_acls_v3.DescribeAclsResponse
)
AlterClientQuotasRequest: TypeAlias = (
    alter_client_quotas_v0.AlterClientQuotasRequest | alter_client_quotas_v1.AlterClientQuotasRequest
)
AlterClientQuotasResponse: TypeAlias = (
    alter_client_quotas_v0.AlterClientQuotasResponse | alter_client_quotas_v1.AlterClientQuotasResponse
)
DescribeClientQuotasRequest: TypeAlias = (
    describe_client_quotas_v0.DescribeClientQuotasRequest | describe_client_quotas_v1.DescribeClientQuotasRequest
)
DescribeClientQuotasResponse: TypeAlias = (
    describe_client_quotas_v0.DescribeClientQuotasResponse | describe_client_quotas_v1.DescribeClientQuotasResponse
)
DescribeClusterRequest: TypeAlias = (
    describe_cluster_v0.DescribeClusterRequest
    | describe_cluster_v1.DescribeClusterRequest
    | describe_cluster_v2.DescribeClusterRequest
)
DescribeClusterResponse: TypeAlias = (
    describe_cluster_v0.DescribeClusterResponse
    | describe_cluster_v1.DescribeClusterResponse
    | describe_cluster_v2.DescribeClusterResponse
)
DescribeConfigsRequest: TypeAlias = (
    describe_configs_v1.DescribeConfigsRequest
    | describe_configs_v2.DescribeConfigsRequest
    | describe_configs_v3.DescribeConfigsRequest
    | describe_configs_v4.DescribeConfigsRequest
)
DescribeConfigsResponse: TypeAlias = (
    describe_configs_v1.DescribeConfigsResponse
    | describe_configs_v2.DescribeConfigsResponse
    | describe_configs_v3.DescribeConfigsResponse
    | describe_configs_v4.DescribeConfigsResponse
)
DescribeGroupsRequest: TypeAlias = (
    describe_groups_v0.DescribeGroupsRequest
    | describe_groups_v1.DescribeGroupsRequest
    | describe_groups_v2.DescribeGroupsRequest
    | describe_groups_v3.DescribeGroupsRequest
    | describe_groups_v4.DescribeGroupsRequest
    | describe_groups_v5.DescribeGroupsRequest
    | describe_groups_v6.DescribeGroupsRequest
)
DescribeGroupsResponse: TypeAlias = (
    describe_groups_v0.DescribeGroupsResponse
    | describe_groups_v1.DescribeGroupsResponse
    | describe_groups_v2.DescribeGroupsResponse
    | describe_groups_v3.DescribeGroupsResponse
    | describe_groups_v4.DescribeGroupsResponse
    | describe_groups_v5.DescribeGroupsResponse
    | describe_groups_v6.DescribeGroupsResponse
)
DescribeLogDirsRequest: TypeAlias = (
    describe_log_dirs_v1.DescribeLogDirsRequest
    | describe_log_dirs_v2.DescribeLogDirsRequest
    | describe_log_dirs_v3.DescribeLogDirsRequest
    | describe_log_dirs_v4.DescribeLogDirsRequest
)
DescribeLogDirsResponse: TypeAlias = (
    describe_log_dirs_v1.DescribeLogDirsResponse
    | describe_log_dirs_v2.DescribeLogDirsResponse
    | describe_log_dirs_v3.DescribeLogDirsResponse
    | describe_log_dirs_v4.DescribeLogDirsResponse
)
DescribeQuorumRequest: TypeAlias = (
    describe_quorum_v0.DescribeQuorumRequest
    | describe_quorum_v1.DescribeQuorumRequest
    | describe_quorum_v2.DescribeQuorumRequest
)
DescribeQuorumResponse: TypeAlias = (
    describe_quorum_v0.DescribeQuorumResponse
    | describe_quorum_v1.DescribeQuorumResponse
    | describe_quorum_v2.DescribeQuorumResponse
)
DescribeTopicPartitionsRequest: TypeAlias = describe_topic_partitions_v0.DescribeTopicPartitionsRequest
DescribeTopicPartitionsResponse: TypeAlias = describe_topic_partitions_v0.DescribeTopicPartitionsResponse
DescribeUserScramCredentialsRequest: TypeAlias = describe_user_scram_credentials_v0.DescribeUserScramCredentialsRequest
DescribeUserScramCredentialsResponse: TypeAlias = (
    describe_user_scram_credentials_v0.DescribeUserScramCredentialsResponse
)
FetchRequest: TypeAlias = (
    fetch_v4.FetchRequest
    | fetch_v5.FetchRequest
    | fetch_v6.FetchRequest
    | fetch_v7.FetchRequest
    | fetch_v8.FetchRequest
    | fetch_v9.FetchRequest
    | fetch_v10.FetchRequest
    | fetch_v11.FetchRequest
    | fetch_v12.FetchRequest
    | fetch_v13.FetchRequest
    | fetch_v14.FetchRequest
    | fetch_v15.FetchRequest
    | fetch_v16.FetchRequest
    | fetch_v17.FetchRequest
    | fetch_v18.FetchRequest
)
FetchResponse: TypeAlias = (
    fetch_v4.FetchResponse
    | fetch_v5.FetchResponse
    | fetch_v6.FetchResponse
    | fetch_v7.FetchResponse
    | fetch_v8.FetchResponse
    | fetch_v9.FetchResponse
    | fetch_v10.FetchResponse
    | fetch_v11.FetchResponse
    | fetch_v12.FetchResponse
    | fetch_v13.FetchResponse
    | fetch_v14.FetchResponse
    | fetch_v15.FetchResponse
    | fetch_v16.FetchResponse
    | fetch_v17.FetchResponse
    | fetch_v18.FetchResponse
)
FindCoordinatorRequest: TypeAlias = (
    find_coordinator_v0.FindCoordinatorRequest
    | find_coordinator_v1.FindCoordinatorRequest
    | find_coordinator_v2.FindCoordinatorRequest
    | find_coordinator_v3.FindCoordinatorRequest
    | find_coordinator_v4.FindCoordinatorRequest
    | find_coordinator_v5.FindCoordinatorRequest
    | find_coordinator_v6.FindCoordinatorRequest
)
FindCoordinatorResponse: TypeAlias = (
    find_coordinator_v0.FindCoordinatorResponse
    | find_coordinator_v1.FindCoordinatorResponse
    | find_coordinator_v2.FindCoordinatorResponse
    | find_coordinator_v3.FindCoordinatorResponse
    | find_coordinator_v4.FindCoordinatorResponse
    | find_coordinator_v5.FindCoordinatorResponse
    | find_coordinator_v6.FindCoordinatorResponse
)
HeartbeatRequest: TypeAlias = (
    heartbeat_v0.HeartbeatRequest
    | heartbeat_v1.HeartbeatRequest
    | heartbeat_v2.HeartbeatRequest
    | heartbeat_v3.HeartbeatRequest
    | heartbeat_v4.HeartbeatRequest
)
HeartbeatResponse: TypeAlias = (
    heartbeat_v0.HeartbeatResponse
    | heartbeat_v1.HeartbeatResponse
    | heartbeat_v2.HeartbeatResponse
    | heartbeat_v3.HeartbeatResponse
    | heartbeat_v4.HeartbeatResponse
)
IncrementalAlterConfigsRequest: TypeAlias = (
    incremental_alter_configs_v0.IncrementalAlterConfigsRequest
    | incremental_alter_configs_v1.IncrementalAlterConfigsRequest
)
IncrementalAlterConfigsResponse: TypeAlias = (
    incremental_alter_configs_v0.IncrementalAlterConfigsResponse
    | incremental_alter_configs_v1.IncrementalAlterConfigsResponse
)
JoinGroupRequest: TypeAlias = (
    join_group_v0.JoinGroupRequest
    | join_group_v1.JoinGroupRequest
    | join_group_v2.JoinGroupRequest
    | join_group_v3.JoinGroupRequest
    | join_group_v4.JoinGroupRequest
    | join_group_v5.JoinGroupRequest
    | join_group_v6.JoinGroupRequest
    | join_group_v7.JoinGroupRequest
    | join_group_v8.JoinGroupRequest
    | join_group_v9.JoinGroupRequest
)
JoinGroupResponse: TypeAlias = (
    join_group_v0.JoinGroupResponse
    | join_group_v1.JoinGroupResponse
    | join_group_v2.JoinGroupResponse
    | join_group_v3.JoinGroupResponse
    | join_group_v4.JoinGroupResponse
    | join_group_v5.JoinGroupResponse
    | join_group_v6.JoinGroupResponse
    | join_group_v7.JoinGroupResponse
    | join_group_v8.JoinGroupResponse
    | join_group_v9.JoinGroupResponse
)
LeaveGroupRequest: TypeAlias = (
    leave_group_v0.LeaveGroupRequest
    | leave_group_v1.LeaveGroupRequest
    | leave_group_v2.LeaveGroupRequest
    | leave_group_v3.LeaveGroupRequest
    | leave_group_v4.LeaveGroupRequest
    | leave_group_v5.LeaveGroupRequest
)
LeaveGroupResponse: TypeAlias = (
    leave_group_v0.LeaveGroupResponse
    | leave_group_v1.LeaveGroupResponse
    | leave_group_v2.LeaveGroupResponse
    | leave_group_v3.LeaveGroupResponse
    | leave_group_v4.LeaveGroupResponse
    | leave_group_v5.LeaveGroupResponse
)
ListGroupsRequest: TypeAlias = (
    list_groups_v0.ListGroupsRequest
    | list_groups_v1.ListGroupsRequest
    | list_groups_v2.ListGroupsRequest
    | list_groups_v3.ListGroupsRequest
    | list_groups_v4.ListGroupsRequest
    | list_groups_v5.ListGroupsRequest
)
ListGroupsResponse: TypeAlias = (
    list_groups_v0.ListGroupsResponse
    | list_groups_v1.ListGroupsResponse
    | list_groups_v2.ListGroupsResponse
    | list_groups_v3.ListGroupsResponse
    | list_groups_v4.ListGroupsResponse
    | list_groups_v5.ListGroupsResponse
)
ListOffsetsRequest: TypeAlias = (
    list_offsets_v1.ListOffsetsRequest
    | list_offsets_v2.ListOffsetsRequest
    | list_offsets_v3.ListOffsetsRequest
    | list_offsets_v4.ListOffsetsRequest
    | list_offsets_v5.ListOffsetsRequest
    | list_offsets_v6.ListOffsetsRequest
    | list_offsets_v7.ListOffsetsRequest
    | list_offsets_v8.ListOffsetsRequest
    | list_offsets_v9.ListOffsetsRequest
    | list_offsets_v10.ListOffsetsRequest
)
ListOffsetsResponse: TypeAlias = (
    list_offsets_v1.ListOffsetsResponse
    | list_offsets_v2.ListOffsetsResponse
    | list_offsets_v3.ListOffsetsResponse
    | list_offsets_v4.ListOffsetsResponse
    | list_offsets_v5.ListOffsetsResponse
    | list_offsets_v6.ListOffsetsResponse
    | list_offsets_v7.ListOffsetsResponse
    | list_offsets_v8.ListOffsetsResponse
    | list_offsets_v9.ListOffsetsResponse
    | list_offsets_v10.ListOffsetsResponse
)
MetadataRequest: TypeAlias = (
    metadata_v0.MetadataRequest
    | metadata_v1.MetadataRequest
    | metadata_v2.MetadataRequest
    | metadata_v3.MetadataRequest
    | metadata_v4.MetadataRequest
    | metadata_v5.MetadataRequest
    | metadata_v6.MetadataRequest
    | metadata_v7.MetadataRequest
    | metadata_v8.MetadataRequest
    | metadata_v9.MetadataRequest
    | metadata_v10.MetadataRequest
    | metadata_v11.MetadataRequest
    | metadata_v12.MetadataRequest
    | metadata_v13.MetadataRequest
)
MetadataResponse: TypeAlias = (
    metadata_v0.MetadataResponse
    | metadata_v1.MetadataResponse
    | metadata_v2.MetadataResponse
    | metadata_v3.MetadataResponse
    | metadata_v4.MetadataResponse
    | metadata_v5.MetadataResponse
    | metadata_v6.MetadataResponse
    | metadata_v7.MetadataResponse
    | metadata_v8.MetadataResponse
    | metadata_v9.MetadataResponse
    | metadata_v10.MetadataResponse
    | metadata_v11.MetadataResponse
    | metadata_v12.MetadataResponse
    | metadata_v13.MetadataResponse
)
OffsetCommitRequest: TypeAlias = (
    offset_commit_v2.OffsetCommitRequest
    | offset_commit_v3.OffsetCommitRequest
    | offset_commit_v4.OffsetCommitRequest
    | offset_commit_v5.OffsetCommitRequest
    | offset_commit_v6.OffsetCommitRequest
    | offset_commit_v7.OffsetCommitRequest
    | offset_commit_v8.OffsetCommitRequest
    | offset_commit_v9.OffsetCommitRequest
    | offset_commit_v10.OffsetCommitRequest
)
OffsetCommitResponse: TypeAlias = (
    offset_commit_v2.OffsetCommitResponse
    | offset_commit_v3.OffsetCommitResponse
    | offset_commit_v4.OffsetCommitResponse
    | offset_commit_v5.OffsetCommitResponse
    | offset_commit_v6.OffsetCommitResponse
    | offset_commit_v7.OffsetCommitResponse
    | offset_commit_v8.OffsetCommitResponse
    | offset_commit_v9.OffsetCommitResponse
    | offset_commit_v10.OffsetCommitResponse
)
OffsetDeleteRequest: TypeAlias = offset_delete_v0.OffsetDeleteRequest
OffsetDeleteResponse: TypeAlias = offset_delete_v0.OffsetDeleteResponse
OffsetFetchRequest: TypeAlias = (
    offset_fetch_v1.OffsetFetchRequest
    | offset_fetch_v2.OffsetFetchRequest
    | offset_fetch_v3.OffsetFetchRequest
    | offset_fetch_v4.OffsetFetchRequest
    | offset_fetch_v5.OffsetFetchRequest
    | offset_fetch_v6.OffsetFetchRequest
    | offset_fetch_v7.OffsetFetchRequest
    | offset_fetch_v8.OffsetFetchRequest
    | offset_fetch_v9.OffsetFetchRequest
    | offset_fetch_v10.OffsetFetchRequest
)
OffsetFetchResponse: TypeAlias = (
    offset_fetch_v1.OffsetFetchResponse
    | offset_fetch_v2.OffsetFetchResponse
    | offset_fetch_v3.OffsetFetchResponse
    | offset_fetch_v4.OffsetFetchResponse
    | offset_fetch_v5.OffsetFetchResponse
    | offset_fetch_v6.OffsetFetchResponse
    | offset_fetch_v7.OffsetFetchResponse
    | offset_fetch_v8.OffsetFetchResponse
    | offset_fetch_v9.OffsetFetchResponse
    | offset_fetch_v10.OffsetFetchResponse
)
ProduceRequest: TypeAlias = (
    produce_v3.ProduceRequest
    | produce_v4.ProduceRequest
    | produce_v5.ProduceRequest
    | produce_v6.ProduceRequest
    | produce_v7.ProduceRequest
    | produce_v8.ProduceRequest
    | produce_v9.ProduceRequest
    | produce_v10.ProduceRequest
    | produce_v11.ProduceRequest
    | produce_v12.ProduceRequest
    | produce_v13.ProduceRequest
)
ProduceResponse: TypeAlias = (
    produce_v3.ProduceResponse
    | produce_v4.ProduceResponse
    | produce_v5.ProduceResponse
    | produce_v6.ProduceResponse
    | produce_v7.ProduceResponse
    | produce_v8.ProduceResponse
    | produce_v9.ProduceResponse
    | produce_v10.ProduceResponse
    | produce_v11.ProduceResponse
    | produce_v12.ProduceResponse
    | produce_v13.ProduceResponse
)
SaslAuthenticateRequest: TypeAlias = (
    sasl_authenticate_v0.SaslAuthenticateRequest
    | sasl_authenticate_v1.SaslAuthenticateRequest
    | sasl_authenticate_v2.SaslAuthenticateRequest
)
SaslAuthenticateResponse: TypeAlias = (
    sasl_authenticate_v0.SaslAuthenticateResponse
    | sasl_authenticate_v1.SaslAuthenticateResponse
    | sasl_authenticate_v2.SaslAuthenticateResponse
)
SaslHandshakeRequest: TypeAlias = sasl_handshake_v1.SaslHandshakeRequest
SaslHandshakeResponse: TypeAlias = sasl_handshake_v1.SaslHandshakeResponse
SyncGroupRequest: TypeAlias = (
    sync_group_v0.SyncGroupRequest
    | sync_group_v1.SyncGroupRequest
    | sync_group_v2.SyncGroupRequest
    | sync_group_v3.SyncGroupRequest
    | sync_group_v4.SyncGroupRequest
    | sync_group_v5.SyncGroupRequest
)
SyncGroupResponse: TypeAlias = (
    sync_group_v0.SyncGroupResponse
    | sync_group_v1.SyncGroupResponse
    | sync_group_v2.SyncGroupResponse
    | sync_group_v3.SyncGroupResponse
    | sync_group_v4.SyncGroupResponse
    | sync_group_v5.SyncGroupResponse
)
AlterPartitionReassignmentsRequest: TypeAlias = (
    alter_partition_reassignments_v0.AlterPartitionReassignmentsRequest
    | alter_partition_reassignments_v1.AlterPartitionReassignmentsRequest
)
AlterPartitionReassignmentsResponse: TypeAlias = (
    alter_partition_reassignments_v0.AlterPartitionReassignmentsResponse
    | alter_partition_reassignments_v1.AlterPartitionReassignmentsResponse
)
AlterReplicaLogDirsRequest: TypeAlias = (
    alter_replica_log_dirs_v1.AlterReplicaLogDirsRequest | alter_replica_log_dirs_v2.AlterReplicaLogDirsRequest
)
AlterReplicaLogDirsResponse: TypeAlias = (
    alter_replica_log_dirs_v1.AlterReplicaLogDirsResponse | alter_replica_log_dirs_v2.AlterReplicaLogDirsResponse
)
ElectLeadersRequest: TypeAlias = (
    elect_leaders_v0.ElectLeadersRequest | elect_leaders_v1.ElectLeadersRequest | elect_leaders_v2.ElectLeadersRequest
)
ElectLeadersResponse: TypeAlias = (
    elect_leaders_v0.ElectLeadersResponse
    | elect_leaders_v1.ElectLeadersResponse
    | elect_leaders_v2.ElectLeadersResponse
)
ListPartitionReassignmentsRequest: TypeAlias = list_partition_reassignments_v0.ListPartitionReassignmentsRequest
ListPartitionReassignmentsResponse: TypeAlias = list_partition_reassignments_v0.ListPartitionReassignmentsResponse

ConsumerGroupHeartbeatRequest: TypeAlias = (
    consumer_group_heartbeat_v0.ConsumerGroupHeartbeatRequest
    | consumer_group_heartbeat_v1.ConsumerGroupHeartbeatRequest
)
ConsumerGroupHeartbeatResponse: TypeAlias = (
    consumer_group_heartbeat_v0.ConsumerGroupHeartbeatResponse
    | consumer_group_heartbeat_v1.ConsumerGroupHeartbeatResponse
)
ConsumerGroupDescribeRequest: TypeAlias = (
    consumer_group_describe_v0.ConsumerGroupDescribeRequest | consumer_group_describe_v1.ConsumerGroupDescribeRequest
)
ConsumerGroupDescribeResponse: TypeAlias = (
    consumer_group_describe_v0.ConsumerGroupDescribeResponse | consumer_group_describe_v1.ConsumerGroupDescribeResponse
)
