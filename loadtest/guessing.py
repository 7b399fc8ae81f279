"""Password guessing against the broker's SASL listener, for `bench_limits`: how many guesses a
client gets checked per second, with the failure throttle on (its default) and off.

Each guess is what a guessing script does: a new connection, SaslHandshake PLAIN, one
SaslAuthenticate with the next password for `admin`, read the answer, close.  Several threads
guess at once; the broker's own counters tell which attempts had their password checked
(`result="failed"`) and which were refused unchecked (`result="throttled"`).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from loadtest.brokers import connect, recv_exactly, streamshop_broker
from streamshop.broker_users import set_offline

USER, PASSWORD = "admin", "the-real-password"


def _request(api_key: int, version: int, correlation: int, body: bytes) -> bytes:
    client = b"guesser"
    payload = struct.pack(">hhih", api_key, version, correlation, len(client)) + client + body
    return struct.pack(">i", len(payload)) + payload


def _answer_error(sock: socket.socket) -> int:
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    body = recv_exactly(sock, size)
    return int(struct.unpack_from(">h", body, 4)[0])  # after the correlation id


def guess(bootstrap: str, user: str, password: str) -> int:
    """One PLAIN login on a new connection: its SaslAuthenticate error code, or -1 when the broker
    closed the connection first (an answer held past `authentication.timeout.ms`, 10 s)."""
    with connect(bootstrap, timeout=60) as sock:  # a throttled answer waits out its window
        mechanism = b"PLAIN"
        try:
            sock.sendall(_request(17, 1, 1, struct.pack(">h", len(mechanism)) + mechanism))
            _answer_error(sock)
            token = b"\0" + user.encode() + b"\0" + password.encode()
            sock.sendall(_request(36, 0, 2, struct.pack(">i", len(token)) + token))
            return _answer_error(sock)
        except ConnectionError:
            return -1


def _outcomes(admin_url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "streamshop_authentications_total" and sample.labels.get("mechanism") == "PLAIN":
                out[sample.labels["result"]] = out.get(sample.labels["result"], 0.0) + sample.value
    return out


def measure(workdir: Path, *, throttle_ms: int, seconds: float, threads: int) -> dict[str, float]:
    """Guess `admin`'s password from `threads` threads for `seconds`."""
    data = workdir / f"guessing-{throttle_ms}"
    set_offline(data / "streamshop-data", USER, PASSWORD)
    settings = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "authentication.failure.throttle.max.ms": str(throttle_ms),
    }
    with streamshop_broker(data, admin=True, settings=settings) as broker:
        assert broker.admin_url is not None
        answered = [0] * threads
        end = time.monotonic() + seconds

        def guesser(n: int) -> None:
            attempt = 0
            while time.monotonic() < end:
                guess(broker.bootstrap, USER, f"guess-{n}-{attempt}")
                attempt += 1
                answered[n] += 1

        workers = [threading.Thread(target=guesser, args=(n,)) for n in range(threads)]
        began = time.monotonic()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        elapsed = time.monotonic() - began
        outcomes = _outcomes(broker.admin_url)
        # The real user, from the same host, once the guessing stopped: how long until admitted.
        waited = time.monotonic()
        while guess(broker.bootstrap, USER, PASSWORD) != 0:
            time.sleep(0.1)
        waited = time.monotonic() - waited
    return {
        "throttle_max_ms": throttle_ms,
        "seconds": elapsed,
        "attempts_per_s": sum(answered) / elapsed,
        "checked_per_s": outcomes.get("failed", 0.0) / elapsed,
        "refused_unchecked": outcomes.get("throttled", 0.0),
        "real_user_waited_s": waited,
    }
