"""What an acknowledgement costs on `__share_group_state`: bytes appended per acknowledgement
while one member holds a full window of records (`--window`, group.share.partition.max.record.locks)
and acknowledges them one by one out of order (every other offset), so that the window stays
fragmented, as it is when several members finish records at different times.

    python -m loadtest.share_state_bytes [--window 2000] [--acks 600]

The share coordinator runs in-process over a real MetadataStore in a temporary directory; no
network, no fsync (bytes are counted where they are appended)."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from collections.abc import Awaitable, Iterable
from pathlib import Path

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.log.partition_log import PartitionLog
from broker.metadata import MetadataStore
from broker.protocol.records import Record, build_batch
from broker.share.coordinator import STATE_TOPIC, GroupSettings, ShareConfig, ShareCoordinator
from broker.share.group import ShareHeartbeat


async def _no_sync(logs: Iterable[PartitionLog]) -> None:
    return None


def _settings(group_id: str) -> GroupSettings:
    return GroupSettings(
        lock_duration_ms=60_000, session_timeout_ms=60_000, heartbeat_interval_ms=5_000, auto_offset_reset="earliest"
    )


async def measure(window: int, acks: int) -> list[int]:
    """The size of each append to `__share_group_state` made by `acks` acknowledgements."""
    with tempfile.TemporaryDirectory() as tmp:
        clock = ManualClock()
        store = MetadataStore(BrokerConfig(data_dir=Path(tmp)), clock, recover=False)
        try:
            config = ShareConfig(state_partitions=1, max_locks=window)
            shares = ShareCoordinator(store, clock, config, _no_sync, settings=_settings, other_kind=lambda g: None)
            topic = store.create_topic("t", 1, {})
            plog = store.partition_log("t", 0)
            assert plog is not None
            for _ in range(0, window, 100):
                plog.append_internal(build_batch([Record(i, clock.now_ms(), None, b"x" * 100) for i in range(100)]))
            key = ("g", topic.topic_id, 0)
            # Member "a" joins (a share session is a current member's only), then opens one.
            _, pending = shares.heartbeat(
                ShareHeartbeat("g", "a", 0, None, ("t",), "bench", "/127.0.0.1"),
                lambda name: (topic.topic_id, topic.partitions) if name == "t" else None,
            )
            if pending is not None:
                await pending
            shares.open_session("g", "a", owner=object())
            part, _ = shares.partition("g", topic.topic_id, 0, plog)
            shares.acquire("a", key, part, plog, max_records=window, max_bytes=1 << 30)
            await _run(shares.persist("g", [key]))
            state = store.partition_log(STATE_TOPIC, 0)
            assert state is not None
            sizes: list[int] = []
            for offset in list(range(1, window, 2))[:acks]:
                size_before = _size(state)
                shares.acknowledge("a", key, [(offset, offset, [1])])
                await _run(shares.persist("g", [key]))
                sizes.append(_size(state) - size_before)
            return sizes
        finally:
            store.close(clean=True)


def _size(plog: PartitionLog) -> int:
    return sum(p.stat().st_size for p in plog.directory.glob("*.log"))


async def _run(pending: Awaitable[None] | None) -> None:
    if pending is not None:
        await pending


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=int, default=2_000)
    parser.add_argument("--acks", type=int, default=600)
    args = parser.parse_args()
    sizes = asyncio.run(measure(args.window, args.acks))
    print(
        f"{len(sizes)} acknowledgements, window {args.window}: {sum(sizes) / len(sizes):.0f} B each on average, "
        f"median {statistics.median(sizes):.0f} B, largest {max(sizes)} B"
    )


if __name__ == "__main__":
    main()
