"""Share sessions (KIP-932): the partitions a member fetches from, kept between ShareFetch
requests so that each request names only what changed.

Epoch 0 opens a session (replacing the member's previous one), each later request carries
the next epoch, and -1 closes it.  The number of sessions is bounded
(`group.share.max.share.sessions`): a member past it is told SHARE_SESSION_LIMIT_REACHED.
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
    epoch: int = 1  # the epoch the next request must carry
    partitions: dict[TopicPartition, None] = field(default_factory=dict)  # ordered set


class ShareSessions:
    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def open(self, group_id: str, member_id: str) -> tuple[ShareSession, ShareSession | None]:
        """A new session; the member's previous one, if any, is returned to be released."""
        previous = self.sessions.pop((group_id, member_id), None)
        if len(self.sessions) >= self.max_sessions:
            if previous is not None:
                self.sessions[(group_id, member_id)] = previous
            raise KafkaError(
                ErrorCode.share_session_limit_reached,
                f"the broker holds its maximum of {self.max_sessions} share sessions",
            )
        session = self.sessions[(group_id, member_id)] = ShareSession(group_id, member_id)
        return session, previous

    def next(self, group_id: str, member_id: str, epoch: int) -> ShareSession | None:
        """The member's session, for a request that carries `epoch` (positive or final).  A
        final request needs none: it may come after the member left the group, its last
        acknowledgements racing its leave heartbeat."""
        session = self.sessions.get((group_id, member_id))
        if session is None and epoch == FINAL_EPOCH:
            return None
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
