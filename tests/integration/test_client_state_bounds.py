"""A flood of distinct client ids and SASL mechanisms, over real connections, grows a broker
process by a bounded amount: its quota measurements stay within their cap, its authentication
metric keeps a fixed set of mechanism labels, and its resident memory grows about as much as it
does for the same number of requests from one client id and one mechanism (the control)."""

from __future__ import annotations

import os
import re
import selectors
import socket
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest, EntityData, EntryData, OpData
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.static.primitive import f64

from broker.quotas import MAX_SENSORS
from tests.support.harness import BrokerProcess
from tests.support.kafka_wire import connect, encode_request, parse_bootstrap

pytestmark = pytest.mark.slow

# 25,000 of each in the suite (past MAX_SENSORS, and unbounded they grew the broker by ~45 MiB);
# the figure in the docs is of 100,000: FLOOD_SIZE=100000 pytest -s tests/integration/test_client_state_bounds.py
N = int(os.environ.get("FLOOD_SIZE", "25000"))
MiB = 1024 * 1024
METADATA_KEY, METADATA_VERSION = 3, 12


def _rss(pid: int) -> int:
    match = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    assert match is not None
    return int(match.group(1)) * 1024


def _metrics(admin_url: str) -> str:
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=60) as response:
        return str(response.read().decode())


def _quota_sensors(admin_url: str) -> float:
    match = re.search(r"^streamshop_quota_sensors (\S+)$", _metrics(admin_url), re.M)
    assert match is not None
    return float(match.group(1))


def _mechanism_labels(admin_url: str) -> set[str]:
    return set(re.findall(r'^streamshop_authentications_total\{mechanism="([^"]*)"', _metrics(admin_url), re.M))


def _requests(bootstrap: str, client_ids: Iterable[str], window: int = 500) -> None:
    """One Metadata request (no topics) per client id, pipelined on one connection, each answered."""
    body = MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    with connect(bootstrap) as conn:
        pending = 0
        for client_id in client_ids:
            conn.send(body, client_id=client_id)
            pending += 1
            if pending == window:
                for _ in range(pending):
                    conn.recv_frame()
                pending = 0
        for _ in range(pending):
            conn.recv_frame()


def _handshakes(bootstrap: str, mechanisms: Iterable[str], parallel: int = 64) -> None:
    """One connection per SaslHandshake (a plaintext listener answers ILLEGAL_SASL_STATE and
    closes it, as for any refused mechanism), `parallel` at a time; each is read to its close."""
    host, port = parse_bootstrap(bootstrap)
    selector = selectors.DefaultSelector()
    names = iter(mechanisms)

    def open_one() -> bool:
        mechanism = next(names, None)
        if mechanism is None:
            return False
        sock = socket.create_connection((host, port), timeout=60)
        sock.sendall(encode_request(SaslHandshakeRequest(mechanism=mechanism), 1))
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
        return True

    open_count = sum(open_one() for _ in range(parallel))
    while open_count:
        events = selector.select(timeout=60)
        assert events, "the broker neither answered nor closed a handshake within 60 s"
        for key, _ in events:
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                selector.unregister(sock)
                sock.close()
                open_count -= 1
                open_count += open_one()
    selector.close()


def _growth(pid: int, flood: Callable[[], None]) -> int:
    before = _rss(pid)
    flood()
    return _rss(pid) - before


def test_a_flood_of_distinct_client_ids_and_mechanisms_grows_the_broker_by_a_bounded_amount(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    # No delay before closing a refused handshake: the measure is of memory, not of the delay.
    broker = broker_process_factory({"connection.failed.authentication.delay.ms": "0"})
    assert broker.proc is not None
    pid = broker.proc.pid
    with connect(broker.bootstrap) as conn:
        # A quota on every client id: each distinct id is measured on its own (Kafka's default entity).
        entry = EntryData(
            entity=(EntityData(entity_type="client-id", entity_name=None),),
            ops=(OpData(key="request_percentage", value=f64(10_000.0), remove=False),),
        )
        (result,) = conn.request(AlterClientQuotasRequest(entries=(entry,), validate_only=False)).entries
        assert result.error_code == ErrorCode.none

    # Warm the process with a tenth of each flood, so that both phases measure steady growth.
    _requests(broker.bootstrap, (f"warm-{n}" for n in range(N // 10)))
    _handshakes(broker.bootstrap, (f"WARM-{n}" for n in range(N // 10)))

    control = _growth(pid, lambda: _requests(broker.bootstrap, ("one-client" for _ in range(N))))
    control += _growth(pid, lambda: _handshakes(broker.bootstrap, ("PLAIN" for _ in range(N))))
    flood = _growth(pid, lambda: _requests(broker.bootstrap, (f"client-{n}" for n in range(N))))
    flood += _growth(pid, lambda: _handshakes(broker.bootstrap, (f"MECHANISM-{n}" for n in range(N))))

    assert _quota_sensors(broker.admin_url) == MAX_SENSORS
    assert _mechanism_labels(broker.admin_url) == {"PLAIN", "other"}
    print(f"RSS growth: control {control / MiB:.1f} MiB, {N} distinct ids and mechanisms {flood / MiB:.1f} MiB")
    # Unbounded, each id kept a rate (~1 KiB) and each mechanism a labelled counter: ~45 MiB here.
    assert flood <= control + 16 * MiB
