"""The consumer group protocol (KIP-848): subscriptions by name and by RE2 pattern, following
topics created, grown and deleted later; patterns match whole names and never internal topics.

Time is the `now` argument throughout: nothing sleeps.  The store is a real MetadataStore in a
temporary directory (topics are created on disk, and each creation bumps `store.version`).
"""

from __future__ import annotations

import pytest

from broker.coordinator.consumer_group import MemberState
from broker.metadata import MetadataStore
from broker.protocol.errors import ErrorCode, KafkaError
from tests.support.consumer_group_harness import Harness, stored_view


def test_a_pattern_picks_up_topics_created_later_and_grown(store: MetadataStore, h: Harness) -> None:
    eu = store.create_topic("orders-eu", 2, {}).topic_id
    store.create_topic("payments", 1, {})
    store.create_topic("__consumer_offsets", 3, {}, internal=True)
    r = h.join("a", regex="orders-.*")
    assert r.assignment == {eu: frozenset({0, 1})}
    epoch = h.group().epoch
    assert h.group().members["a"].regex_topics == {"orders-eu"}
    # Unchanged topics: nothing is matched again, nothing written.
    written = len(h.log)
    assert h.heartbeat("a", epoch).assignment is None
    assert len(h.log) == written

    version = store.version
    us = store.create_topic("orders-us", 3, {}).topic_id
    assert store.version > version
    r = h.heartbeat("a", epoch)
    assert h.group().epoch == epoch + 1
    assert r.member_epoch == epoch + 1
    assert r.assignment == {eu: frozenset({0, 1}), us: frozenset({0, 1, 2})}
    # A topic that does not match changes nothing for the group.
    store.create_topic("payments-eu", 1, {})
    assert h.heartbeat("a", epoch + 1).assignment is None
    assert h.group().epoch == epoch + 1

    topic = store.topics["orders-eu"]
    store.add_partitions("orders-eu", store.open_partitions(topic, 2, 4))
    r = h.heartbeat("a", epoch + 1)
    assert r.member_epoch == epoch + 2
    assert r.assignment == {eu: frozenset(range(4)), us: frozenset({0, 1, 2})}
    assert stored_view(h.reload()) == stored_view(h.groups)


def test_a_named_subscription_follows_a_topic_created_or_grown_later(store: MetadataStore, h: Harness) -> None:
    r = h.join("a", ("later",))
    assert (r.member_epoch, r.assignment) == (1, {})
    later = store.create_topic("later", 2, {}).topic_id
    r = h.heartbeat("a", 1)
    assert (r.member_epoch, r.assignment) == (2, {later: frozenset({0, 1})})


def test_a_deleted_topic_is_revoked_and_the_group_epoch_bumps(store: MetadataStore, h: Harness) -> None:
    x = store.create_topic("x", 2, {}).topic_id
    y = store.create_topic("y", 1, {}).topic_id
    r = h.join("a", ("x", "y"))
    assert r.assignment == {x: frozenset({0, 1}), y: frozenset({0})}
    for plog in store.delete_topic("y"):
        plog.delete()
    r = h.heartbeat("a", 1, owned={x: frozenset({0, 1}), y: frozenset({0})})
    assert h.group().epoch == 2
    assert (r.member_epoch, r.assignment) == (1, {x: frozenset({0, 1})})  # y is being revoked
    r = h.heartbeat("a", 1, owned={x: frozenset({0, 1})})
    assert (r.member_epoch, r.assignment) == (2, {x: frozenset({0, 1})})
    assert h.group().owners == {(x, 0): "a", (x, 1): "a"}


def test_patterns_match_whole_names_never_internal_topics_only_describable_ones(
    store: MetadataStore, h: Harness
) -> None:
    store.create_topic("orders", 1, {})
    store.create_topic("orders-eu", 1, {})
    store.create_topic("secret", 1, {})
    store.create_topic("__consumer_offsets", 2, {}, internal=True)
    store.create_topic("__transaction_state", 2, {}, internal=True)
    h.join("a", regex="order", group_id="g1")
    assert h.group("g1").members["a"].regex_topics == frozenset()
    h.join("a", regex="orders", group_id="g2")
    assert h.group("g2").members["a"].regex_topics == {"orders"}
    r = h.join("a", regex=".*", group_id="g3", may_describe=lambda name: name != "secret")
    assert h.group("g3").members["a"].regex_topics == {"orders", "orders-eu"}
    assert {store.by_id[t].name for t in r.assignment or {}} == {"orders", "orders-eu"}


def test_patterns_are_re2(store: MetadataStore, h: Harness) -> None:
    store.create_topic("Orders", 1, {})
    store.create_topic("orders", 1, {})
    # \p{Lu} is RE2 (Python's re has no \p): an upper-case letter.
    h.join("a", regex=r"\p{Lu}.*")
    assert h.group().members["a"].regex_topics == {"Orders"}
    # Look-arounds and back-references are not RE2.
    for pattern in ("(?=orders).*", r"(o)\1rders", "orders("):
        with pytest.raises(KafkaError) as e:
            h.join("b", regex=pattern)
        assert e.value.code == ErrorCode.invalid_regular_expression
        assert e.value.message is not None
        assert e.value.message.startswith(f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: ")
    with pytest.raises(KafkaError) as e:
        h.join("b", regex="o" * 1025)
    assert e.value.code == ErrorCode.invalid_regular_expression
    assert "b" not in h.group().members


def test_clearing_a_pattern_drops_its_topics(store: MetadataStore, h: Harness) -> None:
    t = store.create_topic("orders", 2, {}).topic_id
    h.join("a", regex="orders")
    assert h.group().members["a"].assigned == {t: frozenset({0, 1})}
    r = h.heartbeat("a", 1, topic_regex="", owned={t: frozenset({0, 1})})
    assert h.group().epoch == 2
    assert h.group().members["a"].topic_regex is None
    assert r.assignment == {}
    assert h.group().members["a"].state == MemberState.UNREVOKED_PARTITIONS
    r = h.heartbeat("a", 1, owned={})
    assert (r.member_epoch, h.group().members["a"].state) == (2, MemberState.STABLE)
