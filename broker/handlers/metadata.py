"""Metadata: brokers, topics and partitions; auto-creates topics when allowed."""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol, TypeAlias

from kio.static.protocol import Entity

from broker.config import validate_topic_name
from broker.handlers.base import NOT_REQUESTED_OPERATIONS, Answer, Messages, RequestContext, Serial
from broker.handlers.services import (
    Endpoint,
    HasNodeId,
    HasQuotas,
    HasSecurity,
    HasStore,
    HasTopicAutoCreation,
    MetadataDurability,
    VisibleTopics,
)
from broker.handlers.stepped import Steps, at_once, in_steps, stepped
from broker.metadata import Topic
from broker.protocol.codec import build, encode_body, encode_string, nested, uvarint
from broker.protocol.errors import ErrorCode
from broker.protocol.fetch_codec import Part, RawResponse
from broker.quotas import MutationCharge
from broker.security.acls import CLUSTER_NAME, Operation, ResourceType

if TYPE_CHECKING:
    from kio.schema.metadata import v0 as metadata_v0
    from kio.schema.metadata import v1 as metadata_v1
    from kio.schema.metadata import v2 as metadata_v2
    from kio.schema.metadata import v3 as metadata_v3
    from kio.schema.metadata import v8 as metadata_v8
    from kio.schema.metadata import v9 as metadata_v9
    from kio.schema.metadata import v10 as metadata_v10
    from kio.schema.metadata import v11 as metadata_v11
    from kio.schema.metadata import v12 as metadata_v12
    from kio.schema.metadata import v13 as metadata_v13
    from typing_extensions import TypeIs

    from broker.handlers.kio_types import MetadataRequest, MetadataResponse

API_KEY = 3
MIN_VERSION, MAX_VERSION = 0, 13
MESSAGES: Messages[MetadataRequest, MetadataResponse] = Messages(API_KEY, MIN_VERSION, MAX_VERSION)
_ZERO_UUID = uuid.UUID(int=0)
_I32 = struct.Struct(">i")
# A topic of the response: name, id, error, and the topic when it exists.
_Entry: TypeAlias = tuple[str | None, uuid.UUID | None, ErrorCode, Topic | None]


class MetadataBroker(
    HasSecurity,
    HasStore,
    HasNodeId,
    HasQuotas,
    MetadataDurability,
    VisibleTopics,
    Endpoint,
    HasTopicAutoCreation,
    Protocol,
):
    """What Metadata uses of the broker."""

    @property
    def cluster_id(self) -> str: ...

    @property
    def response_cache(self) -> dict[object, bytes]: ...


def _always_auto_creates(
    request: MetadataRequest,
) -> TypeIs[
    metadata_v0.MetadataRequest
    | metadata_v1.MetadataRequest
    | metadata_v2.MetadataRequest
    | metadata_v3.MetadataRequest
]:
    return request.__version__ < 4  # v4 let the client say (KIP-204)


def _asks_operations(
    request: MetadataRequest,
) -> TypeIs[
    metadata_v8.MetadataRequest
    | metadata_v9.MetadataRequest
    | metadata_v10.MetadataRequest
    | metadata_v11.MetadataRequest
    | metadata_v12.MetadataRequest
    | metadata_v13.MetadataRequest
]:
    return request.__version__ >= 8  # KIP-430


def _asks_cluster_operations(
    request: MetadataRequest,
) -> TypeIs[metadata_v8.MetadataRequest | metadata_v9.MetadataRequest | metadata_v10.MetadataRequest]:
    return 8 <= request.__version__ <= 10  # v11 moved them to DescribeCluster (KIP-700)


def _by_topic_id(
    request: MetadataRequest,
) -> TypeIs[
    metadata_v10.MetadataRequest
    | metadata_v11.MetadataRequest
    | metadata_v12.MetadataRequest
    | metadata_v13.MetadataRequest
]:
    return request.__version__ >= 10  # KIP-516


def handle(broker: MetadataBroker, ctx: RequestContext, request: MetadataRequest) -> Answer[RawResponse] | Serial:
    version = ctx.api_version
    requested = request.topics
    # v0: an empty list means all topics; v1+: null means all, empty means none.
    all_topics = requested is None or (version == 0 and not requested)
    entries = len(broker.store.topics) if all_topics else len(requested or ())
    return stepped(_answer(broker, ctx, request, all_topics), entries)


def _answer(
    broker: MetadataBroker, ctx: RequestContext, request: MetadataRequest, all_topics: bool
) -> Steps[Answer[RawResponse]]:
    """Each topic looked up (and auto-created) on its own, the loop free between topics, as
    Kafka's metadata cache gives no snapshot across a request's topics either."""
    version = ctx.api_version
    requested = request.topics
    allow_auto = True if _always_auto_creates(request) else request.allow_auto_topic_creation
    include_ops = _asks_operations(request) and request.include_topic_authorized_operations
    include_cluster_ops = _asks_cluster_operations(request) and request.include_cluster_authorized_operations
    entries: list[_Entry] = []
    # Topics being auto-created, their partitions made off the event loop: (entry, name, topic).
    creations: list[tuple[int, str, asyncio.Future[Topic | None]]] = []
    mutations: MutationCharge | None = None
    security, session = broker.security, ctx.session
    if all_topics:
        # Kafka lists only the topics the principal may describe.
        for t in broker.visible_topics():
            yield
            if security.topic(session, Operation.DESCRIBE, t.name):
                entries.append((t.name, t.topic_id, ErrorCode.none, t))
    else:
        asked: Iterable[tuple[str | None, uuid.UUID | None]] = (
            ((t.name, t.topic_id) for t in request.topics or ())
            if _by_topic_id(request)
            else ((t.name, None) for t in requested or ())
        )
        seen: set[object] = set()
        for name, topic_id in asked:
            yield
            key = name if topic_id is None else (name, topic_id)  # a name alone: no tuple kept
            if key in seen:  # as Kafka, which takes them as a set: each answered once, where first asked
                continue
            seen.add(key)
            if name is None and version < 12:
                # As Kafka: a topic asked by id (a null name) only from v12, whose answer's name
                # may be null; before it the name cannot even be encoded.
                entries.append(("", None, ErrorCode.invalid_request, None))
                continue
            if name is None:
                topic = broker.store.by_id.get(topic_id) if topic_id not in (None, _ZERO_UUID) else None
                if topic is None:
                    entries.append((None, topic_id, ErrorCode.unknown_topic_id, None))
                elif not security.topic(session, Operation.DESCRIBE, topic.name):
                    entries.append((None, topic_id, ErrorCode.topic_authorization_failed, None))
                else:
                    entries.append((topic.name, topic_id, ErrorCode.none, topic))
                continue
            if validate_topic_name(name) is not None:
                entries.append((name, None, ErrorCode.invalid_topic_exception, None))
                continue
            if not security.topic(session, Operation.DESCRIBE, name):
                entries.append((name, None, ErrorCode.topic_authorization_failed, None))
                continue
            topic = broker.store.get(name)
            if topic is None and allow_auto and broker.topics.auto_create_allowed(name):
                if not (security.cluster(session, Operation.CREATE) or security.topic(session, Operation.CREATE, name)):
                    entries.append((name, None, ErrorCode.topic_authorization_failed, None))
                    continue
                if mutations is None:
                    mutations = MutationCharge(broker.quotas, ctx.principal, ctx.client_id, strict=True)
                # As Kafka's forwarded CreateTopics: the client's controller_mutation_rate pays
                # for what it auto-creates, and a client already over it creates nothing (the
                # client sees UNKNOWN_TOPIC_OR_PARTITION and asks again later).
                if not mutations.exceeded():
                    creation = broker.topics.auto_create_off_loop(name)
                    if creation is not None:
                        mutations.take(creation.partitions)
                        creations.append((len(entries), name, creation.topic))
                        entries.append((name, None, ErrorCode.unknown_topic_or_partition, None))  # until made
                        continue
            if topic is None:
                entries.append((name, None, ErrorCode.unknown_topic_or_partition, None))
            else:
                entries.append((name, topic.topic_id, ErrorCode.none, topic))

    def respond() -> Steps[RawResponse]:
        cluster_ops = NOT_REQUESTED_OPERATIONS
        if include_cluster_ops:
            cluster_ops = security.operations(session, ResourceType.CLUSTER, CLUSTER_NAME)
        ops = (lambda name: security.operations(session, ResourceType.TOPIC, name)) if include_ops else None
        return (yield from _response_steps(broker, version, ctx.listener, entries, ops=ops, cluster_ops=cluster_ops))

    if creations:

        async def durable() -> RawResponse:
            for at, name, made in creations:
                topic = await made
                if topic is not None:
                    entries[at] = (name, topic.topic_id, ErrorCode.none, topic)
            await broker.sync_metadata()
            return await in_steps(respond())

        return durable()
    return (yield from respond())


_EMPTY_ARRAY = {False: b"\x00\x00\x00\x00", True: b"\x01"}
_EMPTY_STRING = {False: b"\x00\x00", True: b"\x01"}
_TOPIC_CACHE_SIZE = 4096


def _response(
    broker: MetadataBroker,
    version: int,
    listener: str,
    entries: list[_Entry],
    *,
    ops: Callable[[str], int] | None,
    cluster_ops: int,
) -> RawResponse:
    return at_once(_response_steps(broker, version, listener, entries, ops=ops, cluster_ops=cluster_ops))


def _response_steps(
    broker: MetadataBroker,
    version: int,
    listener: str,
    entries: list[_Entry],
    *,
    ops: Callable[[str], int] | None,
    cluster_ops: int,
) -> Steps[RawResponse]:
    """Encoded as kio encodes it, but each topic's bytes come from a cache: a topic of
    100,000 partitions is encoded once, not on every Metadata request.  The envelope is
    kio's encoding of the response without topics, with the topics spliced in where its
    empty array is (`test_metadata_codec` checks every version against kio)."""
    cls = MESSAGES.response(version)
    broker_cls = nested(cls, "MetadataResponseBroker")
    node = broker.node_id
    host, port = broker.endpoint(listener)
    envelope = encode_body(
        build(
            cls,
            throttle_time=0,
            brokers=(build(broker_cls, node_id=node, host=host, port=port, rack=None),),
            cluster_id=broker.cluster_id,
            controller_id=node,
            topics=(),
            cluster_authorized_operations=cluster_ops,
            # v13's top-level error (KIP-1102) is for REBOOTSTRAP_REQUIRED, which Kafka 4.1's
            # brokers never send either.
            error_code=ErrorCode.none,
        )
    )
    flexible = bool(cls.__flexible__)
    # What follows the topics: v8-v10's cluster operations, v13's error code, the tagged fields.
    tail = (4 if 8 <= version <= 10 else 0) + (2 if version >= 13 else 0) + (1 if flexible else 0)
    at = len(envelope) - tail - len(_EMPTY_ARRAY[flexible])
    assert envelope[at : len(envelope) - tail] == _EMPTY_ARRAY[flexible]
    count = uvarint(len(entries) + 1) if flexible else _I32.pack(len(entries))
    topics = []
    for entry in entries:
        yield
        topics.append(
            _topic_bytes(broker, cls, entry, NOT_REQUESTED_OPERATIONS if ops is None else ops(entry[0] or ""))
        )
    parts: list[Part] = [envelope[:at], count, *topics, envelope[len(envelope) - tail :]]
    return RawResponse(parts, flexible, throttled=version >= 3)  # v3 put throttle_time_ms first


def _partitions(version: int, flexible: bool, node: int, count: int) -> bytes:
    """`count` partition entries of a Metadata response, led and replicated by `node`."""
    nodes = (uvarint(2) if flexible else _I32.pack(1)) + _I32.pack(node)
    before = b"\x00\x00"  # error code
    after = _I32.pack(node) + (_I32.pack(0) if version >= 7 else b"") + nodes + nodes  # leader, epoch, replicas, isr
    if version >= 5:
        after += uvarint(1) if flexible else _I32.pack(0)  # no offline replicas
    if flexible:
        after += b"\x00"  # tagged fields
    pack = _I32.pack
    return b"".join(before + pack(p) + after for p in range(count))


def _topic_bytes(broker: MetadataBroker, cls: type[Entity], entry: _Entry, operations: int) -> bytes:
    name, topic_id, code, topic = entry
    if topic is None and topic_id is None and name:
        # A topic that is not there (a hostile request may name 100,000): the answer of the
        # nameless one with this name written in, and no cache entry pushed out for it.
        flexible = bool(cls.__flexible__)
        template = _topic_bytes(broker, cls, ("", None, code, None), operations)
        return template[:2] + encode_string(name, flexible) + template[2 + len(_EMPTY_STRING[flexible]) :]
    key = (cls, name, topic_id, code, topic.partitions if topic else 0, bool(topic and topic.internal), operations)
    cache = broker.response_cache
    cached = cache.pop(key, None)
    if cached is not None:
        cache[key] = cached  # most recently used last
        return cached
    topic_cls = nested(cls, "MetadataResponseTopic")
    version = int(cls.__version__)
    flexible = bool(cls.__flexible__)
    encoded = encode_body(
        build(
            topic_cls,
            error_code=code,
            name=name,
            topic_id=topic_id or _ZERO_UUID,
            is_internal=bool(topic and topic.internal),
            partitions=(),
            topic_authorized_operations=operations,
        )
    )
    if topic is not None and topic.partitions:
        # Splice the partitions in where the empty array is (before the operations field
        # and the tag buffer); every partition has this broker as leader and only replica.
        tail = (4 if version >= 8 else 0) + (1 if flexible else 0)
        at = len(encoded) - tail - len(_EMPTY_ARRAY[flexible])
        count = uvarint(topic.partitions + 1) if flexible else _I32.pack(topic.partitions)
        encoded = (
            encoded[:at]
            + count
            + _partitions(version, flexible, broker.node_id, topic.partitions)
            + encoded[at + len(_EMPTY_ARRAY[flexible]) :]
        )
    if len(cache) >= _TOPIC_CACHE_SIZE:
        cache.pop(next(iter(cache)))  # least recently used
    cache[key] = encoded
    return encoded
