"""Produce: validate and append each partition's batch; acks decide when we answer.

acks=0  no response (the connection is closed if anything failed, as Kafka does);
acks=1  answer once the batch reached the OS (os.write returned);
acks=-1 answer once the batch is fsynced, through the group-commit flusher.

A transactional batch is taken only for a partition of its producer's ongoing transaction
(Kafka's verification, KIP-890); from v12 (transactions v2) the partition joins the
transaction here, as AddPartitionsToTxn would have.  From v13 (KIP-516) topics are named by
id: an id the broker does not know (the zero id included) is UNKNOWN_TOPIC_ID for each of its
partitions, before any other check, as Kafka.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections import Counter
from collections.abc import Coroutine, Iterator, Sequence
from concurrent.futures import Executor
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import structlog

from broker.cooperative import STEP, pause
from broker.handlers.base import CLOSE_CONNECTION, NO_RESPONSE, Answer, Messages, RequestContext, Serial, Signal
from broker.handlers.services import (
    AppendNotices,
    HasConfig,
    HasMetrics,
    HasSecurity,
    HasStore,
    HasTransactions,
    LogDurability,
)
from broker.log.partition_log import OpenedBatch, PartitionLog
from broker.log.validator import PayloadTooLarge
from broker.metadata import INTERNAL_TOPICS
from broker.protocol.batch import InvalidBatch, split_batches
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.fetch_codec import RawResponse
from broker.protocol.produce_codec import encode_produce_response
from broker.security.acls import Operation, ResourceType

if TYPE_CHECKING:
    from kio.schema.produce import v13 as produce_v13
    from typing_extensions import TypeIs

    from broker.handlers.kio_types import ProduceRequest, ProduceResponse

API_KEY = 0
MIN_VERSION, MAX_VERSION = 3, 13
MESSAGES: Messages[ProduceRequest, ProduceResponse] = Messages(API_KEY, MIN_VERSION, MAX_VERSION)

log = structlog.get_logger(__name__)


class ProduceBroker(
    HasSecurity, HasStore, HasConfig, HasMetrics, HasTransactions, LogDurability, AppendNotices, Protocol
):
    """What Produce uses of the broker."""

    @property
    def workers(self) -> Executor: ...

    def answers_wait(self) -> bool: ...


class _Outcome:
    __slots__ = (
        "base_offset",
        "batch",
        "error",
        "log_append_time",
        "log_start_offset",
        "message",
        "opened",
        "partition",
        "plog",
    )

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.error = ErrorCode.none
        self.message: str | None = None
        self.base_offset = -1
        self.log_append_time = -1
        self.log_start_offset = -1
        self.plog: PartitionLog | None = None
        self.batch: memoryview | None = None
        self.opened: OpenedBatch | None = None

    def fail(self, error: KafkaError) -> None:
        self.error, self.message = error.code, error.message


class _PartitionData(Protocol):
    """A partition's batch, in any version's request."""

    @property
    def index(self) -> int: ...

    @property
    def records(self) -> bytes | None: ...


def _by_topic_id(request: ProduceRequest) -> TypeIs[produce_v13.ProduceRequest]:
    return request.__version__ >= 13  # KIP-516


def _topics(
    broker: ProduceBroker, request: ProduceRequest
) -> Iterator[tuple[str | None, uuid.UUID | None, Sequence[_PartitionData]]]:
    """Each topic of the request: its name (None: an id no topic has), its id (v13+), its
    partitions; an id is looked up when its topic's turn comes."""
    if _by_topic_id(request):
        for t in request.topic_data:
            topic = broker.store.by_id.get(t.topic_id) if t.topic_id is not None else None
            yield topic.name if topic else None, t.topic_id, t.partition_data
    else:
        for named in request.topic_data:
            yield named.name, None, named.partition_data


# Each topic's name (None: unknown id) and id (v13+), with its partitions' outcomes.
_Results: TypeAlias = list[tuple[str | None, uuid.UUID | None, list[_Outcome]]]


def _single_batch(records: bytes | None) -> memoryview:
    if not records:
        raise KafkaError(ErrorCode.invalid_record, "no record batch in the request")
    try:
        batches = split_batches(records)
    except InvalidBatch as e:
        raise KafkaError(ErrorCode.corrupt_message, str(e)) from e
    if len(batches) != 1:
        raise KafkaError(
            ErrorCode.invalid_record, "produce requests v3+ must hold exactly one record batch per partition"
        )
    return batches[0]


# Coordinator errors Kafka's produce path reports as NOT_ENOUGH_REPLICAS instead, which every
# client retries (older ones would not retry these).
_UNVERIFIED = frozenset(
    {
        ErrorCode.network_exception,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
    }
)


def _txn_error(error: KafkaError, version: int) -> KafkaError:
    """A transaction coordinator's refusal as a Produce of `version` reports it, as Kafka."""
    code = error.code
    if code == ErrorCode.producer_fenced:
        return KafkaError(ErrorCode.invalid_producer_epoch, error.message)
    # v12+ is transactions v2, whose clients retry CONCURRENT_TRANSACTIONS themselves.
    if code in _UNVERIFIED or (code == ErrorCode.concurrent_transactions and version < 12):
        return KafkaError(
            ErrorCode.not_enough_replicas,
            f"Unable to verify the partition has been added to the transaction. Underlying error: {code.name.upper()}",
        )
    if code == ErrorCode.transaction_abortable and version <= 10:  # v11 introduced it (KIP-890)
        return KafkaError(ErrorCode.invalid_txn_state, "Partition was not added to the transaction")
    return error


def _add_partitions(
    broker: ProduceBroker, version: int, transactional_id: str | None, opened: list[_Outcome]
) -> Coroutine[Any, Any, None] | None:
    """Transactions v2 (v12+): the partitions of transactional batches that their producer's
    ongoing transaction lacks join it, through the coordinator, before anything is appended;
    its refusal is those partitions' error.  None when there is nothing to add."""
    if version < 12 or transactional_id is None:
        return None
    wanted: dict[tuple[int, int], list[tuple[_Outcome, tuple[str, int]]]] = {}
    for out in opened:
        if out.error != ErrorCode.none or out.opened is None or out.plog is None:
            continue
        header = out.opened.header
        tp = (out.plog.topic, out.plog.partition)
        if header.is_transactional and not broker.transactions.holds(
            transactional_id, header.producer_id, header.producer_epoch, tp
        ):
            wanted.setdefault((header.producer_id, header.producer_epoch), []).append((out, tp))
    if not wanted:
        return None

    async def add() -> None:
        for (producer_id, epoch), outs in wanted.items():
            try:
                await broker.transactions.add_partitions(transactional_id, producer_id, epoch, [tp for _, tp in outs])
            except KafkaError as e:
                for out, _ in outs:
                    out.fail(_txn_error(e, version))

    return add()


def _append(broker: ProduceBroker, out: _Outcome, transactional_id: str | None, version: int) -> bool:
    """Append an opened batch; True when it was new (not a retried duplicate).  A
    transactional batch is taken only for a partition its ongoing transaction holds."""
    assert out.plog is not None
    assert out.batch is not None
    assert out.opened is not None
    plog = out.plog
    if broker.store.partition_log(plog.topic, plog.partition) is not plog:
        # Deleted (or deleted and made again) while the request waited for a worker thread,
        # the coordinator or its turn on the loop: its log is closed.
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{plog.topic}-{plog.partition} does not exist")
    header = out.opened.header
    if header.is_transactional:
        if transactional_id is None:
            raise KafkaError(ErrorCode.transactional_id_authorization_failed, "a transactional batch needs its id")
        tp = (plog.topic, plog.partition)
        try:
            verified = broker.transactions.verify(transactional_id, header.producer_id, header.producer_epoch, [tp])
        except KafkaError as e:
            raise _txn_error(e, version) from None
        if verified[tp] != ErrorCode.none:
            raise _txn_error(KafkaError(verified[tp], f"{tp[0]}-{tp[1]} is not in the transaction"), version)
    result = plog.append(out.batch, out.opened)
    out.base_offset = result.base_offset
    out.log_append_time = result.log_append_time
    out.log_start_offset = result.log_start_offset
    if not result.duplicate:
        broker.metrics.appended(plog.topic, len(out.batch), result.last_offset - result.base_offset + 1)
        broker.notify_append(plog, len(out.batch))
    return not result.duplicate


class _Opening:
    """Checks each partition of one request and opens its batch: on the loop when small
    enough (`ready`), else later in a worker thread (`later`)."""

    def __init__(self, broker: ProduceBroker, ctx: RequestContext, request: ProduceRequest) -> None:
        self.broker, self.session = broker, ctx.session
        self.acks, self.transactional_id = request.acks, request.transactional_id
        self.limit = broker.config.values.message_max_decompressed_bytes
        self.ready: list[_Outcome] = []
        self.later: list[_Outcome] = []

    def writable(self, name: str | None) -> bool:
        return name is not None and self.broker.security.topic(self.session, Operation.WRITE, name)

    def open(self, name: str | None, topic_id: uuid.UUID | None, writable: bool, pdata: _PartitionData) -> _Outcome:
        out = _Outcome(pdata.index)
        broker, security, session, acks = self.broker, self.broker.security, self.session, self.acks
        try:
            if name is None:
                raise KafkaError(ErrorCode.unknown_topic_id, f"no topic has id {topic_id}")
            if not writable:
                raise KafkaError(ErrorCode.topic_authorization_failed, f"WRITE on topic {name} denied")
            if acks not in (0, 1, -1):
                raise KafkaError(ErrorCode.invalid_required_acks, f"acks must be 0, 1 or -1, not {acks}")
            if self.transactional_id is not None and not security.allowed(
                session, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, self.transactional_id
            ):
                raise KafkaError(
                    ErrorCode.transactional_id_authorization_failed,
                    f"WRITE on transactional id {self.transactional_id} denied",
                )
            if name in INTERNAL_TOPICS:
                # The broker's own records: a client's would be replayed at the next start.
                raise KafkaError(
                    ErrorCode.invalid_topic_exception, f"{name} is an internal topic: clients cannot produce to it"
                )
            plog = broker.store.partition_log(name, pdata.index)
            if plog is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{name}-{pdata.index} does not exist")
            out.plog = plog
            out.batch = _single_batch(pdata.records)
            try:
                out.opened = plog.open_batch(out.batch, limit=self.limit, inline=True)
                self.ready.append(out)
            except PayloadTooLarge:
                self.later.append(out)
        except KafkaError as e:
            out.fail(e)
        return out

    async def open_later(self) -> None:
        """The batches too costly for the loop, opened in a worker thread, in request order."""
        loop = asyncio.get_running_loop()
        for out in self.later:
            assert out.plog is not None
            assert out.batch is not None
            try:
                out.opened = await loop.run_in_executor(
                    self.broker.workers, partial(out.plog.open_batch, out.batch, limit=self.limit, inline=False)
                )
            except KafkaError as e:
                out.fail(e)


def _partitions(request: ProduceRequest) -> int:
    return sum(len(t.partition_data) for t in request.topic_data)


def handle(
    broker: ProduceBroker, ctx: RequestContext, request: ProduceRequest
) -> Answer[RawResponse | Signal] | Serial:
    """Validate every batch; those small enough are opened here, on the event loop.  If any
    needs more work (a large or highly compressed payload, recompression), every batch of
    the request is opened in a worker thread and appended afterwards, and the connection
    dispatches nothing else meanwhile (`Serial`), so a producer's batches keep their order.
    A request of more than STEP partitions is served STEP partitions at a time."""
    if _partitions(request) > STEP:
        return Serial(_in_steps(broker, ctx, request))
    opening = _Opening(broker, ctx, request)
    results: _Results = []
    for name, topic_id, partitions in _topics(broker, request):
        writable = opening.writable(name)
        results.append((name, topic_id, [opening.open(name, topic_id, writable, pdata) for pdata in partitions]))
    version, acks, transactional_id = ctx.api_version, request.acks, request.transactional_id
    ready, later = opening.ready, opening.later
    if not later:
        adding = _add_partitions(broker, version, transactional_id, ready)
        if adding is None:
            return _finish(broker, version, acks, results, ready, transactional_id=transactional_id)

        async def added() -> RawResponse | Signal:
            await adding
            outcome = _finish(broker, version, acks, results, ready, transactional_id=transactional_id)
            return await outcome if inspect.isawaitable(outcome) else outcome

        # The coordinator is awaited: the connection's next request, maybe this producer's next
        # batch of a partition added here, must wait for these appends.
        return Serial(added())

    async def opened_in_worker() -> RawResponse | Signal:
        await opening.open_later()
        opened = [*ready, *later]
        adding = _add_partitions(broker, version, transactional_id, opened)
        if adding is not None:
            await adding
        outcome = _finish(broker, version, acks, results, opened, transactional_id=transactional_id)
        return await outcome if inspect.isawaitable(outcome) else outcome

    return Serial(opened_in_worker())


async def _in_steps(broker: ProduceBroker, ctx: RequestContext, request: ProduceRequest) -> RawResponse | Signal:
    """`handle` for a request of many partitions: checked and opened, then appended, STEP
    partitions at a time, the loop free between steps, and the answer encoded in a worker
    thread.  Each partition's append is whole within a step, and appends keep request order."""
    opening = _Opening(broker, ctx, request)
    results: _Results = []
    count = 0
    for name, topic_id, partitions in _topics(broker, request):
        writable = opening.writable(name)
        outcomes = []
        for pdata in partitions:
            outcomes.append(opening.open(name, topic_id, writable, pdata))
            count += 1
            await pause(count)
        results.append((name, topic_id, outcomes))
    version, acks, transactional_id = ctx.api_version, request.acks, request.transactional_id
    await opening.open_later()
    opened = [*opening.ready, *opening.later] if opening.later else opening.ready
    adding = _add_partitions(broker, version, transactional_id, opened)
    if adding is not None:
        await adding
    touched: list[PartitionLog] = []
    for count, out in enumerate(opened, 1):
        _append_opened(broker, out, transactional_id, version, touched)
        await pause(count)
    failed = await _settle_in_steps(broker, results)
    if acks == 0:
        return CLOSE_CONNECTION if failed else NO_RESPONSE
    if acks == -1 and touched and broker.answers_wait():
        await _durable(broker, touched, results)
    return await asyncio.get_running_loop().run_in_executor(broker.workers, _response, version, results)


def _append_opened(
    broker: ProduceBroker, out: _Outcome, transactional_id: str | None, version: int, touched: list[PartitionLog]
) -> None:
    """`_append` of a batch that passed its checks; its log joins `touched`, or it fails."""
    if out.error != ErrorCode.none:
        return
    try:
        _append(broker, out, transactional_id, version)
        assert out.plog is not None
        touched.append(out.plog)
    except KafkaError as e:
        out.fail(e)


def _settle(broker: ProduceBroker, results: _Results) -> bool:
    """Count the errors answered (one metric update per error code) and let go of the
    records, which the response does not need; whether any partition failed."""
    errors: Counter[ErrorCode] = Counter()
    for _, _, outcomes in results:
        for out in outcomes:
            _release(out, errors)
    return _count_errors(broker, errors)


async def _settle_in_steps(broker: ProduceBroker, results: _Results) -> bool:
    """`_settle`, STEP partitions at a time."""
    errors: Counter[ErrorCode] = Counter()
    count = 0
    for _, _, outcomes in results:
        for out in outcomes:
            _release(out, errors)
            count += 1
            await pause(count)
    return _count_errors(broker, errors)


def _release(out: _Outcome, errors: Counter[ErrorCode]) -> None:
    if out.error != ErrorCode.none:
        errors[out.error] += 1
    out.batch = out.opened = None


def _count_errors(broker: ProduceBroker, errors: Counter[ErrorCode]) -> bool:
    for code, n in errors.items():
        broker.metrics.errors.labels("Produce", code.name).inc(n)
    return bool(errors)


async def _durable(broker: ProduceBroker, touched: list[PartitionLog], results: _Results) -> None:
    """Wait until the appends are durable; if the fsync fails, every appended partition
    answers KAFKA_STORAGE_ERROR."""
    try:
        await broker.sync(touched)
    except OSError as e:
        log.exception("fsync failed; failing acks=all produce", error=str(e))
        for _, _, outcomes in results:
            for out in outcomes:
                if out.error == ErrorCode.none:
                    out.error, out.message = ErrorCode.kafka_storage_error, str(e)


def _finish(
    broker: ProduceBroker,
    version: int,
    acks: int,
    results: _Results,
    opened: list[_Outcome],
    *,
    transactional_id: str | None,
) -> Answer[RawResponse | Signal]:
    """Append the opened batches, then answer as `acks` says."""
    touched: list[PartitionLog] = []
    for out in opened:
        _append_opened(broker, out, transactional_id, version, touched)
    failed = _settle(broker, results)
    if acks == 0:
        return CLOSE_CONNECTION if failed else NO_RESPONSE
    if acks == -1 and touched and broker.answers_wait():

        async def durable() -> RawResponse:
            await _durable(broker, touched, results)
            return _response(version, results)

        return durable()
    return _response(version, results)


def _response(version: int, results: _Results) -> RawResponse:
    return encode_produce_response(version, results)
