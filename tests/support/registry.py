"""Real schema registries for tests, against a real broker: in-process on the test's event loop
(`registry`), on a loop of their own in a thread (`ThreadRegistry`, for blocking clients such as
confluent-kafka's `SchemaRegistryClient`), or as a `streamshop registry` child process
(`RegistryProcess`). Each listens on 127.0.0.1 with an OS-assigned port."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from registry.app import RunningRegistry, start_registry
from registry.config import RegistryConfig
from streamshop.broker_process import parse_registry_ready_line

REPO = Path(__file__).resolve().parents[2]
V1 = "application/vnd.schemaregistry.v1+json"


def config(bootstrap: str, **overrides: Any) -> RegistryConfig:
    return RegistryConfig(bootstrap_servers=bootstrap, listen="127.0.0.1", port=0, startup_timeout=30, **overrides)


@asynccontextmanager
async def registry(bootstrap: str, **overrides: Any) -> AsyncIterator[RunningRegistry]:
    running = await start_registry(config(bootstrap, **overrides))
    try:
        yield running
    finally:
        await running.stop()


def http_json(method: str, url: str, payload: Any = None) -> Any:
    """One blocking call of a registry's API (for tests that run it as a process)."""
    data = json.dumps(payload).encode() if payload is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": V1})
    with urllib.request.urlopen(request, timeout=20) as response:
        return json.loads(response.read())


@dataclass
class Reply:
    status: int
    content_type: str
    text: str

    @property
    def json(self) -> Any:
        return json.loads(self.text)

    @property
    def error_code(self) -> int:
        return int(self.json["error_code"])


class Api:
    """A small HTTP client for one registry: `await api.post("/subjects/x/versions", {...})`."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session = session
        self.url = url

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        all_headers = {"Content-Type": V1} if body is not None or data is not None else {}
        all_headers.update(headers or {})
        payload = json.dumps(body).encode() if body is not None else data
        async with self.session.request(method, self.url + path, data=payload, headers=all_headers) as response:
            return Reply(response.status, response.content_type, await response.text())

    async def get(self, path: str, **kw: Any) -> Reply:
        return await self.call("GET", path, **kw)

    async def post(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return await self.call("POST", path, body, **kw)

    async def put(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return await self.call("PUT", path, body, **kw)

    async def delete(self, path: str, **kw: Any) -> Reply:
        return await self.call("DELETE", path, **kw)

    async def register(self, subject: str, schema: Any) -> int:
        reply = await self.post(f"/subjects/{subject}/versions", {"schema": json.dumps(schema)})
        assert reply.status == 200, reply
        return int(reply.json["id"])


class ThreadRegistry:
    """A registry on its own event loop in a daemon thread."""

    def __init__(self, bootstrap: str, **overrides: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="test-registry")
        self.thread.start()
        self.running: RunningRegistry = asyncio.run_coroutine_threadsafe(
            start_registry(config(bootstrap, **overrides)), self.loop
        ).result(60)

    @property
    def url(self) -> str:
        return self.running.url

    def __enter__(self) -> ThreadRegistry:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self, timeout: float = 30) -> None:
        asyncio.run_coroutine_threadsafe(self.running.stop(), self.loop).result(timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class RegistryProcess:
    """`streamshop registry` as a child process."""

    def __init__(self, bootstrap: str, log_path: Path, env: Mapping[str, str] | None = None) -> None:
        self.bootstrap = bootstrap
        self.log_path = log_path
        self.env = dict(env or {})
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self, args: list[str] | None = None, timeout: float = 60) -> RegistryProcess:
        cmd = [sys.executable, "-m", "streamshop.cli", "registry"]
        cmd += args if args is not None else ["--bootstrap", self.bootstrap, "--listen", "127.0.0.1:0"]
        log = open(self.log_path, "a")  # noqa: SIM115 - the child owns it for its lifetime
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
        )
        log.close()
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                code = self.proc.wait()
                self.proc.stdout.close()
                self.proc = None
                raise RuntimeError(f"registry exited with {code}: see {self.log_path}")
            url = parse_registry_ready_line(line)
            if url is not None:
                self.url = url
                return self
        raise TimeoutError("registry did not report ready")

    def stop(self) -> int:
        """SIGTERM and wait: the exit status."""
        code = 0
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            code = self.proc.wait(30)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self.proc = None
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.stop()
