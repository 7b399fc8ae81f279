"""Real brokers for tests: in a background thread (fast; works with blocking clients such
as confluent-kafka and with asyncio clients alike) or as a child process (for restarts
and SIGKILL).  Both listen on 127.0.0.1, on a port chosen below the kernel's ephemeral range:
a restart binds the same port again, and a port from that range may meanwhile have become some
client connection's local port."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from broker.app import RunningBroker, start_broker
from broker.clock import Clock
from broker.config import BrokerConfig
from kit.ports import free_port, free_ports
from streamshop.broker_process import broker_command, parse_ready_line

T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The loop `streamshop broker` runs on: uvloop where installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


REPO = Path(__file__).resolve().parents[2]


class ThreadBroker:
    """A broker on its own event loop in a daemon thread."""

    def __init__(self, data_dir: Path, settings: dict[str, str] | None = None, clock: Clock | None = None) -> None:
        self.data_dir = data_dir
        self.settings = dict(settings or {})
        self.clock = clock
        self.loop = new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="test-broker")
        self.running: RunningBroker | None = None
        self.port = free_port()

    def start(self) -> ThreadBroker:
        if not self.thread.is_alive():
            self.thread.start()
        config = BrokerConfig(
            data_dir=self.data_dir,
            listen=("127.0.0.1", self.port),
            admin_listen=("127.0.0.1", 0),
            settings=self.settings,
        )
        self.running = self.run(start_broker(config, self.clock))
        self.port = self.running.port
        return self

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run a coroutine on the broker's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[[], T], timeout: float = 30) -> T:
        """Run a plain function on the broker's loop thread (safe access to its state)."""

        async def wrapper() -> T:
            return fn()

        return self.run(wrapper(), timeout)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def admin_url(self) -> str:
        assert self.running is not None
        return f"http://127.0.0.1:{self.running.admin_port}"

    @property
    def broker(self) -> Any:
        assert self.running is not None
        return self.running.broker

    @property
    def server(self) -> Any:
        """The Kafka listener (connections, request memory)."""
        assert self.running is not None
        return self.running.server

    def stop(self) -> None:
        if self.running is not None:
            self.run(self.running.stop())
            self.running = None

    def restart(self) -> ThreadBroker:
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop cleanly; closing again (a test that restarts on the same directory) does nothing."""
        if self.loop.is_closed():
            return
        self.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class BrokerProcess:
    """`streamshop broker` as a child process, for restarts and crash tests."""

    def __init__(
        self,
        data_dir: Path,
        settings: dict[str, str] | None = None,
        *,
        nofile: int | None = None,
        wrapper: Sequence[str] = (),
    ) -> None:
        self.data_dir = data_dir
        self.settings = dict(settings or {})
        self.nofile = nofile  # RLIMIT_NOFILE (soft) of the child, when set
        self.wrapper = list(wrapper)  # a command the broker runs under (e.g. fiu-run -x), exec'ing it
        self.env: dict[str, str] = {}  # added to the broker's environment (e.g. LD_PRELOAD)
        self.proc: subprocess.Popen[str] | None = None
        self.port, self.admin_port = free_ports(2)
        self.log_path = data_dir.parent / f"{data_dir.name}-broker.log"

    def start(self, timeout: float = 30) -> BrokerProcess:
        cmd = [
            *self.wrapper,
            *broker_command(self.data_dir, f"127.0.0.1:{self.port}", f"127.0.0.1:{self.admin_port}", self.settings),
        ]
        log = open(self.log_path, "a")  # noqa: SIM115 - the child owns it for its lifetime
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
            preexec_fn=self._limit if self.nofile else None,  # noqa: PLW1509 - only setrlimit
        )
        log.close()
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"broker exited with {self.proc.wait()}: see {self.log_path}")
            ready = parse_ready_line(line)
            if ready is not None:
                self.port = ready.port
                if ready.admin_url:
                    self.admin_port = int(ready.admin_url.rsplit(":", 1)[1])
                return self
        raise TimeoutError("broker did not report ready")

    def _limit(self) -> None:
        assert self.nofile is not None
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, hard))

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def kill(self) -> None:
        """SIGKILL: no flush, no clean-shutdown marker."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait(10)
            self._release()

    def stop(self) -> int:
        """SIGTERM and wait: a clean shutdown."""
        code = 0
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            code = self.proc.wait(30)
            self._release()
        return code

    def _release(self) -> None:
        assert self.proc is not None
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()


def streamshop_cli(
    *args: str, timeout: float = 180, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`streamshop ARGS...` as a user runs it: a child process from the checkout, its output
    captured; in `env` (default: this process's environment)."""
    return subprocess.run(
        [sys.executable, "-m", "streamshop.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"},
        check=False,
    )
