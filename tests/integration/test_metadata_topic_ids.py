"""Metadata asked by topic id, as Kafka answers it: from v12 an unknown id (or the zero id) is
UNKNOWN_TOPIC_ID with a null name and a known one is named; before v12 a null name is an invalid
request, answered for that topic, never a closed connection."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.metadata.v10.request import MetadataRequest as MetadataRequestV10
from kio.schema.metadata.v10.request import MetadataRequestTopic as TopicV10
from kio.schema.metadata.v11.request import MetadataRequest as MetadataRequestV11
from kio.schema.metadata.v11.request import MetadataRequestTopic as TopicV11
from kio.schema.metadata.v12.request import MetadataRequest as MetadataRequestV12
from kio.schema.metadata.v12.request import MetadataRequestTopic as TopicV12

from broker.protocol.errors import ErrorCode
from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import KafkaConnection

ZERO = uuid.UUID(int=0)


def _connection(broker: ThreadBroker) -> KafkaConnection:
    host, port = broker.bootstrap.split(":")
    return KafkaConnection(host, int(port))


def _topic_id(broker: ThreadBroker, name: str) -> uuid.UUID:
    with _connection(broker) as conn:
        answer = conn.request(
            MetadataRequestV12(
                topics=(TopicV12(topic_id=None, name=name),),
                allow_auto_topic_creation=True,
                include_topic_authorized_operations=False,
            )
        )
    (topic,) = answer.topics
    assert topic.error_code == ErrorCode.none
    return topic.topic_id


def test_v12_finds_a_topic_by_id_and_answers_unknown_ids_with_a_null_name(broker: ThreadBroker) -> None:
    known = _topic_id(broker, "by-id")
    unknown = uuid.uuid4()
    with _connection(broker) as conn:
        answer = conn.request(
            MetadataRequestV12(
                topics=tuple(TopicV12(topic_id=i, name=None) for i in (known, unknown, ZERO)),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
        assert [(t.name, t.topic_id, t.error_code) for t in answer.topics] == [
            ("by-id", known, ErrorCode.none),
            (None, unknown, ErrorCode.unknown_topic_id),
            (None, None, ErrorCode.unknown_topic_id),  # the zero id reads back as none
        ]
        assert len(answer.topics[0].partitions) == 3
        assert (
            conn.request(
                MetadataRequestV12(
                    topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
                )
            ).topics
            == ()
        )


@pytest.mark.parametrize(("request_cls", "topic_cls"), [(MetadataRequestV10, TopicV10), (MetadataRequestV11, TopicV11)])
def test_before_v12_a_null_topic_name_is_an_invalid_request_not_a_closed_connection(
    broker: ThreadBroker, request_cls: type, topic_cls: type
) -> None:
    known = _topic_id(broker, "by-id-old")
    fields = {"include_topic_authorized_operations": False, "allow_auto_topic_creation": False}
    if request_cls is MetadataRequestV10:
        fields["include_cluster_authorized_operations"] = False
    with _connection(broker) as conn:
        answer = conn.request(
            request_cls(
                topics=(topic_cls(topic_id=known, name=None), topic_cls(topic_id=None, name="by-id-old")), **fields
            )
        )
        assert [(t.name, t.error_code) for t in answer.topics] == [
            ("", ErrorCode.invalid_request),
            ("by-id-old", ErrorCode.none),
        ]
        again = conn.request(request_cls(topics=(topic_cls(topic_id=None, name="by-id-old"),), **fields))
        assert again.topics[0].error_code == ErrorCode.none  # the connection still serves
