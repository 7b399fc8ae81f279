"""Which registry instance writes: one primary, elected through Kafka's group protocol.

As Confluent's and Karapace's registries do, every instance joins one group (``group_id``)
with a protocol type of its own (``sr``), so no consumer can join it by mistake. Each member's
metadata says where it serves HTTP, whether it may be elected, and whether it holds the role
now. The group's leader (chosen by the broker) picks the primary and puts it in every member's
assignment; the others forward writes to it (`registry.forward`).

The leader keeps the current primary while it stays in the group, so a new instance joining
does not move the role; otherwise it picks the eligible member with the lowest URL. A member
that hears of a rebalance stops taking writes until the new assignment says who writes.

Electing is not enough to be safe: a primary that stalls past its session timeout is replaced
while it may still be writing. The store fences it (a transactional producer whose id every
primary takes over, `registry.store`), so the group decides who may write and the fence makes
sure only one can.

Every byte of another member's metadata and of the leader's assignment is input from the
network: it is bounded, and a member whose metadata does not parse is never elected.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from aiokafka import errors as kafka_errors
from aiokafka.client import AIOKafkaClient, ConnectionGroup, CoordinationType
from aiokafka.protocol.group import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest

from contracts import bounded_json
from registry.config import RegistryConfig

log = structlog.get_logger(__name__)

PROTOCOL_TYPE = "sr"
PROTOCOL = "streamshop-v1"
MAX_METADATA_BYTES = 4096  # a member's metadata or an assignment larger than this is ignored
_NO_ERROR = 0
_MEMBER_ID_REQUIRED = 79
_REJOIN = frozenset((22, 25, 27))  # ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS


@dataclass(frozen=True)
class Candidate:
    """One member as its metadata describes it."""

    member_id: str
    url: str
    eligible: bool
    primary: bool


@dataclass(frozen=True)
class Primary:
    """The outcome of one generation: who writes, and whether that is this instance."""

    member_id: str
    url: str
    generation: int
    is_self: bool


def member_metadata(url: str, eligible: bool, primary: bool) -> bytes:
    return json.dumps({"version": 1, "url": url, "eligible": eligible, "primary": primary}).encode()


def _bounded_object(raw: bytes | None) -> dict[str, Any] | None:
    """A JSON object of at most MAX_METADATA_BYTES, within the project's JSON bounds; None else."""
    if raw is None or len(raw) > MAX_METADATA_BYTES:
        return None
    try:
        value = bounded_json.loads(raw)
    except ValueError:  # bad syntax, beyond the bounds, or not UTF-8
        return None
    return value if isinstance(value, dict) else None


def parse_member(member_id: str, raw: bytes | None) -> Candidate | None:
    """A member's metadata; None when it is not ours or not well formed."""
    value = _bounded_object(raw)
    if value is None:
        return None
    url, eligible, primary = value.get("url"), value.get("eligible"), value.get("primary")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")) or len(url) > 1024:
        return None
    if not isinstance(eligible, bool) or not isinstance(primary, bool):
        return None
    return Candidate(member_id, url, eligible, primary)


def choose_primary(candidates: Sequence[Candidate]) -> Candidate | None:
    """The leader's choice: the eligible member that holds the role (the lowest URL if several
    claim it, after a split), else the eligible member with the lowest URL."""
    eligible = sorted((c for c in candidates if c.eligible), key=lambda c: (c.url, c.member_id))
    holding = [c for c in eligible if c.primary]
    ranked = holding or eligible
    return ranked[0] if ranked else None


def assignment(primary: Candidate | None) -> bytes:
    if primary is None:
        return json.dumps({"version": 1, "primary": None}).encode()
    return json.dumps({"version": 1, "primary": primary.member_id, "url": primary.url}).encode()


def parse_assignment(raw: bytes | None) -> tuple[str, str] | None:
    """(member id, URL) of the primary the leader named; None when it named none or the bytes
    do not parse."""
    value = _bounded_object(raw)
    if value is None:
        return None
    member, url = value.get("primary"), value.get("url")
    if not isinstance(member, str) or not isinstance(url, str) or not url.startswith(("http://", "https://")):
        return None
    return member, url


class PrimaryElection:
    """This instance's membership of the registry group; `primary` is the current outcome
    (None while a rebalance runs or no member may be elected), `on_change` hears every change."""

    def __init__(
        self,
        config: RegistryConfig,
        on_change: Callable[[Primary | None], None],
        on_confirmed: Callable[[Primary, float], None] | None = None,
    ) -> None:
        self.config = config
        self._on_change = on_change
        # Hears every heartbeat answered without error, with when it was sent: the group still
        # has this generation, and so still the primary it named.
        self._on_confirmed = on_confirmed
        self._client: AIOKafkaClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._url = ""
        self._member_id = ""
        self._generation = -1
        self._coordinator: int | None = None
        self._primary: Primary | None = None
        # Whether this instance held the role in the last generation it was a member of; it
        # claims it when it rejoins, so a rebalance (another instance joining or leaving) does
        # not move the role. Forgotten when the group forgot this member: one paused past its
        # session was replaced, and claiming the role back would move it again.
        self._held = False
        self._changed = asyncio.Event()

    @property
    def primary(self) -> Primary | None:
        return self._primary

    async def start(self, url: str) -> None:
        """Join the group, announcing `url` as where this instance serves HTTP."""
        self._url = self.config.advertised_url or url
        self._client = AIOKafkaClient(
            **self.config.kafka_client_kwargs(),
            client_id=self.config.client_id,
            # Asking for no topic by name: the client never makes the broker create one.
            metadata_max_age_ms=300_000,
        )
        await self._client.bootstrap()
        self._task = asyncio.create_task(self._run(), name="registry-election")

    async def stop(self) -> None:
        """Leave the group, so the others elect a new primary at once rather than after the
        session timeout."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._client is not None:
            if self._coordinator is not None and self._member_id:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._send(LeaveGroupRequest(self.config.group_id, self._member_id)), 2.0)
            await self._client.close()
            self._client = None
        self._set(None)

    async def wait_primary(self, within: float) -> Primary | None:
        """The primary, waiting up to `within` seconds for an election to name one."""
        deadline = time.monotonic() + within
        while self._primary is None and (remaining := deadline - time.monotonic()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
        return self._primary

    def _set(self, primary: Primary | None) -> None:
        if primary == self._primary:
            return
        self._primary = primary
        event, self._changed = self._changed, asyncio.Event()
        event.set()
        if primary is None:
            log.info("primary unknown: waiting for the group", group=self.config.group_id)
        else:
            log.info(
                "primary elected",
                group=self.config.group_id,
                primary=primary.url,
                generation=primary.generation,
                this_instance=primary.is_self,
            )
        self._on_change(primary)

    # -- the group protocol ----------------------------------------------------------------

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            try:
                await self._join_and_sync()
                backoff = 0.1
                await self._heartbeat()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("registry group: rejoining", group=self.config.group_id, error=f"{type(e).__name__}: {e}")
                self._coordinator = None
                self._held = False
                self._set(None)
                await asyncio.sleep(backoff)
                backoff = min(2.0, backoff * 2)

    async def _send(self, request: Any) -> Any:
        assert self._client is not None
        if self._coordinator is None:
            self._coordinator = await self._client.coordinator_lookup(CoordinationType.GROUP, self.config.group_id)
        return await self._client.send(self._coordinator, request, group=ConnectionGroup.COORDINATION)

    async def _join_and_sync(self) -> None:
        metadata = member_metadata(self._url, self.config.primary_eligible, self._held)
        while True:
            joined = await self._send(
                JoinGroupRequest(
                    self.config.group_id,
                    self.config.session_timeout_ms,
                    self.config.session_timeout_ms,  # rebalance timeout: a member rejoins within a session
                    self._member_id,
                    None,  # no static membership: a null group.instance.id
                    PROTOCOL_TYPE,
                    [(PROTOCOL, metadata)],
                )
            )
            if joined.error_code == _MEMBER_ID_REQUIRED:
                self._member_id = joined.member_id
                continue
            if joined.error_code in _REJOIN and joined.error_code != 27:
                self._member_id = ""
                self._held = False
            self._check(joined.error_code, "JoinGroup")
            break
        self._member_id = joined.member_id
        self._generation = joined.generation_id
        assignments: list[tuple[str, bytes]] = []
        if joined.leader_id == self._member_id:
            candidates = [c for m in joined.members if (c := parse_member(m[0], m[-1])) is not None]
            chosen = choose_primary(candidates)
            log.info(
                "registry group leader: assigning the primary",
                members=len(joined.members),
                eligible=sum(c.eligible for c in candidates),
                primary=chosen.url if chosen else None,
            )
            assignments = [(m[0], assignment(chosen)) for m in joined.members]
        synced = await self._send(
            SyncGroupRequest(self.config.group_id, self._generation, self._member_id, None, assignments)
        )
        self._check(synced.error_code, "SyncGroup")
        named = parse_assignment(synced.member_assignment)
        self._held = named is not None and named[0] == self._member_id
        if named is None:
            self._set(None)
            log.warning("no registry instance may be elected primary", group=self.config.group_id)
            return
        member, url = named
        self._set(Primary(member, url, self._generation, member == self._member_id))

    async def _heartbeat(self) -> None:
        """Heartbeat until the group rebalances (then return, to rejoin)."""
        interval = self.config.heartbeat_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            sent_at = time.monotonic()
            response = await self._send(HeartbeatRequest(self.config.group_id, self._generation, self._member_id))
            if response.error_code in _REJOIN:
                if response.error_code != 27:  # a member the group forgot rejoins as a new one
                    self._member_id = ""
                    self._held = False
                self._set(None)
                return
            self._check(response.error_code, "Heartbeat")
            if self._primary is not None and self._on_confirmed is not None:
                self._on_confirmed(self._primary, sent_at)

    def _check(self, code: int, what: str) -> None:
        if code == _NO_ERROR:
            return
        error = kafka_errors.for_code(code)
        if code in (14, 15, 16):  # the coordinator is loading, unavailable or moved: find it again
            self._coordinator = None
        raise error(f"{what} of group {self.config.group_id}")
