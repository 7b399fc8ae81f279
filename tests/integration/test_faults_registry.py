"""Registry processes under a paused primary: SIGSTOP the elected writer past its session timeout
(and past its transaction's timeout) while clients keep registering through every instance, then
SIGCONT it, and judge the history.

What must hold: no registration is answered 500 (a write that cannot be made now is answered 503
with Retry-After, or forwarded); every registration answered 2xx has an id that no other schema
got and that every instance serves afterwards; and writes through every instance resume after
the SIGCONT. The registry's bound (docs/registry.md) is twice the write timeout plus a heartbeat
and a few seconds, about 10 s here; the test waits on a far more generous deadline and prints
what it measured.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from registry.schema_text import parse_avro
from tests.support.harness import ThreadBroker
from tests.support.registry import Api, RegistryProcess

pytestmark = [pytest.mark.fault, pytest.mark.slow]

SESSION_MS = 2000
WRITE_TIMEOUT_S = 2.0  # the writer's transaction.timeout.ms is four times this: 8 s
RESUME_DEADLINE_S = 90.0  # generous: the bound the registry keeps is far shorter (see the module doc)


@dataclass(frozen=True)
class Call:
    """One registration a client sent and what it was told."""

    instance: int
    subject: str
    schema: str
    status: int | None  # None: no answer (timed out or the connection failed)
    schema_id: int | None
    retry_after: str | None
    sent: float
    answered: float
    body: str


def record(name: str) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": [{"name": "x", "type": "string"}]}


async def _readyz(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(url + "/readyz") as response:
        return dict(await response.json())


async def _primary_index(session: aiohttp.ClientSession, processes: list[RegistryProcess]) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        roles = [(await _readyz(session, p.url)).get("role") for p in processes]
        if roles.count("primary") == 1 and roles.count("secondary") == len(processes) - 1:
            return roles.index("primary")
        await asyncio.sleep(0.1)
    raise AssertionError(f"no single primary elected: {roles}")


@pytest.mark.parametrize(
    ("pause_s", "session_ms", "only_it_eligible"),
    [
        (5.0, SESSION_MS, False),
        (12.0, SESSION_MS, False),
        (5.0, SESSION_MS, True),
        (12.0, SESSION_MS, True),
        (12.0, 20_000, False),
    ],
    ids=[
        "past-the-session",
        "past-the-transaction-timeout",
        "past-the-session-and-elected-again",
        "past-the-transaction-timeout-and-elected-again",
        "past-the-transaction-timeout-within-the-session",
    ],
)
async def test_a_paused_primary_never_stops_the_registry_taking_writes(
    broker_factory: Callable[..., ThreadBroker], tmp_path: Path, pause_s: float, session_ms: int, only_it_eligible: bool
) -> None:
    """With every instance eligible another takes the role during a pause past the session and
    keeps it. With only the paused one eligible the group elects it again once it resumes, with
    the producer it was paused in (its commit timed out; past the transaction timeout the broker
    also aborted the transaction and bumped the epoch): it must replace that producer and write
    again. Paused past the transaction timeout but within its session, it stays the primary of
    the same generation with a fenced producer, and must replace it all the same."""
    broker = broker_factory(settings={"group.min.session.timeout.ms": "1000"})
    env = {
        "REGISTRY_SESSION_TIMEOUT_MS": str(session_ms),
        "REGISTRY_HEARTBEAT_INTERVAL_MS": "300",
        "REGISTRY_WRITE_TIMEOUT": str(WRITE_TIMEOUT_S),
    }
    processes = [
        RegistryProcess(
            broker.bootstrap,
            tmp_path / f"registry-{i}.log",
            {**env, "REGISTRY_PRIMARY_ELIGIBLE": str(i == 0 or not only_it_eligible).lower()},
        ).start()
        for i in range(3)
    ]
    paused = False
    victim: RegistryProcess | None = None
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            apis = [Api(session, p.url) for p in processes]
            assert (await apis[0].put("/config", {"compatibility": "NONE"})).status == 200
            victim = processes[await _primary_index(session, processes)]
            assert victim is processes[0] or not only_it_eligible
            history: list[Call] = []
            stop = asyncio.Event()

            async def client(n: int, instance: int) -> None:
                """Registers schema after schema through one instance, each until it is answered 2xx."""
                i = 0
                while not stop.is_set():
                    subject, schema = f"s{n}-{i % 3}", json.dumps(record(f"C{n}x{i}"))
                    while True:
                        sent = time.monotonic()
                        try:
                            async with session.post(
                                f"{apis[instance].url}/subjects/{subject}/versions",
                                json={"schema": schema},
                                headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
                            ) as response:
                                body = await response.text()
                                status: int | None = response.status
                                retry_after = response.headers.get("Retry-After")
                        except (aiohttp.ClientError, TimeoutError) as e:
                            status, body, retry_after = None, repr(e), None
                        schema_id = int(json.loads(body)["id"]) if status == 200 else None
                        answered = time.monotonic()
                        history.append(
                            Call(instance, subject, schema, status, schema_id, retry_after, sent, answered, body)
                        )
                        if status == 200 or stop.is_set():
                            break
                        await asyncio.sleep(0.1)
                    i += 1

            clients = [asyncio.create_task(client(n, n % 3)) for n in range(6)]

            def acknowledged() -> int:
                return sum(c.status == 200 for c in history)

            async def until(condition: Callable[[], bool], within: float, what: str) -> None:
                deadline = time.monotonic() + within
                while not condition():
                    assert time.monotonic() < deadline, f"timed out waiting: {what}"
                    await asyncio.sleep(0.05)

            await until(lambda: acknowledged() >= 30, 60, "30 registrations before the pause")
            assert victim.proc is not None
            victim.proc.send_signal(signal.SIGSTOP)
            paused = True
            await asyncio.sleep(pause_s)  # the fault's length, not a verdict
            victim.proc.send_signal(signal.SIGCONT)
            paused = False
            resumed_at = time.monotonic()

            def written_through_each_since(at: float) -> bool:
                return all(any(c.status == 200 and c.sent >= at for c in history if c.instance == i) for i in range(3))

            await until(lambda: written_through_each_since(resumed_at), RESUME_DEADLINE_S, "writes through each")
            resumed_in = (
                max(
                    min(c.answered for c in history if c.instance == i and c.status == 200 and c.sent >= resumed_at)
                    for i in range(3)
                )
                - resumed_at
            )
            await until(lambda: written_through_each_since(time.monotonic() - 0.5), 30, "writes still flowing")
            stop.set()
            await asyncio.gather(*clients)

            errors = [c for c in history if c.status is not None and c.status >= 500 and c.status != 503]
            assert not errors, f"{len(errors)} answers of 500 or worse: {sorted({c.body[:160] for c in errors})}"
            unavailable = [c for c in history if c.status == 503]
            assert all(c.retry_after is not None for c in unavailable), "a 503 without Retry-After"

            # Every acknowledged registration: one id per schema, never reused, served everywhere.
            ids: dict[int, str] = {}
            for call in history:
                if call.schema_id is not None:
                    identity = parse_avro(call.schema).identity
                    assert ids.setdefault(call.schema_id, identity) == identity, f"id {call.schema_id} for two schemas"
            for api in apis:
                for call in history:
                    if call.schema_id is None:
                        continue
                    found = await api.post(f"/subjects/{call.subject}", {"schema": call.schema})
                    assert found.status == 200, (api.url, call, found)
                    assert found.json["id"] == call.schema_id, (api.url, call, found)
                    served = await api.get(f"/schemas/ids/{call.schema_id}")
                    assert parse_avro(served.json["schema"]).identity == ids[call.schema_id]
            primary_now = processes[await _primary_index(session, processes)]
            stays = only_it_eligible or pause_s * 1000 < session_ms
            assert (primary_now is victim) == stays, "the role is not where the election must put it"
            print(
                f"pause {pause_s:.0f} s, elected again: {only_it_eligible}: {acknowledged()} registrations"
                f" acknowledged, {len(unavailable)} answered 503,"
                f" writes through every instance again {resumed_in:.1f} s after SIGCONT"
            )
    finally:
        if paused and victim is not None and victim.proc is not None:
            victim.proc.send_signal(signal.SIGCONT)
        for p in processes:
            p.kill()
