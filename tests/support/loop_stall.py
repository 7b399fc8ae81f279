"""How long a request holds the broker's event loop, as a second client sees it: ApiVersions
round trips on another connection, timed while the request runs and, as a control, without it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kio.schema.api_versions.v3.request import ApiVersionsRequest

from tests.support.kafka_wire import KafkaConnection, connect, decode_response, encode_request

T = TypeVar("T")
_PING = ApiVersionsRequest(client_software_name="stall-probe", client_software_version="1")


def _round_trip(conn: KafkaConnection) -> float:
    start = time.perf_counter()
    conn.request(_PING)
    return time.perf_counter() - start


def control(bootstrap: str, rounds: int = 200) -> float:
    """The longest of `rounds` ApiVersions round trips on an otherwise idle broker."""
    with connect(bootstrap) as conn:
        conn.api_versions()  # the connection's first request pays for its setup
        return max(_round_trip(conn) for _ in range(rounds))


def during(bootstrap: str, work: Callable[[], T]) -> tuple[T, float]:
    """`work()`'s result and the longest ApiVersions round trip another connection saw while
    it ran (a round trip still in flight when it ends counts in full)."""
    done = threading.Event()
    trips: list[float] = []
    ready = threading.Event()

    def probe() -> None:
        with connect(bootstrap) as conn:
            conn.api_versions()
            ready.set()
            while not done.is_set():
                trips.append(_round_trip(conn))

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    if not ready.wait(30):
        raise TimeoutError("the probe connection did not start")
    try:
        result = work()
    finally:
        done.set()
        thread.join(120)
    return result, max(trips, default=0.0)


def stall_of(bootstrap: str, request: Any) -> tuple[Any, float]:
    """`request`'s response and the longest round trip another connection saw while it was
    served.  The request is encoded before and its response decoded after the measurement:
    the probe shares this process, and decoding megabytes would hold it, not the broker."""
    cls = type(request)
    frame = encode_request(request, 1)

    def serve() -> bytes:
        with connect(bootstrap, timeout=600) as conn:
            conn.send_raw(frame)
            return conn.recv_frame()

    payload, stall = during(bootstrap, serve)
    correlation_id, response = decode_response(int(cls.__api_key__), int(cls.__version__), payload)
    assert correlation_id == 1
    return response, stall


def within_bound(bootstrap: str, request: Callable[[int], Any], attempts: int = 3) -> tuple[Any, float, float]:
    """The response to `request(n)`, the stall it caused and the idle control before it, of
    the first of `attempts` tries whose stall is within `bound` of its control (else of the
    last try).  A request that holds the loop does so every time; a busy machine that stops
    the broker process for a moment does so once in a while, and a retry tells them apart.
    `request(n)` builds the n-th try's request (fresh names where a try leaves state behind)."""
    for attempt in range(attempts):
        idle = control(bootstrap)
        response, stall = stall_of(bootstrap, request(attempt))
        if stall < bound(idle):
            break
    return response, stall, idle


def bound(control_max: float) -> float:
    """What a request may cost another client: a few of its worst idle round trips, never
    less than a scheduler's slice of a busy machine."""
    return max(20 * control_max, 0.2)
