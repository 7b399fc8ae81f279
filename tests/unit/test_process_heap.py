"""`settle_heap`, run once a process is listening: its garbage is collected and what is alive
then is left out of later full collections (their pauses stall every request in flight)."""

from __future__ import annotations

import gc
import weakref

from kit import process


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_garbage_is_collected_and_what_lives_is_frozen() -> None:
    gc.disable()  # no automatic collection may run between the steps
    try:
        garbage = weakref.ref(Cycle())  # unreachable: only a collection frees it
        live = [Cycle() for _ in range(1000)]
        assert garbage() is not None
        assert any(isinstance(o, Cycle) for o in gc.get_objects())
        process.settle_heap()
        assert garbage() is None
        assert gc.get_freeze_count() >= len(live)
        assert not any(isinstance(o, Cycle) for o in gc.get_objects())  # frozen: out of the collector's view
    finally:
        gc.unfreeze()
        gc.enable()
