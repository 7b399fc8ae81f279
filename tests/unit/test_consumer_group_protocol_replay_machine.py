"""The consumer group protocol (KIP-848) as a stateful machine: simulated clients join, leave,
change subscriptions and lose responses while topics come and go, and the records written,
replayed in order or compacted, always give back the same groups.

Time is the `now` argument throughout: nothing sleeps.  The store is a real MetadataStore in a
temporary directory (topics are created on disk, and each creation bumps `store.version`).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import re2
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.coordinator.assignors import Assignment
from broker.coordinator.consumer_group import ConsumerGroupState
from broker.coordinator.consumer_groups import ConsumerGroupConfig, HeartbeatResult
from broker.metadata import MetadataStore
from broker.protocol.errors import ErrorCode, KafkaError
from tests.support.consumer_group_harness import (
    Harness,
    Partition,
    assert_exclusive,
    compacted,
    encoded,
    partitions_of,
    replayed,
    stored_view,
)
from tests.support.examples import examples

SUBSCRIPTIONS: list[tuple[tuple[str, ...] | None, str | None]] = [
    (("a",), None),
    (("b",), None),
    (("a", "b"), None),
    (None, "r.*"),
    (("b",), "r.*"),
]


@dataclass
class SimClient:
    member_id: str
    topics: tuple[str, ...] | None
    regex: str | None
    instance_id: str | None
    assignor: str | None
    rebalance_timeout_ms: int
    epoch: int = 0
    owned: Assignment = field(default_factory=dict)
    pending: Assignment | None = None  # an assignment it has been told but not applied yet
    full_next: bool = True  # after a join or a lost response, the client sends everything
    slow: bool = False  # applies what it is told at every other heartbeat only (a long callback)
    beats: int = 0


class GroupHistory(RuleBasedStateMachine):
    """Up to four simulated clients (static or not, by name or by pattern, prompt or slow to
    apply what they are told) join, heartbeat in bursts (full requests or not, reporting what
    they hold or not, losing responses), change subscriptions, leave, leave for now and come
    back under a new id, go silent past their session or their revocation timeout; topics
    appear and grow; the group is deleted when empty.  After every heartbeat no partition is
    held twice, by the coordinator's books or by the clients' own view; after every step the
    records written so far, replayed in order or compacted, give back the groups; and when
    everyone heartbeats promptly the group settles with every subscribed partition held once."""

    SESSION_MS = 10_000

    def __init__(self) -> None:
        super().__init__()
        self._dir = tempfile.TemporaryDirectory()
        self.store = MetadataStore(BrokerConfig(data_dir=Path(self._dir.name)), ManualClock(), recover=False)
        self.store.create_topic("a", 3, {})
        self.store.create_topic("b", 2, {})
        self.h = Harness(self.store, ConsumerGroupConfig(session_timeout_ms=self.SESSION_MS))
        self.clients: dict[str, SimClient] = {}
        self.away: dict[str, SimClient] = {}  # static members that left for now, by instance id
        self.serial = 0
        self.patterned = 0
        self.rows: list[tuple[Any, Any]] = []  # the records written so far, encoded

    def teardown(self) -> None:
        self.store.close(clean=True)
        self._dir.cleanup()

    def _new_id(self) -> str:
        self.serial += 1
        return f"m{self.serial}"

    def _send(
        self, c: SimClient, *, full: bool, report: bool, apply_now: bool, lose: bool, prompt: bool = False
    ) -> None:
        c.beats += 1
        apply_now = apply_now and (prompt or not c.slow or c.beats % 2 == 0)
        if c.pending is not None and apply_now:
            c.owned, c.pending = c.pending, None
        full = full or c.full_next or c.epoch == 0
        try:
            result = self.h.heartbeat(
                c.member_id,
                c.epoch,
                instance_id=c.instance_id,
                rebalance_timeout_ms=c.rebalance_timeout_ms if full else -1,
                topic_names=(c.topics or ()) if full else None,
                topic_regex=(c.regex or "") if full else None,
                server_assignor=c.assignor if full else None,
                owned={} if c.epoch == 0 else (c.owned if report or full else None),
            )
        except KafkaError as e:
            if e.code in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id, ErrorCode.group_id_not_found):
                c.epoch, c.owned, c.pending, c.full_next = 0, {}, None, True  # abandon all, rejoin
            elif e.code in (ErrorCode.fenced_instance_id, ErrorCode.unreleased_instance_id):
                del self.clients[c.member_id]  # a zombie (fatal) or a duplicate instance: it gives up
            else:
                raise
            return
        if lose:
            c.full_next = True
            return
        c.full_next = False
        c.epoch = result.member_epoch
        if result.assignment is not None:
            if apply_now:
                c.owned, c.pending = dict(result.assignment), None
            else:
                c.pending = dict(result.assignment)

    @precondition(lambda self: len(self.clients) + len(self.away) < 4)
    @rule(
        subscription=st.sampled_from(SUBSCRIPTIONS),
        static=st.booleans(),
        assignor=st.sampled_from([None, "uniform", "range"]),
        rebalance_timeout_ms=st.sampled_from([3_000, 60_000]),
        slow=st.booleans(),
    )
    def join(
        self,
        subscription: tuple[tuple[str, ...] | None, str | None],
        static: bool,
        assignor: str | None,
        rebalance_timeout_ms: int,
        slow: bool,
    ) -> None:
        member_id = self._new_id()
        topics, regex = subscription
        c = SimClient(member_id, topics, regex, f"i-{member_id}" if static else None, assignor, rebalance_timeout_ms)
        c.slow = slow
        self.clients[member_id] = c
        self.h.now += 10
        self._send(c, full=True, report=True, apply_now=True, lose=False)

    @precondition(lambda self: bool(self.clients))
    @rule(
        beats=st.lists(
            st.tuples(
                st.integers(0, 3), st.booleans(), st.booleans(), st.booleans(), st.sampled_from([False, False, True])
            ),
            min_size=1,
            max_size=8,
        )
    )
    def heartbeats(self, beats: list[tuple[int, bool, bool, bool, bool]]) -> None:
        """A burst of heartbeats: (which client, a full request, reporting what it holds,
        applying what it is told at once, losing the response)."""
        for which, full, report, apply_now, lose in beats:
            if not self.clients:
                return
            c = self.clients[sorted(self.clients)[which % len(self.clients)]]
            self.h.now += 100
            self._send(c, full=full, report=report, apply_now=apply_now, lose=lose)
            self.no_partition_is_held_twice()

    @precondition(lambda self: bool(self.clients))
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        c = self.clients.pop(data.draw(st.sampled_from(sorted(self.clients))))
        if c.epoch == 0:
            return  # never got in (or was fenced): nothing to leave
        self._leave(c, -1)

    def _leave(self, c: SimClient, epoch: int) -> HeartbeatResult | None:
        """Leave for good (-1) or for now (-2); None if the member was gone already."""
        self.h.now += 10
        try:
            return self.h.heartbeat(c.member_id, epoch, instance_id=c.instance_id)
        except KafkaError as e:
            if e.code not in (ErrorCode.unknown_member_id, ErrorCode.group_id_not_found, ErrorCode.fenced_instance_id):
                raise
            return None

    @precondition(lambda self: any(c.instance_id and c.epoch > 0 for c in self.clients.values()))
    @rule(data=st.data())
    def leave_for_now(self, data: st.DataObject) -> None:
        c = self.clients[
            data.draw(st.sampled_from(sorted(m for m, c in self.clients.items() if c.instance_id and c.epoch > 0)))
        ]
        del self.clients[c.member_id]
        r = self._leave(c, -2)
        if r is not None:
            assert r.member_epoch == -2
            assert c.instance_id is not None
            self.away[c.instance_id] = c

    @precondition(lambda self: bool(self.away))
    @rule(data=st.data())
    def come_back(self, data: st.DataObject) -> None:
        old = self.away.pop(data.draw(st.sampled_from(sorted(self.away))))
        c = SimClient(self._new_id(), old.topics, old.regex, old.instance_id, old.assignor, old.rebalance_timeout_ms)
        self.clients[c.member_id] = c
        g = self.h.groups.groups.get("g")
        before = g.members.get(old.member_id) if g is not None else None
        # Nothing else to pick up (no topic appeared or grew since the group or the member last
        # looked): the newcomer takes its predecessor's place without a rebalance.
        quiet = (
            g is not None
            and before is not None
            and g.metadata_version == self.store.version
            and (before.topic_regex is None or before.regex_version == self.store.version)
        )
        epoch = g.epoch if g is not None else None
        self.h.now += 10
        self._send(c, full=True, report=True, apply_now=True, lose=False)
        if quiet:
            g = self.h.group()
            assert g.epoch == epoch, "a static member coming back must not bump the group epoch"
            assert old.member_id not in g.members
            assert old.instance_id is not None
            assert g.static[old.instance_id] == c.member_id

    @precondition(lambda self: bool(self.clients))
    @rule(data=st.data(), subscription=st.sampled_from(SUBSCRIPTIONS))
    def resubscribe(self, data: st.DataObject, subscription: tuple[tuple[str, ...] | None, str | None]) -> None:
        c = self.clients[data.draw(st.sampled_from(sorted(self.clients)))]
        c.topics, c.regex = subscription
        self.h.now += 100
        self._send(c, full=True, report=True, apply_now=True, lose=False)

    @precondition(lambda self: bool(self.clients))
    @rule()
    def everyone_settles(self) -> None:
        """The clients heartbeat promptly, the others' sessions run out: the group converges,
        every subscribed partition with exactly one client, every client at the target epoch."""
        self.h.now += 100
        for c in list(self.clients.values()):
            self._send(c, full=False, report=True, apply_now=True, lose=False, prompt=True)
        self.h.now += self.SESSION_MS  # exactly the live clients' session: only the others expire
        self.h.expire()
        for _ in range(12):
            written = len(self.h.log)
            for c in list(self.clients.values()):
                self.h.now += 1
                self._send(c, full=False, report=True, apply_now=True, lose=False, prompt=True)
            g = self.h.groups.groups.get("g")
            if g is not None and len(self.h.log) == written and g.state == ConsumerGroupState.STABLE:
                break
        else:
            raise AssertionError("the group did not settle")
        if not self.clients:
            return
        assert set(g.members) == set(self.clients)
        assert {c.epoch for c in self.clients.values()} == {g.assignment_epoch}
        expected: set[Partition] = set()
        for c in self.clients.values():
            for name, topic in self.store.topics.items():
                if name in (c.topics or ()) or (c.regex and re2.fullmatch(c.regex, name)):
                    expected |= {(topic.topic_id, p) for p in range(topic.partitions)}
        owned = Counter(tp for c in self.clients.values() for tp in partitions_of(c.owned))
        assert set(owned) == expected
        assert set(owned.values()) <= {1}

    @rule(ms=st.integers(0, 12_000))
    def time_passes(self, ms: int) -> None:
        self.h.now += ms
        self.h.expire()

    @precondition(lambda self: self.patterned < 2)
    @rule(partitions=st.integers(1, 3))
    def a_matching_topic_appears(self, partitions: int) -> None:
        self.patterned += 1
        self.store.create_topic(f"r{self.patterned}", partitions, {})

    @precondition(lambda self: self.store.topics["a"].partitions < 5)
    @rule()
    def a_topic_grows(self) -> None:
        topic = self.store.topics["a"]
        self.store.add_partitions("a", self.store.open_partitions(topic, topic.partitions, topic.partitions + 1))

    @precondition(lambda self: "g" in self.h.groups.groups and not self.h.group().members)
    @rule()
    def delete_empty_group(self) -> None:
        self.h.log.extend(self.h.groups.delete("g"))

    @invariant()
    def no_partition_is_held_twice(self) -> None:
        g = self.h.groups.groups.get("g")
        if g is None:
            return
        assert_exclusive(g)
        assert set(g.target) <= set(g.members)
        assert g.assignment_epoch <= g.epoch
        live = [c for c in self.clients.values() if c.member_id in g.members]
        seen: dict[Partition, str] = {}
        for c in live:
            held = partitions_of(c.owned)
            # What a client holds the coordinator counts as its (assigned or being revoked).
            m = g.members[c.member_id]
            assert held <= partitions_of(m.assigned) | partitions_of(m.revoking), c.member_id
            for tp in held:
                assert tp not in seen, f"{tp} held by {seen[tp]} and {c.member_id}"
                seen[tp] = c.member_id

    @invariant()
    def the_records_give_the_groups_back(self) -> None:
        self.rows.extend(encoded(self.h.log[len(self.rows) :]))
        expected = stored_view(self.h.groups)
        assert stored_view(replayed(self.store, self.rows, self.h.now)) == expected
        assert stored_view(replayed(self.store, compacted(self.rows), self.h.now)) == expected


TestGroupHistory = GroupHistory.TestCase
TestGroupHistory.settings = settings(
    max_examples=examples(40),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
