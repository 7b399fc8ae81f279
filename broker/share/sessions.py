"""Share sessions (KIP-932): the partitions a member fetches from, kept between ShareFetch
requests so that each request names only what changed.

Epoch 0 opens a session (replacing the member's previous one), each later request carries
the next epoch, and -1 closes it.  The number of sessions is bounded
(`group.share.max.share.sessions`): a member past it is told SHARE_SESSION_LIMIT_REACHED.

Kafka keys a session by group and member id alone, so anyone who learns a member's id (it is
in DescribeGroups) could continue its session and acknowledge what it holds.  Here a session
also belongs to the connection that opened it: another connection naming the same member finds
no session (SHARE_SESSION_NOT_FOUND), and cannot open one over it while that connection lives
(INVALID_SHARE_SESSION_EPOCH).  A connection's sessions end when it closes (Kafka's do too), so
a client that reconnects opens its session anew.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from broker.protocol.errors import ErrorCode, KafkaError

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
MAX_EPOCH = (1 << 31) - 1

TopicPartition = tuple[uuid.UUID, int]


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    owner: object  # the connection that opened it (compared by identity)
    epoch: int = 1  # the epoch the next request must carry
    partitions: dict[TopicPartition, None] = field(default_factory=dict)  # ordered set


class ShareSessions:
    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def open(self, group_id: str, member_id: str, owner: object) -> tuple[ShareSession, ShareSession | None]:
        """A new session; the member's previous one on the same connection, if any, is
        returned to be released.  One held by another connection stays its own."""
        key = (group_id, member_id)
        held = self.sessions.get(key)
        if held is not None and held.owner is not owner:
            raise KafkaError(
                ErrorCode.invalid_share_session_epoch,
                f"member {member_id} of group {group_id} has a share session on another connection",
            )
        previous = self.sessions.pop(key, None)
        if len(self.sessions) >= self.max_sessions:
            if previous is not None:
                self.sessions[key] = previous
            raise KafkaError(
                ErrorCode.share_session_limit_reached,
                f"the broker holds its maximum of {self.max_sessions} share sessions",
            )
        session = self.sessions[key] = ShareSession(group_id, member_id, owner)
        return session, previous

    def find(self, group_id: str, member_id: str, owner: object) -> ShareSession | None:
        """The member's session if `owner` opened it."""
        session = self.sessions.get((group_id, member_id))
        return session if session is not None and session.owner is owner else None

    def next(self, group_id: str, member_id: str, epoch: int, owner: object) -> ShareSession:
        """The member's session, for a request of `owner` that carries `epoch` (positive or
        final).  A final request needs one too (Kafka's), so that nobody but its connection
        can acknowledge or release what the member holds."""
        session = self.find(group_id, member_id, owner)
        if session is None:
            raise KafkaError(
                ErrorCode.share_session_not_found, f"no share session for member {member_id} of group {group_id}"
            )
        if epoch == FINAL_EPOCH:
            return session
        if epoch != session.epoch:
            raise KafkaError(
                ErrorCode.invalid_share_session_epoch,
                f"the share session's next epoch is {session.epoch}, the request carries {epoch}",
            )
        session.epoch = 1 if epoch >= MAX_EPOCH else epoch + 1
        return session

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.pop((group_id, member_id), None)
