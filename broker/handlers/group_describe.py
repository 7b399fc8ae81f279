"""What the consumer and share group APIs answer alike: a group that could not be described, a
member's assignment with its topics named (the Describe APIs), and the assignment a heartbeat
hands a member."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.coordinator.assignors import Assignment
from broker.handlers.base import NOT_REQUESTED_OPERATIONS
from broker.handlers.services import HasStore
from broker.protocol.codec import build, nested
from broker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kio.static.protocol import Entity


def undescribed(cls: type[Entity], group_id: str, error: ErrorCode, message: str | None = None) -> Entity:
    """The DescribedGroup entry of a group that could not be described."""
    return build(
        nested(cls, "DescribedGroup"),
        error_code=error,
        error_message=message,
        group_id=group_id,
        group_state="",
        group_epoch=0,
        assignment_epoch=0,
        assignor_name="",
        members=(),
        authorized_operations=NOT_REQUESTED_OPERATIONS,
    )


def assignment_describer(broker: HasStore, cls: type[Entity]) -> Callable[[Assignment], Entity]:
    """An Assignment entry per member's assignment: its topics with their names, in name order
    (topics deleted meanwhile left out)."""
    assignment_cls, tp_cls = nested(cls, "Assignment"), nested(cls, "TopicPartitions")
    names: dict[uuid.UUID, str] = {topic.topic_id: name for name, topic in broker.store.topics.items()}

    def described(assignment: Assignment) -> Entity:
        return build(
            assignment_cls,
            topic_partitions=tuple(
                build(tp_cls, topic_id=topic, topic_name=names[topic], partitions=tuple(sorted(parts)))
                for topic, parts in sorted(assignment.items(), key=lambda tp: names.get(tp[0], ""))
                if topic in names
            ),
        )

    return described


def heartbeat_assignment(cls: type[Entity], assignment: Assignment | None) -> Entity | None:
    """The Assignment of a ConsumerGroupHeartbeat or ShareGroupHeartbeat answer (`cls`): the
    member's partitions by topic id, in id order; None when it is unchanged."""
    if assignment is None:
        return None
    tp_cls = nested(cls, "TopicPartitions")
    return build(
        nested(cls, "Assignment"),
        topic_partitions=tuple(
            build(tp_cls, topic_id=topic, partitions=tuple(sorted(parts)))
            for topic, parts in sorted(assignment.items(), key=lambda tp: str(tp[0]))
        ),
    )
