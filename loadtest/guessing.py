"""Password guessing against the broker's SASL listener, for `bench_limits`: how many guesses a
client gets checked per second, with the failure throttle on (its default) and off.

Run as ``python -m loadtest.guessing`` it measures attacks from many connections and addresses
(distinct 127.x.y.z sources): the SCRAM proofs of exchanges opened in advance, the owner's
logins while a guesser runs elsewhere, and, for the registry's and the dashboard's logins
(`loadtest.http_attacks`), guesses spread over 100 addresses and the first-login delay under a
flood of unknown names from 200.

Each guess is what a guessing script does: a new connection, SaslHandshake PLAIN, one
SaslAuthenticate with the next password for `admin`, read the answer, close.  Several threads
guess at once; the broker's own counters tell which attempts had their password checked
(`result="failed"`) and which were refused unchecked (`result="throttled"`).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from broker.security.scram import ScramClient
from kit.users import ITERATIONS
from loadtest import http_attacks
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


# --- login attacks by many connections and many addresses (`python -m loadtest.guessing`) ---


def _authenticate(sock: socket.socket, correlation: int, token: bytes) -> tuple[int, bytes]:
    """SaslAuthenticate v0: (error code, auth bytes)."""
    sock.sendall(_request(36, 0, correlation, struct.pack(">i", len(token)) + token))
    return _read_authenticate(sock)


def _read_authenticate(sock: socket.socket) -> tuple[int, bytes]:
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    body = recv_exactly(sock, size)
    error, length = struct.unpack_from(">hh", body, 4)
    at = 8 + max(length, 0)
    (auth_length,) = struct.unpack_from(">i", body, at)
    return error, body[at + 4 : at + 4 + max(auth_length, 0)]


def _scram_open(bootstrap: str, password: str, source: str = "") -> tuple[socket.socket, bytes]:
    """A connection with a SCRAM-SHA-512 exchange for `USER` opened: (socket, client-final)."""
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=120, source_address=(source, 0) if source else None)
    mechanism = b"SCRAM-SHA-512"
    sock.sendall(_request(17, 1, 1, struct.pack(">h", len(mechanism)) + mechanism))
    _answer_error(sock)
    client = ScramClient("SCRAM-SHA-512", USER, password)
    error, server_first = _authenticate(sock, 2, client.first())
    return sock, client.final(server_first) if error == 0 else b""  # refused at once: no proof


def _scram_login(bootstrap: str, password: str, source: str) -> int:
    try:
        sock, final = _scram_open(bootstrap, password, source)
        with sock:
            return _authenticate(sock, 3, final)[0] if final else 58  # SASL_AUTHENTICATION_FAILED
    except ConnectionError:
        return -1


def _scram_outcomes(admin_url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "streamshop_authentications_total" and sample.labels.get("mechanism") == "SCRAM-SHA-512":
                out[sample.labels["result"]] = out.get(sample.labels["result"], 0.0) + sample.value
    return out


def broker_attacks(workdir: Path, *, exchanges: int = 500, owner_logins: int = 8) -> dict[str, float]:
    """SCRAM proofs of `exchanges` exchanges opened in advance (the last one's the right
    password), then a guesser on 127.0.0.2 while the owner signs in from 127.0.0.3."""
    set_offline(workdir / "attacks" / "streamshop-data", USER, PASSWORD)
    settings = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "authentication.timeout.ms": "300000",
    }
    out: dict[str, float] = {}
    with streamshop_broker(workdir / "attacks", admin=True, settings=settings) as broker:
        assert broker.admin_url is not None
        began = time.monotonic()  # a control login, before any failure, from its own address
        control_ok = _scram_login(broker.bootstrap, PASSWORD, "127.0.0.4") == 0
        control_s = time.monotonic() - began
        opened = [_scram_open(broker.bootstrap, f"guess-{n}") for n in range(exchanges - 1)]
        opened.append(_scram_open(broker.bootstrap, PASSWORD))
        began = time.monotonic()
        for sock, final in opened:
            sock.sendall(_request(36, 0, 3, struct.pack(">i", len(final)) + final))
        sent_s = time.monotonic() - began
        right = -2
        for sock, _ in opened:
            with sock:
                try:
                    right = _read_authenticate(sock)[0]
                except ConnectionError:
                    right = -1
        outcomes = _scram_outcomes(broker.admin_url)
        out |= {
            "proofs_sent": exchanges,
            "proofs_sent_s": sent_s,
            "proofs_checked": outcomes.get("failed", 0.0),
            "proofs_refused_unchecked": outcomes.get("throttled", 0.0),
            "right_proof_accepted": float(right == 0),
        }
        stop = threading.Event()

        def guesser() -> None:
            attempt = 0
            while not stop.is_set():
                _scram_login(broker.bootstrap, f"slow-{attempt}", "127.0.0.2")
                attempt += 1

        thread = threading.Thread(target=guesser)
        thread.start()
        try:
            time.sleep(5)  # past the guesser's free failures
            admitted, waits = 0, []
            for _ in range(owner_logins):
                began = time.monotonic()
                admitted += _scram_login(broker.bootstrap, PASSWORD, "127.0.0.3") == 0
                waits.append(time.monotonic() - began)
                time.sleep(1)
        finally:
            stop.set()
            thread.join()
        out |= {
            "owner_admitted": admitted,
            "owner_logins": owner_logins,
            "owner_max_wait_s": max(waits),
            "owner_control_s": control_s,
            "owner_control_admitted": float(control_ok),
        }
    return out


def report(broker: dict[str, float]) -> list[str]:
    """`broker_attacks`' figures, a line per attack."""
    return [
        f"broker SCRAM: {broker['proofs_sent']:.0f} exchanges opened first, then every proof"
        f" ({broker['proofs_sent_s']:.2f} s to send): {broker['proofs_checked']:.0f} checked,"
        f" {broker['proofs_refused_unchecked']:.0f} refused unchecked, the right one"
        f" {'accepted' if broker['right_proof_accepted'] else 'refused'}",
        f"broker SCRAM: a guesser on 127.0.0.2, the owner on 127.0.0.3: {broker['owner_admitted']:.0f} of"
        f" {broker['owner_logins']:.0f} logins admitted, longest {broker['owner_max_wait_s'] * 1000:.0f} ms"
        f" (control {broker['owner_control_s'] * 1000:.0f} ms)",
    ]


def main() -> int:
    import argparse
    import json
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--iterations", type=int, default=ITERATIONS, help="PBKDF2 iterations of the HTTP logins' users"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-attacks-") as tmp:
        broker = broker_attacks(Path(tmp))
    for line in report(broker):
        print(line, flush=True)
    http = asyncio.run(http_attacks.measure_all(args.iterations))
    for line in http_attacks.report(http):
        print(line)
    if args.json:
        args.json.write_text(json.dumps({"broker": broker, "http": http}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
