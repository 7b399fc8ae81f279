"""Decoding and encoding of large requests and their answers off the event loop.

kio builds and writes one Python object per array entry: a request of 100,000 entries costs
seconds of decoding and as much again to encode its answer, and on the event loop that time
is every other client's.  Kafka does such work on its request handler threads, off the
network threads; here a worker thread does it, which the interpreter preempts every switch
interval (5 ms), so the loop keeps serving while it runs.

Only requests that declare many array entries take this path (`is_large`): the frame is
large in bytes and its entries exceed `MANY_ELEMENTS`.  A Produce request of a few large
record batches is large in bytes only (records are one bytes field) and stays on the direct
path.  The connection dispatches nothing else until such a request is answered, so its side
effects still happen in request order, as Kafka, which reads no further request of a
connection while one is being served.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from typing import TypeVar

from kio.static.protocol import Entity

from broker.cooperative import STEP
from broker.core import Broker
from broker.handlers.base import Handler, Outcome, RequestContext, Result, Serial, Signal
from broker.protocol.codec import MalformedRequest, encode_body, parse_header, request_type
from broker.protocol.fetch_codec import RawResponse
from broker.protocol.frame_check import Budget, FrameError, entity_check

MIN_BYTES = 32 * 1024  # smaller frames are decoded on the loop without further look
MANY_ELEMENTS = 1_000  # array entries of a request decoded off the loop, and its answer encoded

T = TypeVar("T")


@cache
def _worker() -> ThreadPoolExecutor:
    # One thread: large requests are rare and each is mostly interpreter work, so running two
    # at once would not finish either sooner.
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="large-requests")


def is_large(frame: memoryview, api_key: int, api_version: int) -> bool:
    """Whether the request in `frame` (a supported version) declares more than MANY_ELEMENTS
    array entries.  The walk stops once it has counted that many, so it costs the loop no
    more than a small request; a frame that does not parse counts as large (its decoding
    fails in the worker thread, as it would on the loop)."""
    if len(frame) < MIN_BYTES:
        return False
    cls = request_type(api_key, api_version)
    try:
        body_at = parse_header(frame, cls.__flexible__).size
        entity_check(cls)(frame, body_at, len(frame), Budget(MANY_ELEMENTS))
    except (FrameError, MalformedRequest):
        return True
    return False


async def run(work: Callable[[], T]) -> T:
    """`work()` in the worker thread."""
    return await asyncio.get_running_loop().run_in_executor(_worker(), work)


def _big_arrays(entity: object, into: list[object]) -> None:
    """Appends to `into` the entries of every array of `entity` (a kio entity: a dataclass of
    tuples and entities), at any depth, longer than CHUNK, looking into the entries of shorter
    arrays only."""
    for field in dataclasses.fields(entity):  # type: ignore[arg-type]  # checked by the callers
        value = getattr(entity, field.name)
        if isinstance(value, tuple) and len(value) > CHUNK:
            into.extend(value)
        elif isinstance(value, tuple):
            for item in value:
                if dataclasses.is_dataclass(item):
                    _big_arrays(item, into)
        elif dataclasses.is_dataclass(value):
            _big_arrays(value, into)


async def release(owned: list[Entity]) -> None:
    """Frees the entities in `owned` (whose other references the caller has dropped) a step at a
    time: a request or an answer of 100,000 entries is several hundred thousand objects, and
    freeing them at once, in one deallocation, held the loop for 300 ms."""
    entries: list[object] = []
    while owned:
        _big_arrays(owned[-1], entries)
        owned.pop()  # its arrays go; their entries stay referenced from `entries`
    for end in range(len(entries), 0, -CHUNK):
        del entries[max(0, end - CHUNK) : end]
        await asyncio.sleep(0)


async def encoded(response: Entity) -> RawResponse:
    """`response` encoded in the worker thread (kio's entities are immutable); its throttle
    must be set already."""
    body = await run(lambda: encode_body(response))
    return RawResponse([body], type(response).__flexible__)


@dataclass(frozen=True, slots=True)
class Split:
    """An API whose request array `entries` is answered entry by entry, in order, in the
    response array `answers`, no entry's answer depending on another's."""

    entries: str
    answers: str
    since: int = 0  # the first version with these arrays


# Served a CHUNK of entries at a time, the loop free between chunks: Kafka gives no atomicity
# across these entries either (each group, key, topic or transactional id is looked up or
# changed on its own).  APIs that answer repeated entries as one (DescribeConfigs, Metadata)
# or refuse them together (CreateTopics, DeleteTopics, DescribeUserScramCredentials) are not
# split.
SPLITS: dict[int, Split] = {
    2: Split("topics", "topics"),  # ListOffsets
    9: Split("groups", "groups", since=8),  # OffsetFetch
    10: Split("coordinator_keys", "coordinators", since=4),  # FindCoordinator
    13: Split("members", "members", since=3),  # LeaveGroup
    15: Split("groups", "groups"),  # DescribeGroups
    42: Split("groups_names", "results"),  # DeleteGroups
    61: Split("topics", "topics"),  # DescribeProducers
    65: Split("transactional_ids", "transaction_states"),  # DescribeTransactions
    69: Split("group_ids", "groups"),  # ConsumerGroupDescribe
    77: Split("group_ids", "groups"),  # ShareGroupDescribe
}
CHUNK = STEP


async def _outcome(result: Result) -> Outcome:
    if isinstance(result, Serial):
        result = result.awaitable
    return await result if inspect.isawaitable(result) else result


async def handled(handler: Handler[Broker], broker: Broker, ctx: RequestContext, request: Entity) -> Outcome:
    """`handler`'s answer to `request`; for an API of SPLITS, the answers to CHUNK entries
    at a time joined into one (the fields beside the array are the first chunk's: they depend
    on the request's other fields only)."""
    split = SPLITS.get(ctx.api_key)
    entries = getattr(request, split.entries, None) if split and ctx.api_version >= split.since else None
    if split is None or entries is None or len(entries) <= CHUNK:
        return await _outcome(handler(broker, ctx, request))
    answers: list[Entity] = []
    for start in range(0, len(entries), CHUNK):
        if start:
            await asyncio.sleep(0)  # let the loop serve others between chunks
        part = await _outcome(
            handler(broker, ctx, dataclasses.replace(request, **{split.entries: entries[start : start + CHUNK]}))
        )
        if isinstance(part, RawResponse | Signal):
            raise TypeError(f"API {ctx.api_key} is split but answered with {type(part).__name__}")
        answers.append(part)
    joined = tuple(answer for part in answers for answer in getattr(part, split.answers))
    return dataclasses.replace(answers[0], **{split.answers: joined})
