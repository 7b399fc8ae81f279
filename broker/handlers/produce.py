"""Produce: validate and append each partition's batch; acks decide when we answer.

acks=0  no response (the connection is closed if anything failed, as Kafka does);
acks=1  answer once the batch reached the OS (os.write returned);
acks=-1 answer once the batch is fsynced, through the group-commit flusher.
"""

from __future__ import annotations

from typing import Any

import structlog

from broker.core import Broker
from broker.handlers.base import CLOSE_CONNECTION, NO_RESPONSE
from broker.log.partition_log import PartitionLog
from broker.protocol.batch import InvalidBatch, split_batches
from broker.protocol.codec import RequestHeader, build, nested, response_type
from broker.protocol.errors import ErrorCode, KafkaError

API_KEY = 0
MIN_VERSION, MAX_VERSION = 3, 12

log = structlog.get_logger(__name__)


class _Outcome:
    __slots__ = ("base_offset", "error", "log_append_time", "log_start_offset", "message", "partition")

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.error = ErrorCode.none
        self.message: str | None = None
        self.base_offset = -1
        self.log_append_time = -1
        self.log_start_offset = -1


def _append(broker: Broker, plog: PartitionLog, records: bytes | None, out: _Outcome) -> bool:
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
    result = plog.append(batches[0])
    out.base_offset = result.base_offset
    out.log_append_time = result.log_append_time
    out.log_start_offset = result.log_start_offset
    if not result.duplicate:
        topic = plog.topic
        broker.metrics.bytes_in.labels(topic).inc(len(records))
        broker.metrics.records_in.labels(topic).inc(result.last_offset - result.base_offset + 1)
        broker.notify_append(plog, len(records))
    return not result.duplicate


def handle(broker: Broker, header: RequestHeader, request: Any) -> Any:
    acks = request.acks
    results: list[tuple[str, list[_Outcome]]] = []
    touched: list[PartitionLog] = []
    failed = False
    for topic_data in request.topic_data:
        outcomes = []
        for pdata in topic_data.partition_data:
            out = _Outcome(pdata.index)
            outcomes.append(out)
            try:
                if acks not in (0, 1, -1):
                    raise KafkaError(ErrorCode.invalid_required_acks, f"acks must be 0, 1 or -1, not {acks}")
                if request.transactional_id is not None:
                    raise KafkaError(ErrorCode.invalid_request, "transactions are not supported by this broker")
                plog = broker.store.partition_log(topic_data.name, pdata.index)
                if plog is None:
                    raise KafkaError(
                        ErrorCode.unknown_topic_or_partition, f"{topic_data.name}-{pdata.index} does not exist"
                    )
                _append(broker, plog, pdata.records, out)
                touched.append(plog)
            except KafkaError as e:
                out.error, out.message = e.code, e.message
                failed = True
                broker.metrics.errors.labels("Produce", e.code.name).inc()
        results.append((topic_data.name, outcomes))

    if acks == 0:
        return CLOSE_CONNECTION if failed else NO_RESPONSE
    if acks == -1 and touched:

        async def durable() -> Any:
            try:
                await broker.sync(touched)
            except OSError as e:
                log.exception("fsync failed; failing acks=all produce", error=str(e))
                for _, outcomes in results:
                    for out in outcomes:
                        if out.error == ErrorCode.none:
                            out.error, out.message = ErrorCode.kafka_storage_error, str(e)
            return _response(header.api_version, results)

        return durable()
    return _response(header.api_version, results)


def _response(version: int, results: list[tuple[str, list[_Outcome]]]) -> Any:
    cls = response_type(API_KEY, version)
    topic_cls = nested(cls, "TopicProduceResponse")
    part_cls = nested(cls, "PartitionProduceResponse")
    return build(
        cls,
        throttle_time=0,
        responses=tuple(
            build(
                topic_cls,
                name=name,
                partition_responses=tuple(
                    build(
                        part_cls,
                        index=o.partition,
                        error_code=o.error,
                        base_offset=o.base_offset,
                        log_append_time=o.log_append_time,
                        log_start_offset=o.log_start_offset,
                        record_errors=(),
                        error_message=o.message,
                    )
                    for o in outcomes
                ),
            )
            for name, outcomes in results
        ),
    )
