"""Producer ids for idempotent producers: unique across restarts.

Ids are handed out from blocks; the end of the current block is made durable before
any id in it is used, so a crash can skip ids but never reuse one.
"""

from __future__ import annotations

import os
from pathlib import Path

BLOCK_SIZE = 1000


class ProducerIdAllocator:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "producer-id-block"
        self._next = int(self.path.read_text()) if self.path.exists() else 0
        self._block_end = self._next

    def allocate(self) -> int:
        if self._next >= self._block_end:
            self._block_end = self._next + BLOCK_SIZE
            tmp = self.path.with_suffix(".tmp")
            with open(tmp, "w") as f:
                f.write(str(self._block_end))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        pid = self._next
        self._next += 1
        return pid
