"""What a Fetch serves: the bytes of a run of whole batches, inline when small, otherwise as a
region of a segment file that the connection reads as its socket drains.

A response that is waiting for a slow client then holds a segment reference, not the records:
memory for record data no longer grows with the connections that do not read.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.log.segment import LogSegment


@dataclass(slots=True, eq=False)
class SegmentRegion:
    """`length` bytes of `segment`'s log file from `position`, all whole batches."""

    segment: LogSegment
    position: int
    length: int

    def __len__(self) -> int:
        return self.length

    def open(self) -> int:
        """A descriptor of its own for the file, held while the bytes are sent: retention or
        compaction may delete the segment meanwhile, and the open file keeps its bytes.  Raises
        FileNotFoundError when that happened before the send began (the connection is closed
        and the client fetches again)."""
        if self.segment.closed:
            raise FileNotFoundError(f"{self.segment.log_path} was deleted before its bytes were sent")
        return self.segment.dup_fd()


@dataclass(slots=True)
class FetchRead:
    """The batches a Fetch serves from one partition."""

    data: bytes | SegmentRegion
    end_offset: int  # the offset after the last batch served
    records: int  # records in those batches

    @property
    def size(self) -> int:
        return len(self.data)


NOTHING = FetchRead(b"", -1, 0)
