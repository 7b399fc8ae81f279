"""The consumer group protocol's (KIP-848) records: tombstones of a deleted group, revocations in
progress restored at replay, no epoch bump after a reload, and malformed records refused.

Time is the `now` argument throughout: nothing sleeps.  The store is a real MetadataStore in a
temporary directory (topics are created on disk, and each creation bumps `store.version`).
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest

from broker.coordinator.consumer_group import ConsumerGroupState, MemberState
from broker.metadata import MetadataStore
from broker.replay import Malformed
from tests.support.consumer_group_harness import Harness, compacted, encoded, replayed, stable_pair, stored_view


def test_delete_writes_tombstones_that_remove_the_group_at_replay(store: MetadataStore, h: Harness) -> None:
    stable_pair(store, h)
    h.heartbeat("a", -1)
    h.heartbeat("b", -1)
    assert h.group().state == ConsumerGroupState.EMPTY
    assert "g" in h.reload().groups
    h.log.extend(h.groups.delete("g"))
    assert "g" not in h.groups.groups
    assert h.reload().groups == {}
    assert replayed(store, compacted(encoded(h.log)), h.now).groups == {}


def test_replay_restores_revocations_in_progress(store: MetadataStore, h: Harness) -> None:
    t = store.create_topic("t", 4, {}).topic_id
    h.join("a", ("t",), instance_id="i-a", rack_id="r1", server_assignor="range")
    h.join("b", ("t",))
    h.heartbeat("a", 1, owned={t: frozenset(range(4))}, instance_id="i-a")
    h.heartbeat("b", 2, owned={})
    reloaded = h.reload()
    assert stored_view(reloaded) == stored_view(h.groups)
    member = reloaded.groups["g"].members["a"]
    assert member.state == MemberState.UNREVOKED_PARTITIONS
    assert member.revoke_deadline_ms == h.now + 60_000  # timers restart from the load
    assert member.session_deadline_ms == h.now + 45_000
    assert reloaded.groups["g"].members["b"].state == MemberState.UNRELEASED_PARTITIONS


def test_after_a_reload_a_heartbeat_that_changes_nothing_does_not_bump_the_group_epoch(
    store: MetadataStore, h: Harness
) -> None:
    _, a, _b = stable_pair(store, h)
    epoch = h.group().epoch
    h.groups = h.reload()
    r = h.heartbeat("a", a.epoch)
    assert (h.group().epoch, r.member_epoch) == (epoch, epoch)


def _uuid16(n: int) -> bytes:
    return uuid.UUID(int=n).bytes


def _member_value(**changes: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "instance": None,
        "rack": None,
        "client": "other-client",
        "host": "other-host",
        "topics": ["t"],
        "regex": None,
        "regex_topics": [],
        "assignor": None,
        "rebalance_ms": 1,
        "classic": None,
    }
    return {**value, **changes}


def _current_value(**changes: Any) -> dict[str, Any]:
    value: dict[str, Any] = {"epoch": 9, "previous": 8, "state": "stable", "assigned": {}, "revoking": {}}
    return {**value, **changes}


MALFORMED: list[tuple[list[Any], dict[str, Any]]] = [
    (["cg", "g"], {"epoch": "1"}),
    (["cg", "g"], {"epoch": True}),
    (["cg", "g"], {"epoch": 1 << 40}),
    (["cg", "g"], {"epoch": 1, "subscribed": [["t", b"short", 1]]}),
    (["cg", "g"], {"epoch": 1, "subscribed": {"t": 1}}),
    (["cg", "g", "extra"], {"epoch": 1}),
    (["cg", "new"], {"epoch": None}),
    (["cgt", "new"], {}),
    (["cgtm", "g", 5], {"partitions": {}}),
    (["cgtm", "g"], {"partitions": {}}),
    (["cgtm", "new", "m"], {"partitions": [1]}),
    (["cgtm", "g", "a"], {"partitions": {b"short": [0]}}),
    (["cgtm", "g", "a"], {"partitions": {_uuid16(1): [-1]}}),
    (["cgtm", "g", "a"], {"partitions": {_uuid16(1): 3}}),
    (["cgm", "g", "a"], _member_value(topics="t")),
    (["cgm", "g", "a"], _member_value(client=None)),
    (["cgm", "g", "a"], _member_value(rack=3)),
    (["cgm", "g", "a"], _member_value(rebalance_ms=1 << 40)),
    (["cgm", "g", "a"], _member_value(regex_topics="orders")),
    (["cgm", "g", "a"], _member_value(regex_topics=None)),
    (["cgm", "g", "a"], _member_value(classic={"protocols": [], "session_ms": 1})),
    (["cgm", "g", "a"], _member_value(classic={"protocols": [["range", "not bytes"]], "session_ms": 1})),
    (["cgm", "g", "a"], _member_value(classic=[1])),
    (["cgm", "g", "zz"], _member_value(classic={"protocols": [["range", b""]], "session_ms": "1"})),
    (["cgm", "new", "zz"], _member_value(regex_topics=[1])),
    (["cgc", "g", "a"], _current_value(state="bogus")),
    (["cgc", "g", "a"], _current_value(state=["stable"])),
    (["cgc", "g", "a"], _current_value(state={"s": 1})),
    (["cgc", "g", "a"], _current_value(epoch=None)),
    (["cgc", "g", "a"], _current_value(previous=False)),
    (["cgc", "g", "a"], _current_value(revoking=None)),
    (["cgc", "g", "a"], _current_value(assigned={_uuid16(1): [0, "1"]})),
    (["cgc", "g", "zz"], _current_value(state="bogus")),
    (["cgc", "new", "zz"], _current_value(assigned=None)),
]


@pytest.mark.parametrize(("key", "value"), MALFORMED, ids=[f"{k}-{i}" for i, (k, _) in enumerate(MALFORMED)])
def test_a_malformed_record_raises_malformed_and_changes_nothing(
    store: MetadataStore, h: Harness, key: list[Any], value: dict[str, Any]
) -> None:
    t = store.create_topic("t", 2, {}).topic_id
    h.join("a", ("t",), instance_id="i-a")
    groups = h.reload()
    assert groups.groups["g"].members["a"].assigned == {t: frozenset({0, 1})}
    before = copy.deepcopy(groups.groups)
    with pytest.raises(Malformed):
        groups.replay(*encoded([(key, value)])[0])
    assert groups.groups == before


def test_a_record_of_the_well_formed_kind_is_accepted(store: MetadataStore, h: Harness) -> None:
    """The counterpart of the malformed cases: their well-formed versions replay."""
    store.create_topic("t", 2, {})
    h.join("a", ("t",))
    groups = h.reload()
    groups.replay(["cgm", "g", "a"], _member_value(classic={"protocols": [["range", b""]], "session_ms": 5}))
    groups.replay(["cgc", "g", "a"], _current_value(assigned={_uuid16(1): [0, 1]}))
    groups.replay(["cgtm", "g", "zz"], {"partitions": {_uuid16(1): [3]}})
    member = groups.groups["g"].members["a"]
    assert (member.client_id, member.epoch, member.assigned) == (
        "other-client",
        9,
        {uuid.UUID(int=1): frozenset({0, 1})},
    )
    assert member.classic is not None
    assert member.classic.session_timeout_ms == 5
    assert groups.groups["g"].target["zz"] == {uuid.UUID(int=1): frozenset({3})}
