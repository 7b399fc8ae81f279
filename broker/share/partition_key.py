"""A share-partition key as FindCoordinator's SHARE key type carries it:
"groupId:topicId:partition", validated as Kafka's SharePartitionKey.validate does."""

from __future__ import annotations

import base64
import binascii
import re
import uuid

SHARE_KEY_TYPE = 2  # FindCoordinator's CoordinatorType.SHARE (v6+)
_INT = re.compile(r"[+-]?[0-9]+")


def parse_share_key(key: str) -> tuple[str, uuid.UUID, int]:
    """The group, topic id and partition of `key`; ValueError saying what is wrong."""
    if not key:
        raise ValueError("Share partition key cannot be empty")
    tokens = key.split(":")
    while tokens and not tokens[-1]:
        tokens.pop()  # Java's String.split drops trailing empty strings
    if len(tokens) != 3:
        raise ValueError(f"Invalid key format: expected - groupId:topicId:partition, found - {key}")
    group, topic, partition = tokens
    if not group.strip():
        raise ValueError("GroupId must be alphanumeric string")
    return group.strip(), _topic_id(topic), _partition(partition)


def _topic_id(text: str) -> uuid.UUID:
    """Kafka's Uuid.fromString: URL-safe base64 of 16 bytes, padding optional."""
    if len(text) > 24:
        raise ValueError(f"Invalid topic ID: {text}")
    try:
        raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"Invalid topic ID: {text}") from None
    if len(raw) != 16:
        raise ValueError(f"Invalid topic ID: {text}")
    return uuid.UUID(bytes=raw)


def _partition(text: str) -> int:
    """Java's Integer.parseInt: an optional sign, ASCII digits, within int32."""
    if not _INT.fullmatch(text):
        raise ValueError(f"Invalid partition: {text}")
    value = int(text)
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"Invalid partition: {text}")
    return value
