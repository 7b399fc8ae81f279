"""The API table: every request the broker implements, with the versions it speaks.
ApiVersions advertises exactly this list.

Each handler takes of the broker only its module's protocol; `Services` joins them, and the
table's entries all take a `Services`: the hub the server dispatches with must satisfy it."""

from __future__ import annotations

from typing import Protocol

from broker.handlers import (
    acls,
    api_versions,
    cluster,
    config_resources,
    configs,
    consumer_groups,
    fetch,
    groups,
    list_offsets,
    log_dirs,
    metadata,
    offsets,
    produce,
    quorum,
    quotas,
    records,
    replicas,
    sasl,
    scram_users,
    share_fetch,
    share_groups,
    share_offsets,
    topic_partitions,
    topics,
    transactions,
)
from broker.handlers.base import Api, serve
from broker.handlers.services import TopicService


class Services(
    acls.AclsBroker,
    cluster.ClusterBroker,
    config_resources.ConfigResourcesBroker,
    configs.ConfigsBroker,
    consumer_groups.ConsumerGroupsBroker,
    fetch.FetchBroker,
    groups.GroupsBroker,
    list_offsets.ListOffsetsBroker,
    log_dirs.LogDirsBroker,
    metadata.MetadataBroker,
    offsets.OffsetsBroker,
    produce.ProduceBroker,
    quorum.QuorumBroker,
    quotas.QuotasBroker,
    records.RecordsBroker,
    replicas.ReplicasBroker,
    sasl.SaslBroker,
    scram_users.ScramUsersBroker,
    share_fetch.ShareFetchBroker,
    share_groups.ShareGroupsBroker,
    share_offsets.ShareOffsetsBroker,
    topic_partitions.TopicPartitionsBroker,
    topics.TopicsBroker,
    transactions.TransactionsBroker,
    Protocol,
):
    """Everything the handlers use of the broker: what its hub must provide."""

    @property
    def topics(self) -> TopicService:
        """The topic service, which the topic requests and Metadata each see a part of."""


_IMPLEMENTED: list[Api[Services]] = [
    serve("Produce", produce.MESSAGES, produce.handle),
    serve("Fetch", fetch.MESSAGES, fetch.handle),
    serve("ListOffsets", list_offsets.MESSAGES, list_offsets.handle),
    serve("Metadata", metadata.MESSAGES, metadata.handle),
    serve("DescribeTopicPartitions", topic_partitions.MESSAGES, topic_partitions.handle),
    serve("InitProducerId", transactions.INIT_PRODUCER_ID, cluster.init_producer_id),
    serve("CreateTopics", topics.CREATE_TOPICS, topics.create_topics),
    serve("DeleteTopics", topics.DELETE_TOPICS, topics.delete_topics),
    serve("DeleteRecords", records.MESSAGES, records.handle),
    serve("DescribeConfigs", configs.DESCRIBE_CONFIGS, configs.describe_configs),
    serve("CreatePartitions", topics.CREATE_PARTITIONS, topics.create_partitions),
    serve("AlterConfigs", configs.ALTER_CONFIGS, configs.alter_configs),
    serve("IncrementalAlterConfigs", configs.INCREMENTAL_ALTER_CONFIGS, configs.incremental_alter_configs),
    serve("ListConfigResources", config_resources.MESSAGES, config_resources.handle),
    serve("DescribeCluster", cluster.DESCRIBE_CLUSTER, cluster.describe_cluster),
    serve("DescribeQuorum", quorum.MESSAGES, quorum.handle),
    serve("DescribeLogDirs", log_dirs.MESSAGES, log_dirs.handle),
    serve("AlterReplicaLogDirs", replicas.ALTER_REPLICA_LOG_DIRS, replicas.alter_replica_log_dirs),
    serve("ElectLeaders", replicas.ELECT_LEADERS, replicas.elect_leaders),
    serve("AlterPartitionReassignments", replicas.ALTER_REASSIGNMENTS, replicas.alter_partition_reassignments),
    serve("ListPartitionReassignments", replicas.LIST_REASSIGNMENTS, replicas.list_partition_reassignments),
    serve("FindCoordinator", groups.FIND_COORDINATOR, groups.find_coordinator),
    serve("JoinGroup", groups.JOIN_GROUP, groups.join_group),
    serve("SyncGroup", groups.SYNC_GROUP, groups.sync_group),
    serve("Heartbeat", groups.HEARTBEAT, groups.heartbeat),
    serve("LeaveGroup", groups.LEAVE_GROUP, groups.leave_group),
    serve("OffsetCommit", offsets.OFFSET_COMMIT, offsets.offset_commit),
    serve("OffsetFetch", offsets.OFFSET_FETCH, offsets.offset_fetch),
    serve("ListGroups", groups.LIST_GROUPS, groups.list_groups),
    serve("DescribeGroups", groups.DESCRIBE_GROUPS, groups.describe_groups),
    serve("DeleteGroups", groups.DELETE_GROUPS, groups.delete_groups),
    serve("OffsetDelete", offsets.OFFSET_DELETE, offsets.offset_delete),
    serve("ConsumerGroupHeartbeat", consumer_groups.HEARTBEAT, consumer_groups.heartbeat),
    serve("ConsumerGroupDescribe", consumer_groups.DESCRIBE, consumer_groups.describe),
    serve("ShareGroupHeartbeat", share_groups.HEARTBEAT, share_groups.heartbeat),
    serve("ShareGroupDescribe", share_groups.DESCRIBE, share_groups.describe),
    serve("ShareFetch", share_fetch.FETCH, share_fetch.share_fetch),
    serve("ShareAcknowledge", share_fetch.ACKNOWLEDGE, share_fetch.share_acknowledge),
    serve("DescribeShareGroupOffsets", share_offsets.DESCRIBE_OFFSETS, share_offsets.describe_offsets),
    serve("AlterShareGroupOffsets", share_offsets.ALTER_OFFSETS, share_offsets.alter_offsets),
    serve("DeleteShareGroupOffsets", share_offsets.DELETE_OFFSETS, share_offsets.delete_offsets),
    serve("AddPartitionsToTxn", transactions.ADD_PARTITIONS_TO_TXN, transactions.add_partitions_to_txn),
    serve("AddOffsetsToTxn", transactions.ADD_OFFSETS_TO_TXN, transactions.add_offsets_to_txn),
    serve("EndTxn", transactions.END_TXN, transactions.end_txn),
    serve("TxnOffsetCommit", transactions.TXN_OFFSET_COMMIT, transactions.txn_offset_commit),
    serve("DescribeTransactions", transactions.DESCRIBE_TRANSACTIONS, transactions.describe_transactions),
    serve("ListTransactions", transactions.LIST_TRANSACTIONS, transactions.list_transactions),
    serve("WriteTxnMarkers", transactions.WRITE_TXN_MARKERS, transactions.write_txn_markers),
    serve("DescribeProducers", transactions.DESCRIBE_PRODUCERS, transactions.describe_producers),
    serve("SaslHandshake", sasl.HANDSHAKE, sasl.handshake),
    serve("SaslAuthenticate", sasl.AUTHENTICATE, sasl.authenticate),
    serve("DescribeAcls", acls.DESCRIBE_ACLS, acls.describe_acls),
    serve("CreateAcls", acls.CREATE_ACLS, acls.create_acls),
    serve("DeleteAcls", acls.DELETE_ACLS, acls.delete_acls),
    serve("DescribeUserScramCredentials", scram_users.DESCRIBE, scram_users.describe),
    serve("AlterUserScramCredentials", scram_users.ALTER, scram_users.alter),
    serve("DescribeClientQuotas", quotas.DESCRIBE, quotas.describe_client_quotas),
    serve("AlterClientQuotas", quotas.ALTER, quotas.alter_client_quotas),
]

# ApiVersions answers with this very list, its own entry included: its handler holds the
# list, which is complete before any request comes.
APIS: list[Api[Services]] = []
APIS.extend(
    sorted(
        [*_IMPLEMENTED, serve("ApiVersions", api_versions.MESSAGES, api_versions.make_handler(APIS))],
        key=lambda a: a.key,
    )
)
BY_KEY: dict[int, Api[Services]] = {a.key: a for a in APIS}
