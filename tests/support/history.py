"""Histories of what Kafka clients were told and what they read, and the checks that judge them.

A fault test records every client's view (a produce acknowledged at an offset, a commit
acknowledged, a record delivered to a share-group member, a transaction committed) and, at the
end, what the log holds.  Each check returns readable violations; an empty list is a pass.

Times are `time.monotonic()` seconds: on Linux CLOCK_MONOTONIC is one clock for every process
of the machine, so the histories of several client processes compare.  A check only reports
what the timestamps prove: an interval in which something *certainly* held (a member certainly
owned a partition, certainly held a record's acquisition lock) is bounded inward, so a slow
machine makes a check weaker, never wrong.

Client processes write their events as JSON lines (`append_jsonl`), the test loads them
(`History.load`) next to its own."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from broker.protocol.batch import NO_PRODUCER_ID

ProduceOutcome = Literal["acked", "failed", "unknown"]
CommitOutcome = Literal["acked", "failed"]
AckKind = Literal["accept", "release", "reject"]
TxnOutcome = Literal["committed", "aborted", "unknown"]

# Record identity on a topic: (topic, partition, offset).
Position = tuple[str, int, int]
# The producer id and epoch a record was written under.
Session = tuple[int, int]


@dataclass(frozen=True)
class Produced:
    """One record a producer sent and what it was told: acked (with its partition and offset),
    failed (certainly not written: refused before it was sent), or unknown (timed out or the
    connection dropped: it may or may not be in the log)."""

    kind: Literal["produced"] = field(default="produced", init=False)
    client: str = ""
    topic: str = ""
    value: bytes = b""
    outcome: ProduceOutcome = "acked"
    partition: int | None = None
    offset: int | None = None
    at: float = 0.0


@dataclass(frozen=True)
class Read:
    """One record a consumer was given.  `group` is None for a reader without a group (assign).
    `requested_after` is a lower bound of when the broker handed it out (the start of the poll
    that could have asked for it); `received` is when the application got it.  Share groups
    also report the record's delivery count."""

    kind: Literal["read"] = field(default="read", init=False)
    client: str = ""
    group: str | None = None
    member: str = ""
    topic: str = ""
    partition: int = 0
    offset: int = 0
    value: bytes = b""
    requested_after: float = 0.0
    received: float = 0.0
    delivery_count: int | None = None


@dataclass(frozen=True)
class Committed:
    """An offset commit of a consumer group member: the next offset to read, started and done."""

    kind: Literal["committed"] = field(default="committed", init=False)
    client: str = ""
    group: str = ""
    member: str = ""
    topic: str = ""
    partition: int = 0
    offset: int = 0
    outcome: CommitOutcome = "acked"
    started: float = 0.0
    done: float = 0.0


@dataclass(frozen=True)
class Acknowledged:
    """A share-group member's acknowledgement of one delivered record, started and done."""

    kind: Literal["acknowledged"] = field(default="acknowledged", init=False)
    client: str = ""
    group: str = ""
    member: str = ""
    topic: str = ""
    partition: int = 0
    offset: int = 0
    ack: AckKind = "accept"
    outcome: CommitOutcome = "acked"
    started: float = 0.0
    done: float = 0.0


@dataclass(frozen=True)
class Owned:
    """A consumer group member's ownership of a partition, from its assignment callback to the
    start of its revocation (or loss) callback; `until` None: still owned when the history ended."""

    kind: Literal["owned"] = field(default="owned", init=False)
    client: str = ""
    group: str = ""
    member: str = ""
    topic: str = ""
    partition: int = 0
    since: float = 0.0
    until: float | None = None


@dataclass(frozen=True)
class Left:
    """A member began to leave its group cleanly (close): what it held is released from then on."""

    kind: Literal["left"] = field(default="left", init=False)
    client: str = ""
    group: str = ""
    member: str = ""
    at: float = 0.0


@dataclass(frozen=True)
class Transaction:
    """One transaction of a transactional producer: the values it wrote and what it was told."""

    kind: Literal["transaction"] = field(default="transaction", init=False)
    client: str = ""
    transactional_id: str = ""
    sequence: int = 0
    topic: str = ""
    values: tuple[bytes, ...] = ()
    outcome: TxnOutcome = "unknown"
    at: float = 0.0


@dataclass(frozen=True)
class Fault:
    """A fault the test injected (SIGKILL, SIGSTOP, SIGCONT, a restart), for the report."""

    kind: Literal["fault"] = field(default="fault", init=False)
    what: str = ""
    target: str = ""
    at: float = 0.0


@dataclass(frozen=True)
class Stored:
    """A record the log holds, read back at the end (read_committed unless said otherwise)."""

    kind: Literal["stored"] = field(default="stored", init=False)
    topic: str = ""
    partition: int = 0
    offset: int = 0
    value: bytes = b""


Event = Produced | Read | Committed | Acknowledged | Owned | Left | Transaction | Fault | Stored
E = TypeVar("E", bound=Event)
_KINDS: dict[str, type[Any]] = {
    "produced": Produced,
    "read": Read,
    "committed": Committed,
    "acknowledged": Acknowledged,
    "owned": Owned,
    "left": Left,
    "transaction": Transaction,
    "fault": Fault,
    "stored": Stored,
}
_BYTES_FIELDS = {"value"}


def to_json(event: Event) -> str:
    """One event as a JSON line (bytes as latin-1 text: every byte maps to one code point)."""
    data = asdict(event)
    for name in _BYTES_FIELDS & data.keys():
        data[name] = data[name].decode("latin-1")
    if "values" in data:
        data["values"] = [v.decode("latin-1") for v in data["values"]]
    return json.dumps(data, separators=(",", ":"))


def from_json(line: str) -> Event:
    data: dict[str, Any] = json.loads(line)
    cls = _KINDS[data.pop("kind")]
    for name in _BYTES_FIELDS & data.keys():
        data[name] = data[name].encode("latin-1")
    if "values" in data:
        data["values"] = tuple(v.encode("latin-1") for v in data["values"])
    event: Event = cls(**data)
    return event


def append_jsonl(path: Path, event: Event) -> None:
    """Append one event and flush it: a process SIGKILLed right after has it on record."""
    with path.open("a") as f:
        f.write(to_json(event) + "\n")


@dataclass
class History:
    """Every event of a test run, in the order recorded."""

    events: list[Event] = field(default_factory=list)

    def add(self, event: Event) -> None:
        self.events.append(event)

    def extend(self, events: Iterable[Event]) -> None:
        self.events.extend(events)

    def load(self, path: Path) -> None:
        """Add a client process's JSON lines; a last line cut short by SIGKILL is left out."""
        lines = path.read_text().splitlines() if path.exists() else []
        for i, line in enumerate(lines):
            try:
                self.add(from_json(line))
            except (ValueError, KeyError, TypeError):
                if i != len(lines) - 1:
                    raise

    def of(self, cls: type[E]) -> Iterator[E]:
        return (e for e in self.events if isinstance(e, cls))

    def summary(self) -> str:
        """Counts of each kind of event and outcome, for a test's report."""
        counts: dict[str, int] = defaultdict(int)
        for e in self.events:
            outcome = getattr(e, "outcome", None)
            counts[e.kind if outcome is None else f"{e.kind}:{outcome}"] += 1
        faults = ", ".join(f"{f.what} {f.target}" for f in self.of(Fault))
        return " ".join(f"{k}={v}" for k, v in sorted(counts.items())) + (f"; faults: {faults}" if faults else "")


def _stored(history: History) -> dict[Position, bytes]:
    return {(s.topic, s.partition, s.offset): s.value for s in history.of(Stored)}


def _show(value: bytes) -> str:
    return value.decode(errors="replace")


# --- producing ---------------------------------------------------------------------------


def lost_acknowledged(history: History) -> list[str]:
    """Every acknowledged record is in the log, with its value, at the offset acknowledged."""
    stored = _stored(history)
    out = []
    for p in history.of(Produced):
        if p.outcome != "acked":
            continue
        if p.partition is None or p.offset is None:
            out.append(f"{p.client}: {_show(p.value)!r} acknowledged without an offset")
            continue
        found = stored.get((p.topic, p.partition, p.offset))
        if found != p.value:
            where = f"{p.topic}-{p.partition}@{p.offset}"
            held = "nothing" if found is None else repr(_show(found))
            out.append(f"{p.client}: {_show(p.value)!r} acknowledged at {where}, the log holds {held} there")
    return out


def duplicated_in_log(history: History, sessions: Mapping[Position, Session] | None = None) -> list[str]:
    """No value is stored twice (each producer sends each value once, so a second copy is a
    retry that idempotence should have dropped).

    With `sessions`, the producer id and epoch each stored record was written under, copies
    under different epochs of one producer are not counted.  Idempotence holds within an
    epoch: when records time out, the client bumps its epoch and renumbers from sequence 0
    the records whose first send it never heard back from, so no broker can tell a resend
    from a new record (librdkafka and the Java client alike; Kafka gives exactly-once
    across that only to transactions)."""
    where: dict[bytes, list[Position]] = defaultdict(list)
    for s in history.of(Stored):
        where[s.value].append((s.topic, s.partition, s.offset))
    out = []
    for value, places in where.items():
        if len(places) < 2:
            continue
        if sessions is not None and _across_epochs([sessions[p] for p in places]):
            continue
        out.append(f"{_show(value)!r} is stored {len(places)} times: {sorted(places)}")
    return out


def _across_epochs(writers: list[Session]) -> bool:
    """The copies were written by one idempotent producer, each under an epoch of its own."""
    ids = {producer_id for producer_id, _ in writers}
    epochs = [epoch for _, epoch in writers]
    return len(ids) == 1 and NO_PRODUCER_ID not in ids and len(set(epochs)) == len(epochs)


# --- consumer groups ---------------------------------------------------------------------


def redelivered_after_commit(history: History) -> list[str]:
    """A group never reads again a record below an offset it committed and was told so: the
    read was asked for (`requested_after`) after the commit was acknowledged."""
    commits: dict[tuple[str, str, int], list[Committed]] = defaultdict(list)
    for c in history.of(Committed):
        if c.outcome == "acked":
            commits[(c.group, c.topic, c.partition)].append(c)
    out = []
    for r in history.of(Read):
        if r.group is None:
            continue
        for c in commits.get((r.group, r.topic, r.partition), ()):
            if r.offset < c.offset and r.requested_after > c.done:
                out.append(
                    f"group {r.group}: {r.member} read {r.topic}-{r.partition}@{r.offset} ({_show(r.value)!r}) "
                    f"at {r.received:.3f}, after {c.member}'s commit of offset {c.offset} was acknowledged "
                    f"at {c.done:.3f}"
                )
                break
    return out


def commit_regressed(history: History) -> list[str]:
    """No commit acknowledged below an offset the group was already told it committed (the
    commit started after that acknowledgement): with members that commit only what they read
    and never seek, that is a fenced member's (a zombie's) commit the broker should refuse."""
    acked: dict[tuple[str, str, int], list[Committed]] = defaultdict(list)
    for c in history.of(Committed):
        if c.outcome == "acked":
            acked[(c.group, c.topic, c.partition)].append(c)
    out = []
    for (group, topic, partition), commits in acked.items():
        commits.sort(key=lambda c: c.done)
        for i, later in enumerate(commits):
            higher = [c for c in commits[:i] if c.done < later.started and c.offset > later.offset]
            if higher:
                first = higher[0]
                out.append(
                    f"group {group}: {later.member}'s commit of {topic}-{partition} offset {later.offset} "
                    f"acknowledged at {later.done:.3f}, after {first.member}'s commit of offset {first.offset} "
                    f"was acknowledged at {first.done:.3f}"
                )
    return out


def owned_by_two(history: History) -> list[str]:
    """No partition is owned by two members of one group at once.  A member records an
    ownership when assigned (open) and again when it is revoked (closed); one it never closed
    ends when the member was SIGKILLed (a `Fault` naming it), or never."""
    killed = {f.target: f.at for f in history.of(Fault) if f.what == "SIGKILL"}
    latest: dict[tuple[str, str, str, int, float], Owned] = {}
    for o in history.of(Owned):
        key = (o.group, o.member, o.topic, o.partition, o.since)
        if key not in latest or o.until is not None:
            latest[key] = o
    spans: dict[tuple[str, str, int], list[tuple[float, float, Owned]]] = defaultdict(list)
    for o in latest.values():
        end = o.until if o.until is not None else killed.get(o.member, float("inf"))
        spans[(o.group, o.topic, o.partition)].append((o.since, end, o))
    out = []
    for (group, topic, partition), owned in spans.items():
        owned.sort(key=lambda s: s[0])
        for i, (_, a_end, a) in enumerate(owned):
            for b_start, _, b in owned[i + 1 :]:
                if b_start >= a_end:
                    break
                if b.member != a.member:
                    out.append(
                        f"group {group}: {topic}-{partition} owned by {a.member} from {a.since:.3f} to "
                        f"{a_end:.3f} and by {b.member} from {b.since:.3f}"
                    )
    return out


def lost_to_group(history: History, group: str) -> list[str]:
    """Every record the log holds was read by the group at least once (at-least-once)."""
    read = {(r.topic, r.partition, r.offset) for r in history.of(Read) if r.group == group}
    return [
        f"group {group} never read {t}-{p}@{o} ({_show(v)!r})"
        for (t, p, o), v in sorted(_stored(history).items())
        if (t, p, o) not in read
    ]


# --- share groups ------------------------------------------------------------------------


def _acks(history: History) -> dict[tuple[str, str, Position], list[Acknowledged]]:
    acks: dict[tuple[str, str, Position], list[Acknowledged]] = defaultdict(list)
    for a in history.of(Acknowledged):
        acks[(a.group, a.member, (a.topic, a.partition, a.offset))].append(a)
    return acks


def _ended(history: History) -> dict[tuple[str, str], float]:
    """When each member's share session certainly ended: its clean leave began, or it was
    SIGKILLed (its connection closes with it, and Kafka ends a share session with its
    connection, releasing what it held)."""
    killed = {f.target: f.at for f in history.of(Fault) if f.what == "SIGKILL"}
    ended: dict[tuple[str, str], float] = {}
    for lv in history.of(Left):
        ended[(lv.group, lv.member)] = min(lv.at, ended.get((lv.group, lv.member), lv.at))
    for r in history.of(Read):
        if r.group is not None and r.member in killed:
            key = (r.group, r.member)
            ended[key] = min(killed[r.member], ended.get(key, killed[r.member]))
    return ended


def held_by_two(history: History, lock_ms: int) -> list[str]:
    """No record is held by two share-group members at once.  A member certainly holds a
    delivered record from when it received it until the earliest of: the lock running out
    (counted from the poll that could have asked for it), its acknowledgement starting, its
    session ending (`_ended`).  Two such intervals of one record overlapping is a double
    delivery."""
    acks = _acks(history)
    left = _ended(history)
    holds: dict[tuple[str, Position], list[tuple[float, float, Read]]] = defaultdict(list)
    for r in history.of(Read):
        if r.group is None or r.delivery_count is None:
            continue
        pos = (r.topic, r.partition, r.offset)
        end = r.requested_after + lock_ms / 1000
        end = min([end, *(a.started for a in acks.get((r.group, r.member, pos), ()) if a.started >= r.received)])
        end = min(end, left.get((r.group, r.member), end))
        if end > r.received:
            holds[(r.group, pos)].append((r.received, end, r))
    out = []
    for (group, (topic, partition, offset)), spans in holds.items():
        spans.sort(key=lambda s: s[0])
        for i, (_, a_end, a) in enumerate(spans):
            for b_start, _, b in spans[i + 1 :]:
                if b_start >= a_end:
                    break
                out.append(
                    f"group {group}: {topic}-{partition}@{offset} delivered to {b.member} at {b.received:.3f} "
                    f"(delivery {b.delivery_count}) while {a.member} held it (received {a.received:.3f}, "
                    f"delivery {a.delivery_count}, lock certain until {a_end:.3f})"
                )
    return out


def repeated_delivery_count(history: History) -> list[str]:
    """Each delivery of a record has a delivery count of its own: the same count handed out
    twice is one acquisition given to two members (or twice to one).  Kafka takes a delivery
    back when the session that held it ends (the application may never have seen it), so a
    count may repeat after its first holder's session ended; and while the broker runs only:
    it persists counts lazily, so after a broker crash a count may repeat too."""
    ended = _ended(history)
    seen: dict[tuple[str, Position, int], Read] = {}
    out = []
    for r in sorted(history.of(Read), key=lambda r: r.received):
        if r.group is None or r.delivery_count is None:
            continue
        key = (r.group, (r.topic, r.partition, r.offset), r.delivery_count)
        first = seen.get(key)
        if first is not None and ended.get((r.group, first.member), float("inf")) > r.received:
            out.append(
                f"group {r.group}: {r.topic}-{r.partition}@{r.offset} delivery {r.delivery_count} given to "
                f"{first.member} at {first.received:.3f} and to {r.member} at {r.received:.3f}"
            )
        else:
            seen[key] = r
    return out


def accepted_redelivered(history: History) -> list[str]:
    """A record whose acceptance was acknowledged is never delivered again to its group."""
    accepted: dict[tuple[str, Position], Acknowledged] = {}
    for a in history.of(Acknowledged):
        key = (a.group, (a.topic, a.partition, a.offset))
        if a.ack == "accept" and a.outcome == "acked" and (key not in accepted or a.done < accepted[key].done):
            accepted[key] = a
    out = []
    for r in history.of(Read):
        if r.group is None:
            continue
        first = accepted.get((r.group, (r.topic, r.partition, r.offset)))
        if first is not None and r.requested_after > first.done:
            out.append(
                f"group {r.group}: {r.topic}-{r.partition}@{r.offset} delivered to {r.member} at "
                f"{r.received:.3f} (delivery {r.delivery_count}), after {first.member}'s acceptance was "
                f"acknowledged at {first.done:.3f}"
            )
    return out


# --- transactions ------------------------------------------------------------------------


def partial_transactions(history: History) -> list[str]:
    """Under read_committed each transaction is wholly visible or wholly invisible; one
    reported committed is wholly visible, one reported aborted wholly invisible.  A
    transaction recorded more than once is judged by its last record."""
    visible: dict[str, set[bytes]] = defaultdict(set)
    for s in history.of(Stored):
        visible[s.topic].add(s.value)
    last: dict[tuple[str, str, int], Transaction] = {}
    for t in history.of(Transaction):  # recorded unknown before the commit, then its outcome
        last[(t.client, t.transactional_id, t.sequence)] = t
    out = []
    for t in last.values():
        shown = [v for v in t.values if v in visible[t.topic]]
        name = f"{t.client}'s {t.transactional_id} transaction {t.sequence} ({t.outcome}, {len(t.values)} records)"
        if shown and len(shown) != len(t.values):
            missing = [_show(v) for v in t.values if v not in visible[t.topic]]
            out.append(f"{name}: {len(shown)} visible, missing e.g. {missing[:3]}")
        elif t.outcome == "committed" and not shown and t.values:
            out.append(f"{name}: reported committed, none visible")
        elif t.outcome == "aborted" and shown:
            out.append(f"{name}: reported aborted, all visible")
    return out
