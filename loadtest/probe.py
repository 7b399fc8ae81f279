"""A second client that measures how long the broker keeps it waiting: ApiVersions round
trips on a connection of its own while something else happens."""

from __future__ import annotations

import struct
import threading
import time

from loadtest.brokers import connect, recv_exactly


class Probe:
    """ApiVersions every `interval` seconds on one connection; the slowest answer while it runs."""

    def __init__(self, bootstrap: str, interval: float = 0.005) -> None:
        self.bootstrap = bootstrap
        self.interval = interval
        self.worst = 0.0
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        request = struct.pack(">hhih", 18, 0, 1, 5) + b"probe"
        frame = struct.pack(">i", len(request)) + request
        with connect(self.bootstrap, timeout=600) as s:
            while not self._stop.is_set():
                started = time.perf_counter()
                s.sendall(frame)
                size = struct.unpack(">i", recv_exactly(s, 4))[0]
                recv_exactly(s, size)
                self.worst = max(self.worst, time.perf_counter() - started)
                self.count += 1
                time.sleep(self.interval)

    def __enter__(self) -> Probe:
        self._thread.start()
        time.sleep(0.2)
        self.worst = 0.0  # the connection's first answer is not the loop's fault
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(600)
