"""The API table: every request the broker implements, with the versions it speaks.
ApiVersions advertises exactly this list."""

from __future__ import annotations

from broker.handlers import (
    acls,
    api_versions,
    cluster,
    configs,
    fetch,
    groups,
    list_offsets,
    log_dirs,
    metadata,
    produce,
    records,
    sasl,
    scram_users,
    topics,
    transactions,
)
from broker.handlers.base import Api

_IMPLEMENTED = [
    Api(produce.API_KEY, "Produce", produce.MIN_VERSION, produce.MAX_VERSION, produce.handle),
    Api(fetch.API_KEY, "Fetch", fetch.MIN_VERSION, fetch.MAX_VERSION, fetch.handle),
    Api(list_offsets.API_KEY, "ListOffsets", list_offsets.MIN_VERSION, list_offsets.MAX_VERSION, list_offsets.handle),
    Api(metadata.API_KEY, "Metadata", metadata.MIN_VERSION, metadata.MAX_VERSION, metadata.handle),
    Api(cluster.INIT_PRODUCER_ID, "InitProducerId", 0, 5, cluster.init_producer_id),
    Api(topics.CREATE_TOPICS, "CreateTopics", 2, 7, topics.create_topics),
    Api(topics.DELETE_TOPICS, "DeleteTopics", 1, 6, topics.delete_topics),
    Api(records.API_KEY, "DeleteRecords", records.MIN_VERSION, records.MAX_VERSION, records.handle),
    Api(configs.DESCRIBE_CONFIGS, "DescribeConfigs", 1, 4, configs.describe_configs),
    Api(topics.CREATE_PARTITIONS, "CreatePartitions", 0, 3, topics.create_partitions),
    Api(configs.ALTER_CONFIGS, "AlterConfigs", 0, 2, configs.alter_configs),
    Api(configs.INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigs", 0, 1, configs.incremental_alter_configs),
    Api(cluster.DESCRIBE_CLUSTER, "DescribeCluster", 0, 1, cluster.describe_cluster),
    Api(log_dirs.API_KEY, "DescribeLogDirs", log_dirs.MIN_VERSION, log_dirs.MAX_VERSION, log_dirs.handle),
    Api(groups.FIND_COORDINATOR, "FindCoordinator", 0, 6, groups.find_coordinator),
    Api(groups.JOIN_GROUP, "JoinGroup", 0, 9, groups.join_group),
    Api(groups.SYNC_GROUP, "SyncGroup", 0, 5, groups.sync_group),
    Api(groups.HEARTBEAT, "Heartbeat", 0, 4, groups.heartbeat),
    Api(groups.LEAVE_GROUP, "LeaveGroup", 0, 5, groups.leave_group),
    Api(groups.OFFSET_COMMIT, "OffsetCommit", 2, 9, groups.offset_commit),
    Api(groups.OFFSET_FETCH, "OffsetFetch", 1, 9, groups.offset_fetch),
    Api(groups.LIST_GROUPS, "ListGroups", 0, 5, groups.list_groups),
    Api(groups.DESCRIBE_GROUPS, "DescribeGroups", 0, 5, groups.describe_groups),
    Api(groups.DELETE_GROUPS, "DeleteGroups", 0, 2, groups.delete_groups),
    Api(groups.OFFSET_DELETE, "OffsetDelete", 0, 0, groups.offset_delete),
    Api(transactions.ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn", 0, 4, transactions.add_partitions_to_txn),
    Api(transactions.ADD_OFFSETS_TO_TXN, "AddOffsetsToTxn", 0, 4, transactions.add_offsets_to_txn),
    Api(transactions.END_TXN, "EndTxn", 0, 4, transactions.end_txn),
    Api(transactions.TXN_OFFSET_COMMIT, "TxnOffsetCommit", 0, 4, transactions.txn_offset_commit),
    Api(transactions.DESCRIBE_TRANSACTIONS, "DescribeTransactions", 0, 0, transactions.describe_transactions),
    Api(transactions.LIST_TRANSACTIONS, "ListTransactions", 0, 1, transactions.list_transactions),
    Api(transactions.WRITE_TXN_MARKERS, "WriteTxnMarkers", 1, 1, transactions.write_txn_markers),
    Api(transactions.DESCRIBE_PRODUCERS, "DescribeProducers", 0, 0, transactions.describe_producers),
    Api(sasl.HANDSHAKE, "SaslHandshake", 1, 1, sasl.handshake),
    Api(sasl.AUTHENTICATE, "SaslAuthenticate", 0, 2, sasl.authenticate),
    Api(acls.DESCRIBE_ACLS, "DescribeAcls", 1, 3, acls.describe_acls),
    Api(acls.CREATE_ACLS, "CreateAcls", 1, 3, acls.create_acls),
    Api(acls.DELETE_ACLS, "DeleteAcls", 1, 3, acls.delete_acls),
    Api(scram_users.DESCRIBE, "DescribeUserScramCredentials", 0, 0, scram_users.describe),
    Api(scram_users.ALTER, "AlterUserScramCredentials", 0, 0, scram_users.alter),
    Api(scram_users.DESCRIBE_CLIENT_QUOTAS, "DescribeClientQuotas", 0, 1, scram_users.describe_client_quotas),
]

_VERSIONS_ENTRY = Api(
    api_versions.API_KEY, "ApiVersions", api_versions.MIN_VERSION, api_versions.MAX_VERSION, lambda b, h, r: None
)
# ApiVersions answers with this very list; its handler only reads keys and versions.
APIS: list[Api] = sorted([*_IMPLEMENTED, _VERSIONS_ENTRY], key=lambda a: a.key)
APIS[APIS.index(_VERSIONS_ENTRY)] = Api(
    _VERSIONS_ENTRY.key,
    _VERSIONS_ENTRY.name,
    _VERSIONS_ENTRY.min_version,
    _VERSIONS_ENTRY.max_version,
    api_versions.make_handler(APIS),
)
BY_KEY: dict[int, Api] = {a.key: a for a in APIS}
