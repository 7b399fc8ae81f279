"""Observing the cluster over the Kafka protocol only (never the bundled broker's admin HTTP
API), so the dashboard works the same against an Apache Kafka cluster.

One observation costs: Metadata (brokers, topics, partitions, leaders), ListOffsets for the log
start and end offsets (a group-less consumer), DescribeLogDirs per broker (sizes), ListGroups,
FindCoordinator + DescribeGroups + OffsetFetch per group.

ListGroups is asked in v5 where a broker speaks it, the first version that says each group's
type: "classic" (JoinGroup/SyncGroup) or "consumer" (the consumer group protocol of KIP-848).
aiokafka 0.14 stops at v2, so v5 is kio's (services/dashboard/kafka_requests.py sends kio's message classes
through aiokafka's connections); a broker without it (an older Kafka) is asked v0-v2 through
aiokafka's own request as before, and its groups' type is unknown.

aiokafka 0.14 has no DescribeLogDirs, DescribeQuorum, ListTransactions or DescribeTransactions at
all, and its DescribeGroups v3 parses the answer with the v2 layout (the trailing
authorized_operations field of each group is not read, which garbles every group after the
first): the first four are kio's, DescribeGroups stays at aiokafka's v0-v2.  A broker that does
not implement DescribeLogDirs (older brokers, or one that leaves it out) makes sizes unknown,
never the observation fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import Awaitable, Iterable
from datetime import timedelta
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import IncompatibleBrokerVersion, KafkaError, for_code
from aiokafka.protocol.admin import (
    DescribeGroupsRequest_v0,
    DescribeGroupsRequest_v1,
    DescribeGroupsRequest_v2,
)
from aiokafka.protocol.admin import ListGroupsRequest as AiokafkaListGroupsRequest
from aiokafka.protocol.api import Request
from aiokafka.structs import TopicPartition
from kio.schema.describe_log_dirs.v1.request import DescribeLogDirsRequest
from kio.schema.describe_log_dirs.v1.response import DescribeLogDirsResponse
from kio.schema.describe_quorum.v0.request import DescribeQuorumRequest
from kio.schema.describe_quorum.v0.request import PartitionData as QuorumPartition
from kio.schema.describe_quorum.v0.request import TopicData as QuorumTopic
from kio.schema.describe_quorum.v0.response import DescribeQuorumResponse
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.describe_transactions.v0.response import DescribeTransactionsResponse
from kio.schema.describe_transactions.v0.response import TransactionState as DescribedTransaction
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.list_groups.v5.response import ListGroupsResponse
from kio.schema.list_transactions.v0.request import ListTransactionsRequest
from kio.schema.list_transactions.v0.response import ListTransactionsResponse
from kio.schema.types import TopicName, TransactionalId
from kio.static.primitive import i32

from contracts import commit_note
from kit.logging import get_logger
from services.dashboard.kafka_requests import KioRequest, UndecodableResponse, ask
from services.dashboard.model import (
    BrokerInfo,
    GroupInfo,
    MemberInfo,
    Observation,
    PartitionInfo,
    TopicInfo,
    TransactionInfo,
)
from services.dashboard.share_groups import describe_share_groups

DURABILITY = "log.durability"  # the bundled broker's setting; Apache Kafka has none

__all__ = [
    "DESCRIBE_LOG_DIRS",
    "DESCRIBE_QUORUM",
    "LIST_GROUP_TYPES",
    "LIST_TRANSACTIONS",
    "ClusterReader",
    "decode_assignment",
    "describe_transactions",
]

log = get_logger(__name__)

_DESCRIBE_GROUPS = 15
_DEAD_STATES = frozenset({"Dead"})
OPEN_TRANSACTION_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")
_MS = timedelta(milliseconds=1)


# -- requests aiokafka lacks, as kio's message classes -----------------------------------------

# topics: null asks for every partition of every topic.  v1 is the oldest version Kafka 4 still
# speaks (KIP-896) and the newest without flexible encoding; v0, for brokers older than Kafka 2.0,
# is the same message (kio, generated from Kafka 4's schemas, has no v0 class of its own).
DESCRIBE_LOG_DIRS = KioRequest(DescribeLogDirsRequest(topics=None), DescribeLogDirsResponse, versions=(0, 1))

# DescribeMetadataQuorum of KRaft's metadata log (`__cluster_metadata`, partition 0).
DESCRIBE_QUORUM = KioRequest(
    DescribeQuorumRequest(
        topics=(
            QuorumTopic(
                topic_name=TopicName("__cluster_metadata"), partitions=(QuorumPartition(partition_index=i32(0)),)
            ),
        )
    ),
    DescribeQuorumResponse,
)

# The transactional ids a broker coordinates whose transaction is open.
LIST_TRANSACTIONS = KioRequest(
    ListTransactionsRequest(state_filters=OPEN_TRANSACTION_STATES, producer_id_filters=()), ListTransactionsResponse
)


def describe_transactions(transactional_ids: Iterable[str]) -> KioRequest[DescribeTransactionsResponse]:
    return KioRequest(
        DescribeTransactionsRequest(transactional_ids=tuple(TransactionalId(t) for t in transactional_ids)),
        DescribeTransactionsResponse,
    )


# Only v5, with empty filters (every state, every type): v3 and v4 say no more than aiokafka's v2
# does (no group type), so a broker without v5 is asked v0-v2 through aiokafka's own request.
LIST_GROUP_TYPES = KioRequest(ListGroupsRequest(states_filter=(), types_filter=()), ListGroupsResponse)


# DescribeGroups up to v2, whose answer aiokafka parses right (see the module docstring).
_DescribeGroupsVersions = DescribeGroupsRequest_v0 | DescribeGroupsRequest_v1 | DescribeGroupsRequest_v2


class _DescribeGroupsRequest(Request[_DescribeGroupsVersions]):  # type: ignore[misc]
    API_KEY = _DESCRIBE_GROUPS

    def __init__(self, groups: list[str]) -> None:
        self._groups = groups

    def build(self, request_struct_class: Any) -> Any:
        return request_struct_class(self._groups)


def decode_assignment(protocol_type: str, raw: bytes | None) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """A member's assignment, ``((topic, (partition, ...)), ...)`` sorted; empty while a
    rebalance has not assigned it yet, and for groups of another protocol than ``consumer``
    (Kafka Connect, ...), whose assignments are not topic-partitions."""
    if protocol_type != "consumer" or not raw:
        return ()
    try:
        decoded = ConsumerProtocolMemberAssignment.decode(bytes(raw))
    except Exception:  # a client's own format: show no assignment rather than fail the poll
        return ()
    merged: dict[str, set[int]] = defaultdict(set)
    for topic, partitions in decoded.assignment:
        merged[topic].update(partitions)
    return tuple((topic, tuple(sorted(merged[topic]))) for topic in sorted(merged))


class _Admin(AIOKafkaAdminClient):  # type: ignore[misc]
    """The admin client with the requests above."""

    async def send(self, request: Any, node_id: int) -> Any:
        """Any request to one broker (the share-group requests of services/dashboard/share_groups.py)."""
        return await self._send_request(request, node_id)

    async def metadata(self) -> dict[str, Any]:
        response = await self._get_cluster_metadata(topics=None)
        result: dict[str, Any] = response.to_object()
        return result

    async def log_dir_sizes(self, node_ids: Iterable[int]) -> dict[tuple[str, int], int] | None:
        """Bytes on disk per partition (the largest replica's), or None when no broker answers
        DescribeLogDirs (unsupported)."""
        sizes: dict[tuple[str, int], int] = {}
        answered = False
        for node_id in node_ids:
            try:
                response = await ask(self._send_request, DESCRIBE_LOG_DIRS, node_id)
            except (IncompatibleBrokerVersion, NotImplementedError):
                continue  # the broker does not implement it (or no version we speak)
            except KafkaError as e:  # one broker of several unreachable: its replicas stay unknown
                log.debug("describe log dirs failed", node_id=node_id, error=str(e))
                continue
            answered = True
            for result in response.results:
                if result.error_code:
                    continue  # an offline log dir: its partitions stay unknown
                for topic in result.topics:
                    for p in topic.partitions:
                        if p.is_future_key:
                            continue  # a replica being moved between log dirs, not the live one
                        key = (str(topic.name), int(p.partition_index))
                        sizes[key] = max(sizes.get(key, 0), int(p.partition_size))
        return sizes if answered else None

    async def quorum_leader(self, node_ids: Iterable[int]) -> int | None:
        """The KRaft quorum's leader, asked of the first broker that answers (brokers forward
        DescribeMetadataQuorum to the controllers); None where no broker implements it."""
        for node_id in node_ids:
            try:
                answer = await ask(self._send_request, DESCRIBE_QUORUM, node_id)
            except (IncompatibleBrokerVersion, NotImplementedError):
                return None  # a cluster without KRaft's API (the bundled broker): none to ask
            except KafkaError as e:
                log.debug("describe quorum failed", node_id=node_id, error=str(e))
                continue
            partitions = [p for t in answer.topics for p in t.partitions]
            if answer.error_code == 0 and partitions and partitions[0].error_code == 0:
                leader = int(partitions[0].leader_id)
                return leader if leader >= 0 else None
        return None

    async def durability(self, node_ids: Iterable[int]) -> str | None:
        """The bundled broker's log.durability (fsync or page-cache), from DescribeConfigs of
        the first broker that answers; None where no broker has it (Apache Kafka)."""
        for node_id in node_ids:
            resource = ConfigResource(ConfigResourceType.BROKER, str(node_id), {DURABILITY: None})
            try:
                [response] = await self.describe_configs([resource])
            except (IncompatibleBrokerVersion, NotImplementedError):
                return None
            except KafkaError as e:
                log.debug("describe configs failed", node_id=node_id, error=str(e))
                continue
            for described in response.to_object()["resources"]:
                if described["error_code"]:
                    return None  # not allowed to describe the cluster's configs
                for entry in described["config_entries"]:
                    if entry.get("config_names", entry.get("config_name")) == DURABILITY:
                        return str(entry["config_value"])
            return None
        return None

    async def open_transactions(self, node_ids: Iterable[int]) -> list[DescribedTransaction] | None:
        """Every open transaction (ListTransactions on each broker, then DescribeTransactions on
        the one that listed it); None when the cluster does not implement the APIs."""
        found: list[DescribedTransaction] = []
        for node_id in node_ids:
            try:
                listed = await ask(self._send_request, LIST_TRANSACTIONS, node_id)
            except (IncompatibleBrokerVersion, NotImplementedError):
                return None
            ids = [str(t.transactional_id) for t in listed.transaction_states]
            if listed.error_code != 0 or not ids:
                continue
            found.extend(
                t
                for t in await self._describe_transactions(ids, node_id)
                if t.error_code == 0 and t.transaction_state in OPEN_TRANSACTION_STATES
            )
        return found

    async def _describe_transactions(self, ids: list[str], node_id: int) -> list[DescribedTransaction]:
        """DescribeTransactions of `ids`.  A transaction that ended since it was listed (or an id
        the broker no longer knows) may be described with no start time, -1, which kio cannot
        read as the timestamp the field is: the ids are then described one by one, and those
        whose answer cannot be read left out (none of them is open: an open transaction has
        started)."""
        try:
            return list((await ask(self._send_request, describe_transactions(ids), node_id)).transaction_states)
        except UndecodableResponse:
            if len(ids) == 1:
                log.debug("describe transactions unreadable", node_id=node_id, transactional_id=ids[0])
                return []
        return [t for one in ids for t in await self._describe_transactions([one], node_id)]

    async def list_groups(self, node_ids: Iterable[int]) -> dict[str, str | None]:
        """Every group id, with its type ("classic", "consumer", ...) where the broker says it
        (ListGroups v5), None where it does not (older brokers)."""
        found: dict[str, str | None] = {}
        for groups in await _gather(*(self._list_groups(node_id) for node_id in node_ids)):
            for group_id, group_type in groups:
                found[group_id] = found.get(group_id) or group_type
        return found

    async def _list_groups(self, node_id: int) -> list[tuple[str, str | None]]:
        try:
            answer = await ask(self._send_request, LIST_GROUP_TYPES, node_id)
            error_code = int(answer.error_code)
            groups = [(str(g.group_id), g.group_type or None) for g in answer.groups]
        except (IncompatibleBrokerVersion, NotImplementedError):  # no v5 on this broker
            older = (await self._send_request(AiokafkaListGroupsRequest(), node_id)).to_object()
            error_code = older["error_code"]
            groups = [(g["group"], None) for g in older["groups"]]
        if error_code:
            raise for_code(error_code)("Error listing consumer groups")
        return groups

    async def describe_groups_by_node(self, groups_by_node: dict[int, list[str]]) -> list[dict[str, Any]]:
        replies = await _gather(
            *(self._send_request(_DescribeGroupsRequest(groups), node) for node, groups in groups_by_node.items())
        )
        described: list[dict[str, Any]] = []
        for reply in replies:
            described.extend(reply.to_object()["groups"])
        return described


class ClusterReader:
    """Takes observations of one cluster.  `start()` connects (raises while the cluster is
    unreachable: call it again later), `observe()` reads, `close()` disconnects."""

    def __init__(self, client_kwargs: dict[str, Any], *, client_id: str = "streamshop-dashboard") -> None:
        self._kwargs = dict(client_kwargs)
        self._client_id = client_id
        self._admin: _Admin | None = None
        self._offsets: AIOKafkaConsumer | None = None
        self._stable: AIOKafkaConsumer | None = None  # read_committed: its end offsets are LSOs

    @property
    def started(self) -> bool:
        return self._admin is not None and self._offsets is not None and self._stable is not None

    async def start(self) -> None:
        admin = _Admin(**self._kwargs, client_id=self._client_id)
        # Group-less: it only asks for log start and end offsets, never joins or commits.
        offsets = AIOKafkaConsumer(**self._kwargs, client_id=self._client_id, group_id=None, enable_auto_commit=False)
        stable = AIOKafkaConsumer(
            **self._kwargs,
            client_id=self._client_id,
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
        )
        try:
            await admin.start()
            await offsets.start()
            await stable.start()
        except BaseException:
            await _quietly(admin.close())
            await _quietly(offsets.stop())
            await _quietly(stable.stop())
            raise
        self._admin, self._offsets, self._stable = admin, offsets, stable

    async def close(self) -> None:
        admin, offsets, stable = self._admin, self._offsets, self._stable
        self._admin = self._offsets = self._stable = None
        for consumer in (offsets, stable):
            if consumer is not None:
                await _quietly(consumer.stop())
        if admin is not None:
            await _quietly(admin.close())

    async def observe(self) -> Observation:
        if self._admin is None or self._offsets is None:
            raise RuntimeError("ClusterReader.start() first")
        admin, consumer = self._admin, self._offsets
        wall, mono = time.time(), time.monotonic()
        metadata = await admin.metadata()
        brokers = tuple(
            BrokerInfo(b["node_id"], b["host"], b["port"], b.get("rack"))
            for b in sorted(metadata["brokers"], key=lambda b: b["node_id"])
        )
        controller = metadata.get("controller_id")
        leaders: dict[str, dict[int, int]] = {}
        replication: dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {}
        internal: dict[str, bool] = {}
        for t in metadata["topics"]:
            if t["error_code"] == 0:
                leaders[t["topic"]] = {p["partition"]: p["leader"] for p in t["partitions"]}
                internal[t["topic"]] = bool(t.get("is_internal")) or t["topic"].startswith("__")
                for p in t["partitions"]:
                    replication[(t["topic"], p["partition"])] = (
                        tuple(p["replicas"]),
                        tuple(p["isr"]),
                        tuple(p.get("offline_replicas") or ()),
                    )
        tps = [TopicPartition(topic, p) for topic, parts in leaders.items() for p in parts]
        node_ids = [b.node_id for b in brokers]
        starts, ends, sizes, groups, quorum_leader, open_txns, durability = await _gather(
            consumer.beginning_offsets(tps) if tps else _empty(),
            consumer.end_offsets(tps) if tps else _empty(),
            admin.log_dir_sizes(node_ids),
            self._groups(admin, node_ids),
            admin.quorum_leader(node_ids),
            admin.open_transactions(node_ids),
            admin.durability(node_ids),
        )
        transactions = None if open_txns is None else await self._transactions(open_txns, ends)
        topics = {
            name: TopicInfo(
                name,
                internal[name],
                tuple(
                    PartitionInfo(
                        p,
                        leader,
                        starts.get(TopicPartition(name, p)),
                        ends.get(TopicPartition(name, p)),
                        sizes.get((name, p)) if sizes is not None else None,
                        *replication[(name, p)],
                    )
                    for p, leader in sorted(parts.items())
                ),
            )
            for name, parts in leaders.items()
        }
        return Observation(
            wall=wall,
            mono=mono,
            brokers=brokers,
            controller_id=controller if controller is not None and controller >= 0 else None,
            topics=topics,
            groups=groups,
            sizes_known=sizes is not None,
            quorum_leader=quorum_leader,
            transactions=transactions,
            durability=durability,
        )

    async def _transactions(
        self, described: list[DescribedTransaction], ends: dict[TopicPartition, int]
    ) -> tuple[TransactionInfo, ...]:
        """Each open transaction with its partitions' high watermark and last stable offset
        (ListOffsets at read_committed, asked only for those partitions)."""
        assert self._stable is not None
        wanted = {
            TopicPartition(str(t.topic), int(p))
            for d in described
            for t in d.topics
            if not t.topic.startswith("__")
            for p in t.partitions
        }
        stable = await self._stable.end_offsets(sorted(wanted)) if wanted else {}
        return tuple(
            TransactionInfo(
                transactional_id=str(d.transactional_id),
                producer_id=int(d.producer_id),
                producer_epoch=int(d.producer_epoch),
                state=d.transaction_state,
                timeout_ms=d.transaction_timeout // _MS,
                start_ms=round(d.transaction_start_time.timestamp() * 1000),
                partitions=tuple(
                    (str(t.topic), int(p), ends.get(TopicPartition(t.topic, p)), stable.get(TopicPartition(t.topic, p)))
                    for t in sorted(d.topics, key=lambda t: t.topic)
                    if not t.topic.startswith("__")
                    for p in sorted(t.partitions)
                ),
            )
            for d in described
        )

    async def _groups(self, admin: _Admin, node_ids: list[int]) -> dict[str, GroupInfo]:
        types = await admin.list_groups(node_ids)
        group_ids = sorted(types)
        if not group_ids:
            return {}
        coordinators = await _gather(*(admin.find_coordinator(g) for g in group_ids))
        by_node: dict[int, list[str]] = defaultdict(list)
        shares_by_node: dict[int, list[str]] = defaultdict(list)  # share groups: their own APIs
        for group_id, node in zip(group_ids, coordinators, strict=True):
            (shares_by_node if types.get(group_id) == "share" else by_node)[node].append(group_id)
        coordinator_of = dict(zip(group_ids, coordinators, strict=True))
        shares = await _gather(*(describe_share_groups(admin.send, n, ids) for n, ids in shares_by_node.items()))
        described = await admin.describe_groups_by_node(by_node) if by_node else []
        live = [d for d in described if d["error_code"] == 0 and d["state"] not in _DEAD_STATES]
        offsets = await _gather(
            *(_or_error(admin.list_consumer_group_offsets(d["group"], coordinator_of[d["group"]])) for d in live)
        )
        out: dict[str, GroupInfo] = {}
        for d, answer in zip(live, offsets, strict=True):
            error, committed = None, answer
            if isinstance(answer, KafkaError):
                error, committed = f"offsets unavailable: {answer}", {}
            out[d["group"]] = GroupInfo(
                group_id=d["group"],
                state=d["state"],
                protocol_type=d["protocol_type"],
                protocol=d["protocol"],
                group_type=types.get(d["group"]),
                members=tuple(
                    MemberInfo(
                        m["member_id"],
                        m["client_id"],
                        m["client_host"],
                        decode_assignment(d["protocol_type"], m["member_assignment"]),
                    )
                    for m in d["members"]
                ),
                committed={(tp.topic, tp.partition): meta.offset for tp, meta in committed.items() if meta.offset >= 0},
                committer=commit_note.newest(meta.metadata for meta in committed.values() if meta.offset >= 0),
                error=error,
            )
        for found in shares:
            out.update(found)
        return out


async def _gather(*awaitables: Awaitable[Any]) -> list[Any]:
    """`asyncio.gather` that cancels the others when one fails: a request still retrying
    against a broker that went away must not outlive the failed observation."""
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()


async def _or_error(awaitable: Awaitable[Any]) -> Any:
    """The result, or the KafkaError (one group's failure is shown on that group only)."""
    try:
        return await awaitable
    except KafkaError as e:
        return e


async def _empty() -> dict[TopicPartition, int]:
    return {}


async def _quietly(closing: Any) -> None:
    with contextlib.suppress(Exception):
        await closing
