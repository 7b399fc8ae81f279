"""The records APIs (Produce, Fetch, ShareFetch, DeleteRecords) hold the broker's event loop no
longer than a few idle round trips of another client while they serve a request of
`request.max.elements` entries, and still answer every entry, in order (tests/support/loop_stall.py).

Each request is built as `python -m loadtest.bench_loop_stall` builds it (entries named by
distinct unknown names or ids), but for its first entry, which names a real partition: the
answer holds both the success and the errors."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import Records

from broker.handlers import BY_KEY
from loadtest.bench_loop_stall import MAX_ELEMENTS, generic_request, share_fetch_request
from tests.support import loop_stall
from tests.support.harness import BrokerProcess
from tests.support.kafka_wire import batch, connect

pytestmark = pytest.mark.slow

TOPIC = "orders"


@dataclasses.dataclass(frozen=True)
class _Case:
    api_key: int
    build: Callable[[Any, uuid.UUID, int], Any]  # (generic request, the topic's id, try) -> request
    check: Callable[[Any, Any], None]  # (request, response): every entry answered, in order
    elements: int = MAX_ELEMENTS  # halved where the whole request would count more (as the benchmark)


def _first(entries: tuple[Any, ...], **changes: Any) -> tuple[Any, ...]:
    return (dataclasses.replace(entries[0], **changes), *entries[1:])


def _produce(request: Any, topic_id: uuid.UUID, attempt: int) -> Any:
    data = request.topic_data[0]
    records = Records(batch([f"try-{attempt}".encode()]))
    partition = dataclasses.replace(data.partition_data[0], records=records)
    return dataclasses.replace(
        request, topic_data=_first(request.topic_data, topic_id=topic_id, partition_data=(partition,))
    )


def _check_produce(request: Any, response: Any) -> None:
    assert [t.topic_id for t in response.responses] == [t.topic_id for t in request.topic_data]
    answers = [p for t in response.responses for p in t.partition_responses]
    assert [p.index for p in answers] == [p.index for t in request.topic_data for p in t.partition_data]
    assert answers[0].error_code == ErrorCode.none
    assert answers[0].base_offset >= 0
    assert {p.error_code for p in answers[1:]} == {ErrorCode.unknown_topic_id}


def _fetch(request: Any, topic_id: uuid.UUID, _: int) -> Any:
    return dataclasses.replace(request, topics=_first(request.topics, topic_id=topic_id))


def _check_fetch(request: Any, response: Any) -> None:
    assert response.error_code == ErrorCode.none
    assert [t.topic_id for t in response.responses] == [t.topic_id for t in request.topics]
    answers = [p for t in response.responses for p in t.partitions]
    assert [p.partition_index for p in answers] == [p.partition for t in request.topics for p in t.partitions]
    assert answers[0].error_code == ErrorCode.none
    assert answers[0].high_watermark >= 1  # the batch the test produced
    assert {p.error_code for p in answers[1:]} == {ErrorCode.unknown_topic_id}


def _delete_records(request: Any, _: uuid.UUID, __: int) -> Any:
    partition = dataclasses.replace(request.topics[0].partitions[0], offset=1)  # past the first record
    return dataclasses.replace(request, topics=_first(request.topics, name=TOPIC, partitions=(partition,)))


def _check_delete_records(request: Any, response: Any) -> None:
    assert [t.name for t in response.topics] == [t.name for t in request.topics]
    answers = [p for t in response.topics for p in t.partitions]
    assert [p.partition_index for p in answers] == [p.partition_index for t in request.topics for p in t.partitions]
    assert (answers[0].error_code, answers[0].low_watermark) == (ErrorCode.none, 1)
    assert {(p.error_code, p.low_watermark) for p in answers[1:]} == {(ErrorCode.unknown_topic_or_partition, -1)}


CASES = [
    pytest.param(_Case(0, _produce, _check_produce), id="Produce"),
    pytest.param(_Case(1, _fetch, _check_fetch, MAX_ELEMENTS // 2), id="Fetch"),
    pytest.param(_Case(21, _delete_records, _check_delete_records), id="DeleteRecords"),
]


@pytest.mark.parametrize("case", CASES)
def test_a_records_request_of_many_entries_does_not_stall_other_clients(
    broker_process_factory: Callable[..., BrokerProcess], case: _Case
) -> None:
    broker = broker_process_factory()
    with connect(broker.bootstrap) as conn:
        conn.create_topic(TOPIC, 1)
        conn.produce(TOPIC, 0, batch([b"first"]))
        topic_id = conn.metadata([TOPIC]).topics[0].topic_id
    generic, count = generic_request(case.api_key, BY_KEY[case.api_key].max_version, case.elements)
    assert count >= 12_500
    sent: list[Any] = []

    def request(attempt: int) -> Any:
        sent.append(case.build(generic, topic_id, attempt))
        return sent[-1]

    response, stall, idle = loop_stall.within_bound(broker.bootstrap, request)
    case.check(sent[-1], response)
    assert stall < loop_stall.bound(idle), f"stalled {stall:.3f}s; idle round trips took at most {idle:.4f}s"
    if case.api_key == 0:  # the batch of the try answered is in the log
        with connect(broker.bootstrap) as conn:
            values = [r.value for r in conn.read_all(TOPIC)]
        assert f"try-{len(sent) - 1}".encode() in values


def test_share_fetch_of_50000_partitions_does_not_stall_other_clients(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    """Each partition is answered in order: the topic's one with its record acquired, every
    other with UNKNOWN_TOPIC_OR_PARTITION.  Each try is a new member's new session."""
    broker = broker_process_factory()
    with connect(broker.bootstrap) as conn:
        conn.create_topic(TOPIC, 1)
        conn.produce(TOPIC, 0, batch([b"first"]))
    response, stall, idle = loop_stall.within_bound(
        broker.bootstrap, lambda _: share_fetch_request(broker.bootstrap, 50_000)
    )
    assert response.error_code == ErrorCode.none
    partitions = response.responses[0].partitions
    assert [p.partition_index for p in partitions] == list(range(50_000))
    assert partitions[0].error_code == ErrorCode.none
    assert {p.error_code for p in partitions[1:]} == {ErrorCode.unknown_topic_or_partition}
    assert stall < loop_stall.bound(idle), f"stalled {stall:.3f}s; idle round trips took at most {idle:.4f}s"
