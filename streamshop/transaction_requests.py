"""ListTransactions v0 and DescribeTransactions v0 as kio requests (streamshop/raw_requests.py
sends them), for `streamshop transactions`.

kio reads DescribeTransactions' start time as a timestamp, and a transaction that is not open
has none (-1): its answer would not be readable.  DescribeTransactions is therefore answered
into this module's copy of kio's response whose start time and timeout are the wire's plain
integers; the layout is Kafka's, unchanged.  The module does not postpone its annotations:
kio reads each field's type from the dataclass, not from a string.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.describe_transactions.v0.response import TopicData
from kio.schema.errors import ErrorCode
from kio.schema.list_transactions.v0.request import ListTransactionsRequest
from kio.schema.list_transactions.v0.response import ListTransactionsResponse
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.types import ProducerId, TransactionalId
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta, i64

from services.dashboard.kafka_requests import KioRequest

__all__ = ["DescribeTransactions", "DescribedTransaction", "describe_transactions", "error_name", "list_transactions"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedTransaction:
    """kio's DescribeTransactionsResponse v0 TransactionState, with integer times."""

    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(65)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    transactional_id: TransactionalId = field(metadata={"kafka_type": "string"})
    transaction_state: str = field(metadata={"kafka_type": "string"})
    transaction_timeout_ms: i32 = field(metadata={"kafka_type": "int32"})
    transaction_start_time_ms: i64 = field(metadata={"kafka_type": "int64"})  # -1: not started
    producer_id: ProducerId = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    topics: tuple[TopicData, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeTransactions:
    """kio's DescribeTransactionsResponse v0 with DescribedTransaction's states."""

    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(65)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    transaction_states: tuple[DescribedTransaction, ...]


def list_transactions(states: Iterable[str], producer_ids: Iterable[int]) -> KioRequest[ListTransactionsResponse]:
    """ListTransactions of the transactions in one of `states` by one of `producer_ids` (each
    empty: every one)."""
    return KioRequest(
        ListTransactionsRequest(
            state_filters=tuple(states), producer_id_filters=tuple(ProducerId(p) for p in producer_ids)
        ),
        ListTransactionsResponse,
    )


def describe_transactions(transactional_ids: Iterable[str]) -> KioRequest[DescribeTransactions]:
    return KioRequest(
        DescribeTransactionsRequest(transactional_ids=tuple(TransactionalId(t) for t in transactional_ids)),
        DescribeTransactions,
    )


def error_name(code: int) -> str:
    """Kafka's error class name of `code` (105: TransactionalIdNotFoundError)."""
    try:
        name = ErrorCode(code).name
    except ValueError:
        return "UnknownServerError"
    return "".join(part.capitalize() for part in name.split("_")) + "Error"
