"""How long one request of each API can hold the broker's event loop.

    python -m loadtest.bench_loop_stall [--elements N] [--api NAME ...] [--json PATH]

For every API the broker serves (broker.handlers), at its highest version, a request is built
from the schema alone: each top-level array holds as many entries as `request.max.elements`
allows (entries distinct: names `w0`, `w1`, ...; nested arrays one entry each; numbers 0, acks
-1), halved until the broker accepts its size.  Then the cases known to be the costliest, built
by hand: DescribeConfigs of the broker resource repeated (documentation and synonyms on) and of
one topic repeated, Metadata auto-creating 500 topics, ShareFetch naming 50,000 partitions.

A `streamshop broker` child process serves them one at a time while a probe connection sends
ApiVersions every millisecond; each row gives the probe's slowest round trip while the request
was served (the stall), beside its slowest in the second before (idle).
"""

from __future__ import annotations

import argparse
import datetime
import enum
import json
import socket
import struct
import sys
import tempfile
import time
import types
import typing
import uuid
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.share_fetch.v1.request import FetchPartition, FetchTopic, ShareFetchRequest
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32
from kio.static.protocol import Entity

from broker.handlers import BY_KEY
from broker.protocol.codec import request_type
from loadtest.brokers import connect, recv_exactly, streamshop_broker
from loadtest.probe import Probe
from tests.support.kafka_wire import connect as wire
from tests.support.kafka_wire import encode_request, ms
from tests.support.share_wire import heartbeat

MAX_ELEMENTS = 100_000  # the broker's default request.max.elements
_I32 = struct.Struct(">i")
_EVERY_MS = 0.001  # the probe's pause between round trips


# --- requests built from the schema ----------------------------------------------------------


def _fields(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {n: t for n, t in hints.items() if typing.get_origin(t) is not typing.ClassVar and not n.startswith("__")}


def _arrays(cls: type) -> int:
    """Array entries one entry of `cls` holds (one per nested array, recursively)."""
    count = 0
    for hint in _fields(cls).values():
        inner = _element(hint)
        if inner is not None:
            count += 1 + (_arrays(inner) if _is_entity(inner) else 0)
    return count


def _strip_optional(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return options[0]
    return hint


def _element(hint: Any) -> Any | None:
    hint = _strip_optional(hint)
    if typing.get_origin(hint) is tuple:
        return typing.get_args(hint)[0]
    return None


def _is_entity(hint: Any) -> bool:
    return isinstance(hint, type) and hasattr(hint, "__dataclass_fields__")


def _scalar(name: str, hint: Any, index: int) -> Any:
    hint = _strip_optional(hint)
    while hasattr(hint, "__supertype__"):  # NewType
        hint = hint.__supertype__
    if name == "acks":
        return -1  # acks=0 is never answered
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return next(iter(hint))
    if hint is bool:
        return False
    if isinstance(hint, type) and issubclass(hint, str):
        return f"w{index}"
    if hint is uuid.UUID:
        return uuid.UUID(int=index + 1)
    if hint is bytes:
        return b""
    if isinstance(hint, type) and issubclass(hint, datetime.timedelta):
        return datetime.timedelta(0)
    if isinstance(hint, type) and issubclass(hint, datetime.datetime):
        return datetime.datetime.now(datetime.UTC)
    if isinstance(hint, type) and issubclass(hint, float):
        return 0.0
    if "Records" in str(hint):
        return None
    return 0


def build_entity(cls: type, count: int, index: int = 0, top: bool = True) -> Any:
    """An instance of `cls` whose arrays hold `count` entries at the top, one below."""
    values: dict[str, Any] = {}
    for name, hint in _fields(cls).items():
        inner = _element(hint)
        if inner is not None:
            n = count if top else 1
            if _is_entity(inner):
                values[name] = tuple(build_entity(inner, 0, i, top=False) for i in range(n))
            else:
                values[name] = tuple(_scalar(name, inner, i) for i in range(n))
        elif _is_entity(_strip_optional(hint)):
            values[name] = build_entity(_strip_optional(hint), 0, index, top=False)
        else:
            values[name] = _scalar(name, hint, index)
    return cls(**values)


def generic_request(api_key: int, version: int, max_elements: int) -> tuple[Any, int]:
    """The request and the entries of each top-level array."""
    cls = request_type(api_key, version)
    tops = [_element(h) for h in _fields(cls).values()]
    per_entry = sum(1 + (_arrays(t) if _is_entity(t) else 0) for t in tops if t is not None)
    count = max_elements // per_entry if per_entry else 0
    return build_entity(cls, count), count


# --- measuring ------------------------------------------------------------------------------


def _read_frame(s: socket.socket) -> bytes:
    return recv_exactly(s, _I32.unpack(recv_exactly(s, 4))[0])


@dataclass
class Row:
    api: str
    version: int
    entries: int
    request_bytes: int
    answer_bytes: int  # -1: no answer (the broker closed the connection)
    seconds: float
    idle_ms: float
    stall_ms: float


def measure(bootstrap: str, api: str, request: Any, entries: int) -> Row:
    cls = type(request)
    frame = encode_request(request, 7)
    with Probe(bootstrap, _EVERY_MS) as idle:
        time.sleep(1)
    with Probe(bootstrap, _EVERY_MS) as probe, connect(bootstrap, timeout=600) as s:
        started = time.perf_counter()
        s.sendall(frame)
        try:
            answer = len(_read_frame(s))
        except (ConnectionError, TimeoutError):
            answer = -1
        seconds = time.perf_counter() - started
        time.sleep(0.05)  # a round trip in flight at the end counts
    return Row(api, int(cls.__version__), entries, len(frame), answer, seconds, idle.worst * 1000, probe.worst * 1000)


def _fits(request: Entity) -> bool:
    return len(encode_request(request, 7)) <= 100 * 1024 * 1024  # socket.request.max.bytes


def generic_rows(bootstrap: str, max_elements: int, only: set[str]) -> Iterator[Row]:
    for key, api in sorted(BY_KEY.items()):
        if only and api.name not in only:
            continue
        try:
            request, count = generic_request(key, api.max_version, max_elements)
        except Exception as e:  # a schema this builder cannot fill
            print(f"{api.name}: not built ({type(e).__name__}: {e})", file=sys.stderr)
            continue
        while not _fits(request) and count > 1:
            request, count = generic_request(key, api.max_version, max_elements // 2)
        row = measure(bootstrap, api.name, request, count)
        if row.answer_bytes < 0 and count > 1:  # refused: too many elements counted otherwise
            request, count = generic_request(key, api.max_version, max_elements // 2)
            row = measure(bootstrap, api.name, request, count)
        yield row


def named_rows(bootstrap: str) -> Iterator[Row]:
    """The cases found costliest, built by hand."""
    broker_cfg = DescribeConfigsResource(resource_type=i8(4), resource_name="1", configuration_keys=None)
    yield measure(
        bootstrap,
        "DescribeConfigs (broker x1000)",
        DescribeConfigsRequest(resources=(broker_cfg,) * 1000, include_synonyms=True, include_documentation=True),
        1000,
    )
    topic_cfg = DescribeConfigsResource(resource_type=i8(2), resource_name="orders", configuration_keys=None)
    yield measure(
        bootstrap,
        "DescribeConfigs (topic x2000)",
        DescribeConfigsRequest(resources=(topic_cfg,) * 2000, include_synonyms=True, include_documentation=True),
        2000,
    )
    yield measure(
        bootstrap,
        "Metadata (auto-create 500)",
        MetadataRequest(
            topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(f"auto-{i}")) for i in range(500)),
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        ),
        500,
    )
    yield measure(bootstrap, "ShareFetch (50,000 partitions)", share_fetch_request(bootstrap), 50_000)


def share_fetch_request(bootstrap: str, partitions: int = 50_000) -> ShareFetchRequest:
    """A ShareFetch naming `partitions` partitions of topic `orders` (which has fewer), from a
    member that has just joined share group `pickers`."""
    member = str(uuid.uuid4())
    with wire(bootstrap) as conn:
        topic_id = conn.metadata(["orders"]).topics[0].topic_id
        joined = heartbeat(conn, "pickers", member, 0, ["orders"])
        if joined.error_code != ErrorCode.none:
            raise RuntimeError(f"joining share group pickers: {joined.error_code}")
    everything = tuple(FetchPartition(partition_index=i32(p), acknowledgement_batches=()) for p in range(partitions))
    return ShareFetchRequest(
        group_id=GroupId("pickers"),
        member_id=member,
        share_session_epoch=i32(0),
        max_wait=ms(0),
        min_bytes=i32(1),
        max_records=i32(500),
        batch_size=i32(500),
        topics=(FetchTopic(topic_id=topic_id, partitions=everything),),
        forgotten_topics_data=(),
    )


def report(rows: list[Row]) -> list[str]:
    head = ("API", "v", "entries", "request", "answer", "served s", "idle ms", "stall ms")
    lines = ["{:34} {:>3} {:>8} {:>10} {:>11} {:>9} {:>8} {:>9}".format(*head)]
    for r in sorted(rows, key=lambda r: -r.stall_ms):
        answer = "closed" if r.answer_bytes < 0 else str(r.answer_bytes)
        lines.append(
            f"{r.api:34} {r.version:>3} {r.entries:>8} {r.request_bytes:>10} {answer:>11} "
            f"{r.seconds:>9.2f} {r.idle_ms:>8.1f} {r.stall_ms:>9.1f}"
        )
    return lines


def run(elements: int = MAX_ELEMENTS, only: Collection[str] = (), *, progress: bool = False) -> list[Row]:
    """A row per API (`only` these, by name; with none, the hand-built cases too), one request
    after the other, served by one `streamshop broker` child process."""
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp, streamshop_broker(Path(tmp)) as started:
        with wire(started.bootstrap) as conn:
            conn.create_topic("orders", 1)
        for row in generic_rows(started.bootstrap, elements, set(only)):
            rows.append(row)
            if progress:
                print(report([row])[1], flush=True)
        if not only:
            rows.extend(named_rows(started.bootstrap))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--elements", type=int, default=MAX_ELEMENTS, help="request.max.elements to build at")
    parser.add_argument("--api", action="append", default=[], help="only these APIs (by name; repeatable)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    rows = run(args.elements, set(args.api), progress=True)
    print("\n".join(report(rows)))
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in rows], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
