"""Each component's extra, installed alone in a fresh venv (the project with `.[extra]`, each
package at the version and hashes of requirements.lock), runs that component: the broker answers
a Kafka client; the registry stores a schema through its Kafka clients; a service serves and
every service's main imports; the analytics job's modules import and, with Spark's JVM (the spark
tier), it runs a batch; the console tools work against a broker; Locust loads the locustfile.
tests/unit/test_extras_imports.py reads the same from the source; this proves it on an
installation."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from registry.app import RunningRegistry
from streamshop.broker_process import parse_ready_line, parse_registry_ready_line, parse_service_ready_line
from tests.integration.test_images import UV, environment, project_source, run
from tests.support import processes
from tests.support.harness import REPO, ThreadBroker

pytestmark = pytest.mark.slow

LOCK = REPO / "requirements.lock"


def extra_venv(root: Path, extra: str) -> Path:
    """A virtualenv with the project and `extra` alone, every package pinned by requirements.lock
    and checked against its hashes there (uv verifies a constraint's hashes), served from uv's
    cache when `make setup` filled it."""
    subprocess.run([UV, "venv", "--quiet", "--python", sys.executable, str(root)], check=True)
    python = str(root / "bin" / "python")
    install = [UV, "pip", "install", "--quiet", "--python", python, "--constraint", str(LOCK)]
    source = f"{project_source(root)}[{extra}]"
    # Offline first: a machine that ran `make setup` has every file in uv's cache.
    if subprocess.run([*install, "--offline", source], cwd=root, capture_output=True, check=False).returncode:
        subprocess.run([*install, source], cwd=root, check=True)
    subprocess.run([UV, "cache", "prune", "--quiet"], check=True)  # test_images.venv says why
    frozen = subprocess.run(
        [UV, "pip", "freeze", "--python", python], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    pins = {line.split(" ")[0].lower() for line in LOCK.read_text().splitlines() if "==" in line}
    unpinned = [line for line in frozen if not line.startswith("streamshop") and line.lower() not in pins]
    assert not unpinned, f"installed but not pinned by requirements.lock: {unpinned}"
    return root


def imports(root: Path, modules: list[str]) -> subprocess.CompletedProcess[str]:
    """Import each of `modules` in the venv at `root`."""
    check = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    return subprocess.run(
        [str(root / "bin" / "python"), "-c", check, *modules],
        cwd=root,
        env=environment(root),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def modules_of(package: str) -> list[str]:
    """Every module of one of the project's packages, by its dotted name."""
    found = []
    for path in sorted((REPO / package).rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


@contextmanager
def started(root: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`streamshop ARGS` of the venv at `root` until its ready line (yielded with the process);
    then SIGTERM, and it must exit 0.  The suite's timeout bounds a process that never gets ready."""
    log = root / f"{args[0]}.stderr"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [str(root / "bin" / "streamshop"), *args],
            cwd=root,
            env={**environment(root), **(env or {})},
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith(f"streamshop {args[0]} ready on "):
                break
        else:
            raise AssertionError(f"{args[0]} exited {process.wait()} before ready: {log.read_text()[-3000:]}")
        yield process, line.strip()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log.read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def stop_processes_of(root: Path, grace: float = 60.0) -> None:
    """SIGKILL every process running from the venv at `root` (its command line names it), and
    wait until they are gone."""
    needle = str(root).encode()

    def running() -> set[int]:
        found = set()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if needle in (entry / "cmdline").read_bytes():
                        found.add(int(entry.name))
        return found

    deadline = time.monotonic() + grace
    while (pids := running()) and time.monotonic() < deadline:
        processes.kill(pids)
        time.sleep(0.2)
    assert not pids, f"still running from {root}: {pids}"


def http(url: str, body: object | None = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/vnd.schemaregistry.v1+json"} if data else {}
    with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=30) as reply:
        return json.loads(reply.read())


def test_the_broker_extra_alone_runs_a_broker_a_kafka_client_talks_to(tmp_path: Path) -> None:
    root = extra_venv(tmp_path / "venv", "broker")
    data = tmp_path / "data"
    with started(root, "broker", "--data-dir", str(data), "--listen", "127.0.0.1:0", "--admin-listen", "off") as (
        _,
        line,
    ):
        ready = parse_ready_line(line)
        assert ready is not None, line
        admin = AdminClient({"bootstrap.servers": f"{ready.host}:{ready.port}"})
        created = admin.create_topics([NewTopic("extras", 3)])
        created["extras"].result(timeout=60)
        metadata = admin.list_topics(timeout=60)
        assert len(metadata.topics["extras"].partitions) == 3
    assert (data / "extras-0").is_dir()


def test_the_registry_extra_alone_runs_a_registry_that_stores_schemas(tmp_path: Path, broker: ThreadBroker) -> None:
    root = extra_venv(tmp_path / "venv", "registry")
    with started(root, "registry", "--bootstrap", broker.bootstrap, "--listen", "127.0.0.1:0") as (_, line):
        url = parse_registry_ready_line(line)
        assert url is not None, line
        schema = {"type": "record", "name": "Extra", "fields": [{"name": "id", "type": "string"}]}
        registered = http(f"{url}/subjects/extras-value/versions", {"schema": json.dumps(schema)})
        assert isinstance(registered, dict)
        assert http(f"{url}/subjects") == ["extras-value"]
        stored = http(f"{url}/schemas/ids/{registered['id']}")
        assert isinstance(stored, dict)
        assert json.loads(stored["schema"]) == schema


def test_the_services_extra_alone_runs_a_service_and_imports_every_services_main(
    tmp_path: Path, broker: ThreadBroker
) -> None:
    root = extra_venv(tmp_path / "venv", "services")
    mains = [m for m in modules_of("services") if m.endswith(".main")]
    assert len(mains) >= 6, mains
    done = imports(root, mains)
    assert done.returncode == 0, done.stderr[-3000:]
    # The SMS sender: a share-group member (confluent-kafka) beside the services' aiokafka clients.
    env = {
        "SMS_SENDER_BOOTSTRAP_SERVERS": broker.bootstrap,
        "SMS_SENDER_DATABASE_PATH": str(tmp_path / "sms.db"),
        "SMS_SENDER_SEAL_KEY": base64.b64encode(os.urandom(32)).decode(),
    }
    with started(root, "sms-sender", "--port", "0", env=env) as (_, line):
        ready = parse_service_ready_line(line)
        assert ready is not None, line
        assert http(f"{ready.url}/healthz") is not None


def test_the_analytics_extra_alone_imports_every_module_of_the_job(tmp_path: Path) -> None:
    root = extra_venv(tmp_path / "venv", "analytics")
    done = imports(root, [*modules_of("analytics"), "streamshop.analytics_pack"])
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.spark
async def test_the_analytics_extra_alone_runs_a_batch_of_the_job(
    tmp_path: Path, broker: ThreadBroker, running_registry: RunningRegistry
) -> None:
    """Spark's JVM starts, reads the logs job's topics and commits: a minute or so."""
    root = await asyncio.to_thread(extra_venv, tmp_path / "venv", "analytics")
    process = await asyncio.create_subprocess_exec(
        str(root / "bin" / "streamshop"),
        *("analytics", "run", "--once", "--jobs", "logs", "--bootstrap", broker.bootstrap),
        *("--registry-url", running_registry.url, "--data-dir", str(tmp_path / "analytics")),
        cwd=root,
        env=environment(root),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout=600)
    finally:
        # The job's first run in a venv writes the driver's class-data archive in a process of
        # its own, in the background (analytics.spark): for later runs, which this venv has none.
        await asyncio.to_thread(stop_processes_of, root)
    text = output.decode(errors="replace")
    assert process.returncode == 0, text[-3000:]
    assert "analytics logs: stopped after 1 batch(es)" in text, text[-3000:]


def test_the_tools_extra_alone_runs_the_console_tools_against_a_broker(tmp_path: Path, broker: ThreadBroker) -> None:
    root = extra_venv(tmp_path / "venv", "tools")
    bootstrap = ("--bootstrap", broker.bootstrap)
    done = run(root, "topics", "create", "extras", "--partitions", "2", *bootstrap)
    assert done.returncode == 0, done.stderr[-3000:]
    done = run(root, "topics", "list", *bootstrap)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "extras" in done.stdout.split()
    for args in (("groups", "list"), ("transactions", "list")):
        done = run(root, *args, *bootstrap)
        assert done.returncode == 0, (args, done.stderr[-3000:])
        assert "missing" not in done.stderr, (args, done.stderr[-3000:])  # share groups are listed with aiokafka


def test_the_load_extra_alone_loads_the_locustfile(tmp_path: Path) -> None:
    root = extra_venv(tmp_path / "venv", "load")
    shutil.copytree(REPO / "loadtest", root / "loadtest", ignore=shutil.ignore_patterns("__pycache__", "results"))
    done = subprocess.run(
        [str(root / "bin" / "python"), "-m", "locust", "-f", "loadtest/locustfile.py", "--list"],
        cwd=root,
        env=environment(root),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), done.stderr[-3000:]
