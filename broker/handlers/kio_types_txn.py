"""kio's classes of the transaction APIs (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit, EndTxn, WriteTxnMarkers, DescribeProducers, DescribeTransactions,
ListTransactions): their unions, as broker/handlers/kio_types.py has every other API's, in a
module of their own so that neither file grows too long to read.  For type checking only, as
kio_types; tests/unit/test_handler_types.py checks both."""

from __future__ import annotations

from typing import TypeAlias

from kio.schema.add_offsets_to_txn import v0 as add_offsets_to_txn_v0
from kio.schema.add_offsets_to_txn import v1 as add_offsets_to_txn_v1
from kio.schema.add_offsets_to_txn import v2 as add_offsets_to_txn_v2
from kio.schema.add_offsets_to_txn import v3 as add_offsets_to_txn_v3
from kio.schema.add_offsets_to_txn import v4 as add_offsets_to_txn_v4
from kio.schema.add_partitions_to_txn import v0 as add_partitions_to_txn_v0
from kio.schema.add_partitions_to_txn import v1 as add_partitions_to_txn_v1
from kio.schema.add_partitions_to_txn import v2 as add_partitions_to_txn_v2
from kio.schema.add_partitions_to_txn import v3 as add_partitions_to_txn_v3
from kio.schema.add_partitions_to_txn import v4 as add_partitions_to_txn_v4
from kio.schema.add_partitions_to_txn import v5 as add_partitions_to_txn_v5
from kio.schema.describe_producers import v0 as describe_producers_v0
from kio.schema.describe_transactions import v0 as describe_transactions_v0
from kio.schema.end_txn import v0 as end_txn_v0
from kio.schema.end_txn import v1 as end_txn_v1
from kio.schema.end_txn import v2 as end_txn_v2
from kio.schema.end_txn import v3 as end_txn_v3
from kio.schema.end_txn import v4 as end_txn_v4
from kio.schema.end_txn import v5 as end_txn_v5
from kio.schema.init_producer_id import v0 as init_producer_id_v0
from kio.schema.init_producer_id import v1 as init_producer_id_v1
from kio.schema.init_producer_id import v2 as init_producer_id_v2
from kio.schema.init_producer_id import v3 as init_producer_id_v3
from kio.schema.init_producer_id import v4 as init_producer_id_v4
from kio.schema.init_producer_id import v5 as init_producer_id_v5
from kio.schema.list_transactions import v0 as list_transactions_v0
from kio.schema.list_transactions import v1 as list_transactions_v1
from kio.schema.list_transactions import v2 as list_transactions_v2
from kio.schema.txn_offset_commit import v0 as txn_offset_commit_v0
from kio.schema.txn_offset_commit import v1 as txn_offset_commit_v1
from kio.schema.txn_offset_commit import v2 as txn_offset_commit_v2
from kio.schema.txn_offset_commit import v3 as txn_offset_commit_v3
from kio.schema.txn_offset_commit import v4 as txn_offset_commit_v4
from kio.schema.txn_offset_commit import v5 as txn_offset_commit_v5
from kio.schema.write_txn_markers import v1 as write_txn_markers_v1

AddOffsetsToTxnRequest: TypeAlias = (
    add_offsets_to_txn_v0.AddOffsetsToTxnRequest
    | add_offsets_to_txn_v1.AddOffsetsToTxnRequest
    | add_offsets_to_txn_v2.AddOffsetsToTxnRequest
    | add_offsets_to_txn_v3.AddOffsetsToTxnRequest
    | add_offsets_to_txn_v4.AddOffsetsToTxnRequest
)
AddOffsetsToTxnResponse: TypeAlias = (
    add_offsets_to_txn_v0.AddOffsetsToTxnResponse
    | add_offsets_to_txn_v1.AddOffsetsToTxnResponse
    | add_offsets_to_txn_v2.AddOffsetsToTxnResponse
    | add_offsets_to_txn_v3.AddOffsetsToTxnResponse
    | add_offsets_to_txn_v4.AddOffsetsToTxnResponse
)
AddPartitionsToTxnRequest: TypeAlias = (
    add_partitions_to_txn_v0.AddPartitionsToTxnRequest
    | add_partitions_to_txn_v1.AddPartitionsToTxnRequest
    | add_partitions_to_txn_v2.AddPartitionsToTxnRequest
    | add_partitions_to_txn_v3.AddPartitionsToTxnRequest
    | add_partitions_to_txn_v4.AddPartitionsToTxnRequest
    | add_partitions_to_txn_v5.AddPartitionsToTxnRequest
)
AddPartitionsToTxnResponse: TypeAlias = (
    add_partitions_to_txn_v0.AddPartitionsToTxnResponse
    | add_partitions_to_txn_v1.AddPartitionsToTxnResponse
    | add_partitions_to_txn_v2.AddPartitionsToTxnResponse
    | add_partitions_to_txn_v3.AddPartitionsToTxnResponse
    | add_partitions_to_txn_v4.AddPartitionsToTxnResponse
    | add_partitions_to_txn_v5.AddPartitionsToTxnResponse
)
DescribeProducersRequest: TypeAlias = describe_producers_v0.DescribeProducersRequest
DescribeProducersResponse: TypeAlias = describe_producers_v0.DescribeProducersResponse
DescribeTransactionsRequest: TypeAlias = describe_transactions_v0.DescribeTransactionsRequest
DescribeTransactionsResponse: TypeAlias = describe_transactions_v0.DescribeTransactionsResponse
EndTxnRequest: TypeAlias = (
    end_txn_v0.EndTxnRequest
    | end_txn_v1.EndTxnRequest
    | end_txn_v2.EndTxnRequest
    | end_txn_v3.EndTxnRequest
    | end_txn_v4.EndTxnRequest
    | end_txn_v5.EndTxnRequest
)
EndTxnResponse: TypeAlias = (
    end_txn_v0.EndTxnResponse
    | end_txn_v1.EndTxnResponse
    | end_txn_v2.EndTxnResponse
    | end_txn_v3.EndTxnResponse
    | end_txn_v4.EndTxnResponse
    | end_txn_v5.EndTxnResponse
)
InitProducerIdRequest: TypeAlias = (
    init_producer_id_v0.InitProducerIdRequest
    | init_producer_id_v1.InitProducerIdRequest
    | init_producer_id_v2.InitProducerIdRequest
    | init_producer_id_v3.InitProducerIdRequest
    | init_producer_id_v4.InitProducerIdRequest
    | init_producer_id_v5.InitProducerIdRequest
)
InitProducerIdResponse: TypeAlias = (
    init_producer_id_v0.InitProducerIdResponse
    | init_producer_id_v1.InitProducerIdResponse
    | init_producer_id_v2.InitProducerIdResponse
    | init_producer_id_v3.InitProducerIdResponse
    | init_producer_id_v4.InitProducerIdResponse
    | init_producer_id_v5.InitProducerIdResponse
)
ListTransactionsRequest: TypeAlias = (
    list_transactions_v0.ListTransactionsRequest
    | list_transactions_v1.ListTransactionsRequest
    | list_transactions_v2.ListTransactionsRequest
)
ListTransactionsResponse: TypeAlias = (
    list_transactions_v0.ListTransactionsResponse
    | list_transactions_v1.ListTransactionsResponse
    | list_transactions_v2.ListTransactionsResponse
)
TxnOffsetCommitRequest: TypeAlias = (
    txn_offset_commit_v0.TxnOffsetCommitRequest
    | txn_offset_commit_v1.TxnOffsetCommitRequest
    | txn_offset_commit_v2.TxnOffsetCommitRequest
    | txn_offset_commit_v3.TxnOffsetCommitRequest
    | txn_offset_commit_v4.TxnOffsetCommitRequest
    | txn_offset_commit_v5.TxnOffsetCommitRequest
)
TxnOffsetCommitResponse: TypeAlias = (
    txn_offset_commit_v0.TxnOffsetCommitResponse
    | txn_offset_commit_v1.TxnOffsetCommitResponse
    | txn_offset_commit_v2.TxnOffsetCommitResponse
    | txn_offset_commit_v3.TxnOffsetCommitResponse
    | txn_offset_commit_v4.TxnOffsetCommitResponse
    | txn_offset_commit_v5.TxnOffsetCommitResponse
)
WriteTxnMarkersRequest: TypeAlias = write_txn_markers_v1.WriteTxnMarkersRequest
WriteTxnMarkersResponse: TypeAlias = write_txn_markers_v1.WriteTxnMarkersResponse
