"""Client quotas, as Kafka's (KIP-13, KIP-55, KIP-124, KIP-599): what they are, where they are
kept, how a client's use is measured and how long it is throttled.

A quota is set on an entity: a user, a client id, a user and client id, or the default of
either (`<default>`, a null name), with Kafka's keys: `producer_byte_rate` and
`consumer_byte_rate` (bytes/s), `request_percentage` (time spent on the client's requests, in
percent of one thread) and `controller_mutation_rate` (partitions created or deleted per
second).  For each key, a client (principal, client id) is held to the first entity that sets
it, in Kafka's order: user and client id, user and default client, user, default user and client
id, default user and default client, default user, client id, default client.  Clients that
match one entity through its named parts share one measurement; a default part is measured per
actual user or client id, as Kafka's metric tags are.

Rates are measured over `quota.window.num` windows of `quota.window.size.seconds` (Kafka's
`Rate`: a young measurement counts the windows it has not lived yet, so a client starts with
some credit); a client over its quota is throttled for `(rate - quota) / quota * window`, the
time its rate needs to fall back to the quota, and its channel is muted that long (acks=0
produces included).  As Kafka's ClientQuotaManager, byte rates are not capped: a producer of 16
MB requests against 1 MB/s waits out about 16 s after each (capped at one window it got 16x its
quota; capped at the measured span, 11 s, still nearly 2x, as samples then expire before the
rate is back under the quota).  The only bound is the wire's: `throttle_time_ms` is an int32.
`request_percentage` is bounded at one window, as Kafka's ClientRequestQuotaManager bounds it
(`maxThrottleTimeMs`).
Mutations use Kafka's token bucket (burst: quota x window): a request is refused with
THROTTLING_QUOTA_EXCEEDED while the bucket is negative, so a single request may take it below
zero and the next ones wait.

Quotas are durable in the cluster metadata log: `["quota", [[type, name], ...]]` -> {key: value}.

A measurement is per client id or user a client names, so it is state a client creates at will:
as Kafka's quota sensors, one idle for `SENSOR_EXPIRATION_S` (an hour) is dropped, and beyond
that at most `MAX_SENSORS` are kept, the least recently used dropped first (a client whose
measurement was dropped starts again, with a young measurement's credit).
"""

from __future__ import annotations

import collections
import math
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeAlias, TypeVar

import msgpack

from broker.clock import Clock, SystemClock
from broker.replay import need

if TYPE_CHECKING:
    from broker.metadata import MetadataStore

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
# key -> whether its value must be a whole number
CLIENT_KEYS = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}
IP_KEYS = {CONNECTION_CREATION_RATE: True}
THROTTLED = "The throttling quota has been exceeded."
MAX_THROTTLE_MS = 2**31 - 1  # throttle_time_ms is an int32
# Kafka's quota sensors expire after an hour without a recording (inactiveSensorExpirationTimeSeconds).
SENSOR_EXPIRATION_S = 3600.0
# Measurements kept at once (each ~1 KiB): a flood of client ids costs at most ~10 MiB.
MAX_SENSORS = 10_000

# One component of an entity: (type, name); name None is the type's default.
Component: TypeAlias = tuple[str, str | None]
Entity: TypeAlias = tuple[Component, ...]  # sorted by type, each type at most once


class QuotaError(ValueError):
    """An entity or value Kafka refuses (INVALID_REQUEST)."""


def entity_of(components: Iterable[Component]) -> Entity:
    """The entity named by a request's components, checked as Kafka's controller checks it."""
    parts = list(components)
    if not parts:
        raise QuotaError("Invalid empty client quota entity")
    types = [t for t, _ in parts]
    if len(set(types)) != len(types):
        raise QuotaError(f"Invalid quota entity: an entity type is named twice in {types}")
    for t in types:
        if t not in (USER, CLIENT_ID, IP):
            raise QuotaError(f"Unhandled client quota entity type: {t}")
    if IP in types and len(types) > 1:
        raise QuotaError("Invalid quota entity combination: ip cannot be combined with user or client-id")
    for t, name in parts:
        if name == "":
            raise QuotaError(f"Invalid empty {t} name: use null for the default")
    return tuple(sorted(parts))


def check_value(entity: Entity, key: str, value: float) -> None:
    keys = IP_KEYS if entity[0][0] == IP else CLIENT_KEYS
    whole = keys.get(key)
    if whole is None:
        raise QuotaError(f"Invalid configuration key {key}")
    if not math.isfinite(value) or value <= 0:
        raise QuotaError(f"Invalid value {value} for configuration key {key}: it must be positive")
    if whole and value != int(value):
        raise QuotaError(f"Invalid value {value} for configuration key {key}: it must be a whole number")


@dataclass(slots=True)
class _Sample:
    start: float
    value: float


class Rate:
    """Kafka's windowed rate: a sum over the last `windows` samples of `window_s` each, over the
    time they span, counted as at least `windows - 1` full windows."""

    def __init__(self, windows: int, window_s: float) -> None:
        self.windows = windows
        self.window_s = window_s
        self.samples: collections.deque[_Sample] = collections.deque()

    def _purge(self, now: float) -> None:
        horizon = now - self.windows * self.window_s
        while self.samples and self.samples[0].start <= horizon:
            self.samples.popleft()

    def record(self, value: float, now: float) -> None:
        self._purge(now)
        if not self.samples or now - self.samples[-1].start >= self.window_s:
            self.samples.append(_Sample(now, 0.0))
        self.samples[-1].value += value

    def span(self, now: float) -> float:
        elapsed = now - self.samples[0].start if self.samples else 0.0
        full = int(elapsed / self.window_s)
        if full < self.windows - 1:
            elapsed += (self.windows - 1 - full) * self.window_s
        return max(elapsed, self.window_s)

    def measure(self, now: float) -> float:
        self._purge(now)
        return sum(s.value for s in self.samples) / self.span(now)


_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


class Sensors(Generic[_K, _V]):
    """Per-client measurements, least recently used first: one unused for `expire_s` is
    dropped, and at most `limit` are kept (the least recently used goes first)."""

    def __init__(self, limit: int, expire_s: float) -> None:
        self.limit = limit
        self.expire_s = expire_s
        self._items: OrderedDict[_K, tuple[float, _V]] = OrderedDict()
        self.dropped = 0  # measurements dropped to keep within `limit`

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: _K, now: float, make: Callable[[], _V]) -> _V:
        """The measurement of `key`, made if there is none, marked used at `now`."""
        self.expire(now)
        item = self._items.pop(key, None)
        value = make() if item is None else item[1]
        self._items[key] = (now, value)
        if len(self._items) > self.limit:
            self._items.popitem(last=False)
            self.dropped += 1
        return value

    def expire(self, now: float) -> None:
        items = self._items
        while items:
            used, _ = next(iter(items.values()))
            if now - used < self.expire_s:
                break
            items.popitem(last=False)

    def clear(self) -> None:
        self._items.clear()


class TokenBucket:
    """Kafka's bucket for mutations: `quota` tokens a second, at most quota x window held."""

    def __init__(self, quota: float, burst_s: float, now: float) -> None:
        self.quota = quota
        self.burst = quota * burst_s
        self.tokens = self.burst
        self.at = now

    def refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.quota)
        self.at = now


class Quotas:
    """The configured quotas and every client's measured use of them."""

    def __init__(
        self,
        meta: MetadataStore,
        windows: int = 11,
        window_s: float = 1.0,
        *,
        clock: Clock | None = None,
        max_sensors: int = MAX_SENSORS,
        expire_s: float = SENSOR_EXPIRATION_S,
    ) -> None:
        self.meta = meta
        self.windows = windows
        self.window_s = window_s
        self.clock: Clock = clock or SystemClock()
        self.entities: dict[Entity, dict[str, float]] = {}
        # (key, the entity's actual parts...) -> its rate
        self._rates: Sensors[tuple[str, ...], Rate] = Sensors(max_sensors, expire_s)
        self._buckets: Sensors[tuple[tuple[str, ...], float], TokenBucket] = Sensors(max_sensors, expire_s)
        for key_bytes, (offset, value) in list(meta.other_records.items()):
            try:
                key = msgpack.unpackb(key_bytes)
                if key[0] == "quota":
                    self._load(key, value)
            except Exception as e:
                meta.skipped.skip(meta.meta_log.topic, offset, f"{type(e).__name__}: {e}")

    def _load(self, key: list[object], value: bytes | None) -> None:
        need(len(key) == 2 and isinstance(key[1], list), "quota key is not [quota, entity]")
        raw = key[1]
        assert isinstance(raw, list)
        need(all(isinstance(c, list) and len(c) == 2 for c in raw), "quota entity is not a list of pairs")
        entity = entity_of((str(t), None if n is None else str(n)) for t, n in raw)
        if value is None:
            self.entities.pop(entity, None)
            return
        values = msgpack.unpackb(value)
        need(isinstance(values, dict), "quota values are not a map")
        for k, v in values.items():
            need(isinstance(v, int | float), "quota value is not a number")
            check_value(entity, str(k), float(v))
        self.entities[entity] = {str(k): float(v) for k, v in values.items()}

    @property
    def active(self) -> bool:
        return bool(self.entities)

    @property
    def tracked(self) -> int:
        """Measurements held (rates and mutation buckets)."""
        return len(self._rates) + len(self._buckets)

    def _now(self) -> float:
        return self.clock.now_ms() / 1000

    # --- configuration ---------------------------------------------------------------

    def alter(self, changes: list[tuple[Entity, dict[str, float | None]]]) -> None:
        """Apply checked changes (None removes a key) durably, in one metadata batch."""
        records: list[tuple[list[object], object | None]] = []
        updated: dict[Entity, dict[str, float]] = {}
        for entity, ops in changes:
            values = dict(updated.get(entity, self.entities.get(entity, {})))
            for key, value in ops.items():
                if value is None:
                    values.pop(key, None)
                else:
                    values[key] = value
            updated[entity] = values
        for entity, values in updated.items():
            records.append((["quota", [list(c) for c in entity]], values or None))
        if records:
            self.meta.write_records(records)
        for entity, values in updated.items():
            if values:
                self.entities[entity] = values
            else:
                self.entities.pop(entity, None)
        self._rates.clear()  # measurements follow the entity that now applies
        self._buckets.clear()

    # --- enforcement -----------------------------------------------------------------

    def _applies(self, key: str, user: str, client_id: str) -> tuple[tuple[str, ...], float] | None:
        """The measurement key (the entity's parts, defaults replaced by the client's own)
        and the quota of the first entity in Kafka's order that sets `key`."""
        client = client_id or ""
        for entity in (
            ((CLIENT_ID, client), (USER, user)),
            ((CLIENT_ID, None), (USER, user)),
            ((USER, user),),
            ((CLIENT_ID, client), (USER, None)),
            ((CLIENT_ID, None), (USER, None)),
            ((USER, None),),
            ((CLIENT_ID, client),),
            ((CLIENT_ID, None),),
        ):
            values = self.entities.get(entity)
            if values is not None and key in values:
                actual = tuple(f"{t}={user if t == USER else client}" for t, _ in entity)
                return (key, *actual), values[key]
        return None

    def throttle_ms(self, key: str, user: str, client_id: str, amount: float, *, keep: bool = True) -> int:
        """Record `amount` against the client's `key` quota; how long it is to be throttled
        (0 within its quota).  With `keep` False a violating amount is not kept (a Fetch that
        is answered empty, as Kafka's)."""
        found = self._applies(key, user, client_id)
        if found is None:
            return 0
        sensor, bound = found
        now = self._now()
        rate = self._rates.get(sensor, now, lambda: Rate(self.windows, self.window_s))
        rate.record(amount, now)
        observed = rate.measure(now)
        if observed <= bound:
            return 0
        throttle = (observed - bound) / bound * rate.span(now)
        if not keep:
            rate.samples[-1].value -= amount
        return int(min(throttle, self.max_throttle_s(key)) * 1000)

    def max_throttle_s(self, key: str) -> float:
        """The longest throttle of `key`: one window for request time (Kafka's
        ClientRequestQuotaManager); for byte rates what `throttle_time_ms` can say."""
        return self.window_s if key == REQUEST_PERCENTAGE else MAX_THROTTLE_MS / 1000

    def window_bytes(self, key: str, user: str, client_id: str) -> int | None:
        """What the client's `key` quota allows over the whole window (a Fetch is bounded by it,
        as Kafka bounds it, so that one answer can fit the quota); None without a quota."""
        found = self._applies(key, user, client_id)
        return None if found is None else int(found[1] * self.windows * self.window_s)

    def mutation(self, user: str, client_id: str) -> TokenBucket | None:
        """The client's mutation bucket, refilled to now; None without a quota."""
        found = self._applies(CONTROLLER_MUTATION_RATE, user, client_id)
        if found is None:
            return None
        sensor, bound = found
        now = self._now()
        bucket = self._buckets.get((sensor, bound), now, lambda: TokenBucket(bound, self.windows * self.window_s, now))
        bucket.refill(now)
        return bucket


def quota_user(principal: str) -> str:
    """The user a quota names: the principal's name ("User:alice" is alice)."""
    return principal.split(":", 1)[1] if ":" in principal else principal


class MutationCharge:
    """One CreateTopics, CreatePartitions or DeleteTopics request's use of its client's
    `controller_mutation_rate`.  `strict` for the versions that know THROTTLING_QUOTA_EXCEEDED;
    older ones are served and only throttled, as Kafka does."""

    def __init__(self, quotas: Quotas, principal: str, client_id: str | None, *, strict: bool) -> None:
        self.bucket = quotas.mutation(quota_user(principal), client_id or "") if quotas.active else None
        self.strict = strict

    def exceeded(self) -> bool:
        return self.bucket is not None and self.strict and self.bucket.tokens < 0

    def take(self, partitions: int) -> None:
        if self.bucket is not None:
            self.bucket.tokens -= partitions

    def throttle_ms(self) -> int:
        if self.bucket is None or self.bucket.tokens >= 0:
            return 0
        return int(min(-self.bucket.tokens / self.bucket.quota * 1000, MAX_THROTTLE_MS))
