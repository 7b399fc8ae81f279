"""The transaction APIs: InitProducerId (with a transactional id), AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn, DescribeTransactions and ListTransactions.  The
protocol glue and Kafka's ACL checks live here; the behaviour in broker/txn."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

import re2
from kio.static.protocol import Entity

from broker.clock import Clock
from broker.cooperative import STEP, WorkSteps
from broker.handlers.base import Answer, Messages, RequestContext, Serial
from broker.handlers.services import (
    AppendNotices,
    HasGroupCoordinator,
    HasSecurity,
    HasStore,
    HasTransactions,
    LogDurability,
)
from broker.handlers.stepped import Steps, at_once, in_steps, stepped
from broker.handlers.topics_seen import TopicsSeen
from broker.metadata import INTERNAL_TOPICS
from broker.protocol.codec import build, ms_to_datetime, nested
from broker.protocol.control import ControlType
from broker.protocol.errors import ErrorCode, KafkaError
from broker.security.acls import Operation, ResourceType
from broker.txn.state import PendingOffsets, TxnMetadata, TxnState

if TYPE_CHECKING:
    from kio.schema.add_partitions_to_txn import v4 as add_partitions_to_txn_v4
    from kio.schema.add_partitions_to_txn import v5 as add_partitions_to_txn_v5
    from kio.schema.end_txn import v5 as end_txn_v5
    from kio.schema.init_producer_id import v3 as init_producer_id_v3
    from kio.schema.init_producer_id import v4 as init_producer_id_v4
    from kio.schema.init_producer_id import v5 as init_producer_id_v5
    from kio.schema.list_transactions import v1 as list_transactions_v1
    from kio.schema.list_transactions import v2 as list_transactions_v2
    from kio.schema.txn_offset_commit import v2 as txn_offset_commit_v2
    from kio.schema.txn_offset_commit import v3 as txn_offset_commit_v3
    from kio.schema.txn_offset_commit import v4 as txn_offset_commit_v4
    from kio.schema.txn_offset_commit import v5 as txn_offset_commit_v5
    from typing_extensions import TypeIs

    from broker.handlers.kio_types_txn import (
        AddOffsetsToTxnRequest,
        AddOffsetsToTxnResponse,
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnResponse,
        DescribeProducersRequest,
        DescribeProducersResponse,
        DescribeTransactionsRequest,
        DescribeTransactionsResponse,
        EndTxnRequest,
        EndTxnResponse,
        InitProducerIdRequest,
        InitProducerIdResponse,
        ListTransactionsRequest,
        ListTransactionsResponse,
        TxnOffsetCommitRequest,
        TxnOffsetCommitResponse,
        WriteTxnMarkersRequest,
        WriteTxnMarkersResponse,
    )

T = TypeVar("T")

INIT_PRODUCER_ID: Messages[InitProducerIdRequest, InitProducerIdResponse] = Messages(22, 0, 5)
ADD_PARTITIONS_TO_TXN: Messages[AddPartitionsToTxnRequest, AddPartitionsToTxnResponse] = Messages(24, 0, 5)
ADD_OFFSETS_TO_TXN: Messages[AddOffsetsToTxnRequest, AddOffsetsToTxnResponse] = Messages(25, 0, 4)
END_TXN: Messages[EndTxnRequest, EndTxnResponse] = Messages(26, 0, 5)
WRITE_TXN_MARKERS: Messages[WriteTxnMarkersRequest, WriteTxnMarkersResponse] = Messages(27, 1, 1)
TXN_OFFSET_COMMIT: Messages[TxnOffsetCommitRequest, TxnOffsetCommitResponse] = Messages(28, 0, 5)
DESCRIBE_PRODUCERS: Messages[DescribeProducersRequest, DescribeProducersResponse] = Messages(61, 0, 0)
DESCRIBE_TRANSACTIONS: Messages[DescribeTransactionsRequest, DescribeTransactionsResponse] = Messages(65, 0, 0)
LIST_TRANSACTIONS: Messages[ListTransactionsRequest, ListTransactionsResponse] = Messages(66, 0, 2)

# Fields some versions lack: each guard narrows a request to the versions that have them
# (kio's class of a version carries its number, `__version__`).


class TransactionsBroker(
    HasSecurity, HasStore, HasGroupCoordinator, HasTransactions, LogDurability, AppendNotices, Protocol
):
    """What the transaction requests use of the broker."""

    @property
    def clock(self) -> Clock: ...


def _resumes_producer(
    request: InitProducerIdRequest,
) -> TypeIs[
    init_producer_id_v3.InitProducerIdRequest
    | init_producer_id_v4.InitProducerIdRequest
    | init_producer_id_v5.InitProducerIdRequest
]:
    return request.__version__ >= 3  # KIP-360: the producer id and epoch it had


def _batched(
    request: AddPartitionsToTxnRequest,
) -> TypeIs[add_partitions_to_txn_v4.AddPartitionsToTxnRequest | add_partitions_to_txn_v5.AddPartitionsToTxnRequest]:
    return request.__version__ >= 4  # KIP-890: several transactions, from brokers


def _with_leader_epochs(
    request: TxnOffsetCommitRequest,
) -> TypeIs[
    txn_offset_commit_v2.TxnOffsetCommitRequest
    | txn_offset_commit_v3.TxnOffsetCommitRequest
    | txn_offset_commit_v4.TxnOffsetCommitRequest
    | txn_offset_commit_v5.TxnOffsetCommitRequest
]:
    return request.__version__ >= 2


def _from_member(
    request: TxnOffsetCommitRequest,
) -> TypeIs[
    txn_offset_commit_v3.TxnOffsetCommitRequest
    | txn_offset_commit_v4.TxnOffsetCommitRequest
    | txn_offset_commit_v5.TxnOffsetCommitRequest
]:
    return request.__version__ >= 3  # KIP-447: the group member's generation


def _bumps_epoch(request: EndTxnRequest) -> TypeIs[end_txn_v5.EndTxnRequest]:
    return request.__version__ >= 5  # transactions v2 (KIP-890)


def _with_duration(
    request: ListTransactionsRequest,
) -> TypeIs[list_transactions_v1.ListTransactionsRequest | list_transactions_v2.ListTransactionsRequest]:
    return request.__version__ >= 1  # KIP-994


def _with_pattern(request: ListTransactionsRequest) -> TypeIs[list_transactions_v2.ListTransactionsRequest]:
    return request.__version__ >= 2  # KIP-1152


class _Topic(Protocol):
    """A topic and partitions to add to a transaction, in any version's request."""

    @property
    def name(self) -> str: ...

    @property
    def partitions(self) -> Sequence[int]: ...


def _may(broker: TransactionsBroker, ctx: RequestContext, op: Operation, transactional_id: str) -> bool:
    return broker.security.allowed(ctx.session, op, ResourceType.TRANSACTIONAL_ID, transactional_id)


def _fenced(code: ErrorCode, version: int) -> ErrorCode:
    """A stale epoch is PRODUCER_FENCED from v2 of AddPartitionsToTxn, AddOffsetsToTxn and EndTxn
    (KIP-588), INVALID_PRODUCER_EPOCH before, as Kafka answers."""
    return ErrorCode.invalid_producer_epoch if code == ErrorCode.producer_fenced and version < 2 else code


async def _outcome(work: Awaitable[object]) -> ErrorCode:
    try:
        await work
    except KafkaError as e:
        return e.code
    return ErrorCode.none


# --- InitProducerId ------------------------------------------------------------------


def init_transactional(
    broker: TransactionsBroker, ctx: RequestContext, request: InitProducerIdRequest
) -> Answer[InitProducerIdResponse]:
    cls = INIT_PRODUCER_ID.response(ctx.api_version)

    def respond(error: ErrorCode, producer_id: int = -1, epoch: int = -1) -> InitProducerIdResponse:
        return build(cls, throttle_time=0, error_code=error, producer_id=producer_id, producer_epoch=epoch)

    transactional_id = request.transactional_id
    assert transactional_id is not None  # InitProducerId without one is cluster.init_producer_id's
    if not _may(broker, ctx, Operation.WRITE, transactional_id):
        return respond(ErrorCode.transactional_id_authorization_failed)
    previous = (request.producer_id, request.producer_epoch) if _resumes_producer(request) else (-1, -1)

    async def init() -> InitProducerIdResponse:
        try:
            pid, epoch = await broker.transactions.init_producer_id(
                transactional_id, int(request.transaction_timeout.total_seconds() * 1000), *previous
            )
        except KafkaError as e:
            return respond(e.code)
        return respond(ErrorCode.none, pid, epoch)

    return init()


def _answered(response: Steps[T], many: bool) -> Answer[T]:
    """A response built now, or a step of entries at a time for a request of many."""
    return in_steps(response) if many else at_once(response)


def _entries(request: AddPartitionsToTxnRequest) -> int:
    if not _batched(request):
        return sum(1 + len(t.partitions) for t in request.v3_and_below_topics)
    return sum(1 + len(t.topics) + sum(len(x.partitions) for x in t.topics) for t in request.transactions)


# --- AddPartitionsToTxn --------------------------------------------------------------


def add_partitions_to_txn(
    broker: TransactionsBroker, ctx: RequestContext, request: AddPartitionsToTxnRequest
) -> Answer[AddPartitionsToTxnResponse] | Serial:
    """Served a step of partitions at a time (a request may name 100,000): the checks of the
    topics, then the transaction's change in one step under its lock (so an EndTxn of the
    same producer sees all the partitions added or none), then the answer."""
    cls = ADD_PARTITIONS_TO_TXN.response(ctx.api_version)
    topic_cls = nested(cls, "AddPartitionsToTxnTopicResult")
    part_cls = nested(cls, "AddPartitionsToTxnPartitionResult")
    steps = WorkSteps()

    async def topic_results(errors: dict[str, dict[int, ErrorCode]]) -> tuple[Entity, ...]:
        topics = []
        for name, parts in errors.items():
            results = []
            for p, e in parts.items():
                results.append(build(part_cls, partition_index=p, partition_error_code=e))
                await steps.done()
            topics.append(build(topic_cls, name=name, results_by_partition=tuple(results)))
            await steps.done()
        return tuple(topics)

    async def one(
        transactional_id: str, producer_id: int, epoch: int, topics: Sequence[_Topic], verify_only: bool
    ) -> tuple[Entity, ...]:
        wanted = {t.name: list(t.partitions) for t in topics}  # a topic named twice: its last entry
        errors: dict[str, dict[int, ErrorCode]] = {n: {} for n in wanted}
        refused = False
        for name, partitions in wanted.items():
            await steps.done()
            writable = broker.security.topic(ctx.session, Operation.WRITE, name)
            for p in partitions:
                await steps.done()
                if not writable:
                    errors[name][p] = ErrorCode.topic_authorization_failed
                elif broker.store.partition_log(name, p) is None or name in INTERNAL_TOPICS:
                    errors[name][p] = ErrorCode.unknown_topic_or_partition
                else:
                    continue
                refused = True
        verified: dict[tuple[str, int], ErrorCode] = {}
        if not _may(broker, ctx, Operation.WRITE, transactional_id):
            error = ErrorCode.transactional_id_authorization_failed
        elif refused:
            error = ErrorCode.operation_not_attempted
        elif verify_only:  # whether each partition is in the transaction; not one is added
            tps = [(n, p) for n, ps in wanted.items() for p in ps]
            try:
                verified, error = broker.transactions.verify(transactional_id, producer_id, epoch, tps), ErrorCode.none
            except KafkaError as e:
                error = e.code
        else:
            tps = [(n, p) for n, ps in wanted.items() for p in ps]
            work = broker.transactions.add_partitions(transactional_id, producer_id, epoch, tps)
            error = _fenced(await _outcome(work), ctx.api_version)
        for name, partitions in wanted.items():
            for p in partitions:
                errors[name].setdefault(p, verified.get((name, p), error))
        return await topic_results(errors)

    async def answer() -> AddPartitionsToTxnResponse:
        if not _batched(request):
            results = await one(
                request.v3_and_below_transactional_id,
                request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch,
                request.v3_and_below_topics,
                False,
            )
            return build(cls, throttle_time=0, results_by_topic_v3_and_below=results)
        # v4+: the batched form brokers use to verify (KIP-890); Kafka requires CLUSTER_ACTION.
        result_cls = nested(cls, "AddPartitionsToTxnResult")
        if not broker.security.cluster(ctx.session, Operation.CLUSTER_ACTION):
            return build(
                cls, throttle_time=0, error_code=ErrorCode.cluster_authorization_failed, results_by_transaction=()
            )
        out = []
        for txn in request.transactions:
            results = await one(txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics, txn.verify_only)
            out.append(build(result_cls, transactional_id=txn.transactional_id, topic_results=results))
            await steps.done()
        return build(cls, throttle_time=0, error_code=ErrorCode.none, results_by_transaction=tuple(out))

    # Many entries: answered before the connection's next request is dispatched, which the
    # steps would otherwise let run first.
    return Serial(answer()) if _entries(request) > STEP else answer()


# --- AddOffsetsToTxn / TxnOffsetCommit -----------------------------------------------

_Resp = TypeVar("_Resp", bound=Entity)


def _error_only(
    cls: type[_Resp], refused: ErrorCode | None, work: Callable[[], Awaitable[None]], version: int
) -> Answer[_Resp]:
    """The answer of an API whose response is one error code: `refused` at once, or `work`'s outcome."""
    if refused is not None:
        return build(cls, throttle_time=0, error_code=refused)

    async def run() -> _Resp:
        return build(cls, throttle_time=0, error_code=_fenced(await _outcome(work()), version))

    return run()


def add_offsets_to_txn(
    broker: TransactionsBroker, ctx: RequestContext, request: AddOffsetsToTxnRequest
) -> Answer[AddOffsetsToTxnResponse]:
    refused = None
    if not _may(broker, ctx, Operation.WRITE, request.transactional_id):
        refused = ErrorCode.transactional_id_authorization_failed
    elif not request.group_id:
        refused = ErrorCode.invalid_group_id
    elif not broker.security.group(ctx.session, Operation.READ, request.group_id):
        refused = ErrorCode.group_authorization_failed
    return _error_only(
        ADD_OFFSETS_TO_TXN.response(ctx.api_version),
        refused,
        lambda: broker.transactions.add_offsets(
            request.transactional_id, request.producer_id, request.producer_epoch, request.group_id
        ),
        ctx.api_version,
    )


def _member_error(broker: TransactionsBroker, request: TxnOffsetCommitRequest) -> ErrorCode:
    """KIP-447: a member commits for its generation, which must be the group's."""
    if not _from_member(request):
        return ErrorCode.none
    generation, member_id = request.generation_id, request.member_id or ""
    if generation < 0 and not member_id:
        return ErrorCode.none
    try:
        broker.coordinator.validate_commit(request.group_id, generation, member_id, request.group_instance_id)
    except KafkaError as e:
        return e.code
    return ErrorCode.none


def txn_offset_commit(
    broker: TransactionsBroker, ctx: RequestContext, request: TxnOffsetCommitRequest
) -> Answer[TxnOffsetCommitResponse] | Serial:
    """Checked and answered a step of partitions at a time; the offsets join the transaction
    in one step under its lock."""
    cls = TXN_OFFSET_COMMIT.response(ctx.api_version)
    topic_cls = nested(cls, "TxnOffsetCommitResponseTopic")
    part_cls = nested(cls, "TxnOffsetCommitResponsePartition")
    group_id = request.group_id
    top = ErrorCode.none
    if not _may(broker, ctx, Operation.WRITE, request.transactional_id):
        top = ErrorCode.transactional_id_authorization_failed
    elif not group_id:
        top = ErrorCode.invalid_group_id
    elif not broker.security.group(ctx.session, Operation.READ, group_id):
        top = ErrorCode.group_authorization_failed
    else:
        top = _member_error(broker, request)
    with_epochs = _with_leader_epochs(request)  # v2+ carries the leader epoch each offset was read at
    limit = broker.coordinator.config.max_metadata_bytes
    errors: dict[str, dict[int, ErrorCode]] = {}
    accepted: PendingOffsets = {}
    checked = TopicsSeen(broker)
    entries = sum(1 + len(t.partitions) for t in request.topics)
    many = entries > STEP

    def check() -> Steps[Answer[TxnOffsetCommitResponse]]:
        for topic in request.topics:
            yield
            parts = errors.setdefault(topic.name, {})
            readable = broker.security.topic(ctx.session, Operation.READ, topic.name)
            checked.see(topic.name)
            for p in topic.partitions:
                yield
                metadata = p.committed_metadata or ""
                if top != ErrorCode.none:
                    parts[p.partition_index] = top
                elif not readable:
                    parts[p.partition_index] = ErrorCode.topic_authorization_failed
                elif broker.store.partition_log(topic.name, p.partition_index) is None:
                    parts[p.partition_index] = ErrorCode.unknown_topic_or_partition
                elif len(metadata.encode()) > limit:
                    parts[p.partition_index] = ErrorCode.offset_metadata_too_large
                else:
                    epoch = int(getattr(p, "committed_leader_epoch", -1)) if with_epochs else -1
                    accepted[(topic.name, p.partition_index)] = (p.committed_offset, epoch, metadata)
        if accepted:
            return commit()
        return _answered(respond(), many)

    def respond() -> Steps[TxnOffsetCommitResponse]:
        topics = []
        for name, parts in errors.items():
            results = []
            for i, e in parts.items():
                results.append(build(part_cls, partition_index=i, error_code=e))
                yield
            topics.append(build(topic_cls, name=name, partitions=tuple(results)))
            yield
        return build(cls, throttle_time=0, topics=tuple(topics))

    async def commit() -> TxnOffsetCommitResponse:
        for t, p in checked.gone(accepted):  # deleted while the request was checked
            del accepted[(t, p)]
            errors[t][p] = ErrorCode.unknown_topic_or_partition
        # The group may have moved to another generation while the request was checked.
        error = _member_error(broker, request) if many else ErrorCode.none
        if accepted and error == ErrorCode.none:
            error = await _outcome(
                broker.transactions.commit_offsets(
                    request.transactional_id,
                    request.producer_id,
                    request.producer_epoch,
                    group_id,
                    accepted,
                    add_group=request.__version__ >= 5,  # transactions v2: no AddOffsetsToTxn before
                )
            )
        if error == ErrorCode.producer_fenced:  # Kafka's group coordinator says it so, in every version
            error = ErrorCode.invalid_producer_epoch
        for t, p in accepted:
            errors[t][p] = error
        return await in_steps(respond()) if many else at_once(respond())

    return stepped(check(), entries)


# --- EndTxn --------------------------------------------------------------------------


def end_txn(broker: TransactionsBroker, ctx: RequestContext, request: EndTxnRequest) -> Answer[EndTxnResponse]:
    """v5+ is transactions v2: the end bumps the epoch, and the answer carries the producer id
    and epoch to go on with (-1 and -1 with an error)."""
    cls = END_TXN.response(ctx.api_version)

    def respond(error: ErrorCode, producer_id: int = -1, epoch: int = -1) -> EndTxnResponse:
        return build(cls, throttle_time=0, error_code=error, producer_id=producer_id, producer_epoch=epoch)

    if not _may(broker, ctx, Operation.WRITE, request.transactional_id):
        return respond(ErrorCode.transactional_id_authorization_failed)

    async def end() -> EndTxnResponse:
        try:
            producer_id, epoch = await broker.transactions.end_transaction(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                request.committed,
                bump=_bumps_epoch(request),
            )
        except KafkaError as e:
            return respond(_fenced(e.code, ctx.api_version))
        return respond(ErrorCode.none, producer_id, epoch)

    return end()


# --- DescribeTransactions / ListTransactions -----------------------------------------

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a client's bad pattern is its error, not a line in the broker's log


def describe_transactions(
    broker: TransactionsBroker, ctx: RequestContext, request: DescribeTransactionsRequest
) -> DescribeTransactionsResponse:
    cls = DESCRIBE_TRANSACTIONS.response(ctx.api_version)
    state_cls = nested(cls, "TransactionState")
    topic_cls = nested(cls, "TopicData")
    states = []
    for transactional_id in request.transactional_ids:
        meta = broker.transactions.txns.get(transactional_id)
        error = ErrorCode.none
        if not _may(broker, ctx, Operation.DESCRIBE, transactional_id):
            error, meta = ErrorCode.transactional_id_authorization_failed, None
        elif meta is None:
            error = ErrorCode.transactional_id_not_found
        topics: dict[str, list[int]] = {}
        for t, p in sorted(meta.partitions if meta else ()):
            if broker.security.topic(ctx.session, Operation.DESCRIBE, t):
                topics.setdefault(t, []).append(p)
        states.append(
            build(
                state_cls,
                error_code=error,
                transactional_id=transactional_id,
                transaction_state=meta.state.value if meta else "",
                transaction_timeout=meta.timeout_ms if meta else 0,
                # -1 (none) as a datetime: `build` would make a negative int None, which this
                # non-nullable field cannot carry.
                transaction_start_time=ms_to_datetime(meta.start_ms if meta else -1),
                producer_id=meta.producer_id if meta else -1,
                producer_epoch=meta.producer_epoch if meta else -1,
                topics=tuple(build(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in topics.items()),
            )
        )
    return build(cls, throttle_time=0, transaction_states=tuple(states))


def list_transactions(
    broker: TransactionsBroker, ctx: RequestContext, request: ListTransactionsRequest
) -> ListTransactionsResponse:
    cls = LIST_TRANSACTIONS.response(ctx.api_version)
    state_cls = nested(cls, "TransactionState")
    known = {s.value for s in TxnState}
    wanted = set(request.state_filters)
    pids = set(request.producer_id_filters)
    min_duration = request.duration_filter if _with_duration(request) else -1
    pattern = request.transactional_id_pattern if _with_pattern(request) else None
    now = broker.clock.now_ms()
    regex = None
    if pattern:  # null or empty: every id
        # As Kafka: RE2 syntax (Kafka's is RE2/J), matching the whole id; a bad pattern is the
        # request's error, with nothing listed.
        try:
            regex = re2.compile(pattern, options=_RE2_OPTIONS)
        except re2.error:
            return build(
                cls,
                throttle_time=0,
                error_code=ErrorCode.invalid_regular_expression,
                unknown_state_filters=(),
                transaction_states=(),
            )

    def keep(m: TxnMetadata) -> bool:
        return (
            (not wanted or m.state.value in wanted)
            and (not pids or m.producer_id in pids)
            and (min_duration < 0 or (m.start_ms >= 0 and now - m.start_ms >= min_duration))
            and (regex is None or regex.fullmatch(m.transactional_id) is not None)
        )

    states = tuple(
        build(
            state_cls, transactional_id=m.transactional_id, producer_id=m.producer_id, transaction_state=m.state.value
        )
        for m in sorted(broker.transactions.txns.values(), key=lambda m: m.transactional_id)
        if keep(m) and _may(broker, ctx, Operation.DESCRIBE, m.transactional_id)
    )
    return build(
        cls,
        throttle_time=0,
        error_code=ErrorCode.none,
        unknown_state_filters=tuple(sorted(wanted - known)),
        transaction_states=states,
    )


# --- DescribeProducers / WriteTxnMarkers (kafka-transactions find-hanging and abort) -------


def describe_producers(
    broker: TransactionsBroker, ctx: RequestContext, request: DescribeProducersRequest
) -> DescribeProducersResponse:
    """Each partition's active producers: epoch, last sequence and timestamp, and the first
    offset of the transaction each has open there (what reveals a hanging transaction)."""
    cls = DESCRIBE_PRODUCERS.response(ctx.api_version)
    topic_cls, part_cls, state_cls = (nested(cls, n) for n in ("TopicResponse", "PartitionResponse", "ProducerState"))
    topics = []
    for topic in request.topics:
        readable = broker.security.topic(ctx.session, Operation.READ, topic.name)
        parts = []
        for index in topic.partition_indexes:
            plog = broker.store.partition_log(topic.name, index) if readable else None
            error = ErrorCode.none
            if not readable:
                error = ErrorCode.topic_authorization_failed
            elif plog is None:
                error = ErrorCode.unknown_topic_or_partition
            producers = sorted(plog.producer_state.producers.items()) if plog is not None else []
            parts.append(
                build(
                    part_cls,
                    partition_index=index,
                    error_code=error,
                    error_message=None,
                    active_producers=tuple(
                        build(
                            state_cls,
                            producer_id=pid,
                            producer_epoch=entry.epoch,
                            last_sequence=entry.last_seq,
                            last_timestamp=entry.last_timestamp,
                            coordinator_epoch=-1,
                            current_txn_start_offset=-1 if entry.txn_first_offset is None else entry.txn_first_offset,
                        )
                        for pid, entry in producers
                    ),
                )
            )
        topics.append(build(topic_cls, name=topic.name, partitions=tuple(parts)))
    return build(cls, throttle_time=0, topics=tuple(topics))


def write_txn_markers(
    broker: TransactionsBroker, ctx: RequestContext, request: WriteTxnMarkersRequest
) -> Answer[WriteTxnMarkersResponse] | Serial:
    """Markers written on request: Kafka's inter-broker call, which its admin client also uses
    to abort a hanging transaction partition by partition (`kafka-transactions abort`).  Each
    partition's marker is its own step (Kafka writes them partition by partition too)."""
    cls = WRITE_TXN_MARKERS.response(ctx.api_version)
    result_cls, topic_cls, part_cls = (
        nested(cls, n)
        for n in ("WritableTxnMarkerResult", "WritableTxnMarkerTopicResult", "WritableTxnMarkerPartitionResult")
    )
    allowed = broker.security.cluster(ctx.session, Operation.CLUSTER_ACTION)

    def write() -> Steps[Answer[WriteTxnMarkersResponse]]:
        touched = []
        results = []
        for marker in request.markers:
            yield
            control = ControlType.COMMIT if marker.transaction_result else ControlType.ABORT
            topics = []
            for topic in marker.topics:
                yield
                parts = []
                for index in topic.partition_indexes:
                    yield
                    plog = broker.store.partition_log(topic.name, index)
                    error = ErrorCode.none
                    if not allowed:
                        error = ErrorCode.cluster_authorization_failed
                    elif plog is None or topic.name in INTERNAL_TOPICS:
                        error = ErrorCode.unknown_topic_or_partition
                    else:
                        try:
                            written = plog.append_marker(
                                marker.producer_id,
                                marker.producer_epoch,
                                control,
                                coordinator_epoch=marker.coordinator_epoch,
                            )
                            broker.notify_append(plog, written.last_offset - written.base_offset + 1)
                            touched.append(plog)
                        except KafkaError as e:
                            error = e.code
                    parts.append(build(part_cls, partition_index=index, error_code=error))
                topics.append(build(topic_cls, name=topic.name, partitions=tuple(parts)))
            results.append(build(result_cls, producer_id=marker.producer_id, topics=tuple(topics)))
        response = build(cls, markers=tuple(results))
        if not touched:
            return response

        async def durable() -> WriteTxnMarkersResponse:
            await broker.sync(touched)
            return response

        return durable()

    entries = sum(1 + len(m.topics) + sum(len(t.partition_indexes) for t in m.topics) for m in request.markers)
    return stepped(write(), entries)
