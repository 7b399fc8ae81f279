"""A Spark standalone cluster on loopback, from the PySpark wheel: `streamshop spark-cluster`.

The wheel ships Spark's jars and `bin/spark-class`, which is all a standalone cluster needs: a
master and N workers, each a JVM of its own, on ports chosen free (Spark's defaults, 7077 and
8080, collide with the stack: its dashboard serves on 8080):

    master:   spark://127.0.0.1:<port>, web UI http://127.0.0.1:<web port> (/json/: workers, apps)
    worker n: <cores> cores and <memory> MB for executors, logs and executors' work under DIR/worker-n
    state of the whole cluster in DIR/spark-cluster.json

Workers run their executors as child processes; those start Python workers with the driver's
interpreter (its PYSPARK_PYTHON, which every Python function carries) and
`spark.executorEnv.PYTHONPATH`, which `analytics.spark.spark_session` sets to this project: on one
host the executors use the same virtualenv. Across hosts, a packed environment travels with the
application instead (`streamshop analytics pack`, `analytics run --python-env`; docs/analytics.md).
Stopping sends SIGTERM, then SIGKILL after `STOP_GRACE_S`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kit.pids import StartedProcesses
from kit.ports import free_ports
from streamshop.clients import CommandError

__all__ = [
    "DEFAULT_DIR",
    "Member",
    "SparkCluster",
    "master_state",
    "master_url_of",
    "spark_home",
    "start",
    "status",
    "stop",
]

HOST = "127.0.0.1"
DEFAULT_DIR = Path("data/spark-cluster")
STOP_GRACE_S = 30.0
STATE = "spark-cluster.json"
# Heap of the master's and each worker's own JVM (SPARK_DAEMON_MEMORY; Spark's default is 1g):
# they only schedule; the executors have memory of their own.
DAEMON_HEAP_MB = 256
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


@dataclass
class Member:
    name: str  # "master", "worker-1", ...
    web_port: int
    port: int = 0  # the master's RPC port; a worker's is chosen by the worker
    pid: int | None = None


@dataclass
class SparkCluster:
    directory: Path
    master: Member
    workers: list[Member] = field(default_factory=list)
    cores: int = 1
    memory_mb: int = 1024

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master.port}"

    @property
    def web_url(self) -> str:
        return f"http://{HOST}:{self.master.web_port}"

    def home(self, member: Member) -> Path:
        return self.directory / member.name

    def save(self) -> None:
        state = {
            "master": asdict(self.master),
            "workers": [asdict(w) for w in self.workers],
            "cores": self.cores,
            "memory_mb": self.memory_mb,
        }
        (self.directory / STATE).write_text(json.dumps(state, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path) -> SparkCluster:
        try:
            state = json.loads((directory / STATE).read_text())
            return cls(
                directory,
                Member(**state["master"]),
                [Member(**w) for w in state["workers"]],
                int(state["cores"]),
                int(state["memory_mb"]),
            )
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CommandError(f"no Spark cluster in {directory}: {e}") from None

    def launch(self, member: Member) -> None:
        home = self.home(member)
        home.mkdir(parents=True, exist_ok=True)
        if member is self.master:
            args = [MASTER, "--host", HOST, "--port", str(member.port), "--webui-port", str(member.web_port)]
        else:
            args = [
                WORKER,
                "--host",
                HOST,
                "--webui-port",
                str(member.web_port),
                "--cores",
                str(self.cores),
                "--memory",
                f"{self.memory_mb}m",
                "--work-dir",
                str(home / "work"),
                self.master_url,
            ]
        # Without the caller's PYTHONPATH: an executor's Python workers put the worker's PYTHONPATH
        # before their interpreter's site-packages, so a checkout on it would shadow the project an
        # application ships in a packed environment, as it could on no other host.
        env = {
            **{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOG_DIR": str(home),
            "SPARK_DAEMON_MEMORY": f"{DAEMON_HEAP_MB}m",
            # They schedule, they do not compute: the client JIT and a serial collector start them
            # with a third less CPU (the executors' options are the application's).
            "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        }
        with open(home / f"{member.name}.log", "ab") as log:
            proc = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # a Ctrl-C of the shell that started it leaves it running
            )
        _STARTED.add(proc)
        member.pid = proc.pid  # spark-class ends in `exec java`: the JVM keeps this pid
        self.save()


# The daemons this process started, kept until they are reaped.
_STARTED = StartedProcesses()


def spark_home() -> Path:
    """The PySpark wheel's directory: Spark's jars and `bin/spark-class`."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise CommandError("pyspark is not installed: `make setup` installs it")
    return Path(spec.origin).parent


def alive(pid: int | None) -> bool:
    return _STARTED.alive(pid)


def start(
    directory: Path, *, workers: int = 2, cores: int = 1, memory_mb: int = 1024, timeout: float = 120.0
) -> SparkCluster:
    """Start the cluster in `directory` (its ports chosen the first time, kept after) and wait
    until every worker has registered with the master."""
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / STATE).exists():
        cluster = SparkCluster.load(directory)
        if any(alive(m.pid) for m in [cluster.master, *cluster.workers]):
            raise CommandError(f"the Spark cluster in {directory} is running: stop it first")
    else:
        if not 1 <= workers <= 8:
            raise CommandError("--workers must be 1 to 8")
        if cores < 1 or memory_mb < 512:
            raise CommandError("each worker needs at least 1 core and 512 MB (an executor's least)")
        port, web, *webs = free_ports(2 + workers)
        cluster = SparkCluster(
            directory,
            Member("master", web, port),
            [Member(f"worker-{i + 1}", p) for i, p in enumerate(webs)],
            cores,
            memory_mb,
        )
    cluster.launch(cluster.master)
    for worker in cluster.workers:
        cluster.launch(worker)
    try:
        wait_ready(cluster, timeout)
    except CommandError:
        stop(directory, grace=5)
        raise
    return cluster


def master_state(cluster: SparkCluster, timeout: float = 5.0) -> dict[str, Any]:
    """The master's own view, from its web UI's `/json/`."""
    with urllib.request.urlopen(f"{cluster.web_url}/json/", timeout=timeout) as answer:
        state: dict[str, Any] = json.load(answer)
    return state


def wait_ready(cluster: SparkCluster, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        dead = [m.name for m in [cluster.master, *cluster.workers] if not alive(m.pid)]
        if dead:
            logs = ", ".join(
                str(cluster.home(m) / f"{m.name}.log") for m in [cluster.master, *cluster.workers] if m.name in dead
            )
            raise CommandError(f"{', '.join(dead)} exited while starting; see {logs}")
        try:
            state = master_state(cluster)
            registered = sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")
            if registered >= len(cluster.workers):
                return
            last = f"{registered} of {len(cluster.workers)} workers registered"
        except (OSError, ValueError) as e:
            last = str(e)
        time.sleep(0.5)
    raise CommandError(f"the Spark cluster was not ready within {timeout:g} s: {last}")


def stop(directory: Path, grace: float = STOP_GRACE_S) -> SparkCluster:
    """Stop the workers (their executors exit with them), then the master."""
    cluster = SparkCluster.load(directory.resolve())
    for group in (cluster.workers, [cluster.master]):
        running = [m for m in group if alive(m.pid)]
        for member in running:
            _signal(member.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(alive(m.pid) for m in running) and time.monotonic() < deadline:
            time.sleep(0.1)
        for member in running:
            if alive(member.pid):
                _signal(member.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(alive(m.pid) for m in [cluster.master, *cluster.workers]) and time.monotonic() < deadline:
        time.sleep(0.05)
    for member in [cluster.master, *cluster.workers]:
        member.pid = None
    cluster.save()
    reap()
    return cluster


def reap() -> None:
    """Collect the exit status of every daemon this process started that has ended (one stopped
    by another process's `spark-cluster stop`, say)."""
    _STARTED.reap()


def _signal(pid: int | None, sig: int) -> None:
    if pid is None:
        return
    try:
        os.killpg(pid, sig)  # the JVM and any executor it started
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def master_url_of(cluster: str) -> str:
    """`streamshop up --spark-cluster`: a master URL as given, else that of the running cluster in
    the directory `cluster` (DEFAULT_DIR when empty)."""
    if cluster.startswith("spark://"):
        return cluster
    directory = Path(cluster or DEFAULT_DIR)
    running = SparkCluster.load(directory)
    try:
        master_state(running)
    except OSError as e:
        start = f"streamshop spark-cluster start --dir {directory}"
        raise CommandError(f"the Spark cluster in {directory} does not answer ({e}): `{start}`") from None
    return running.master_url


def status(directory: Path) -> dict[str, object]:
    """The master's URL and UI, each member's pid and liveness, and, when the master answers,
    its workers (cores, memory, state) and applications."""
    cluster = SparkCluster.load(directory.resolve())
    report: dict[str, object] = {
        "master_url": cluster.master_url,
        "web_url": cluster.web_url,
        "members": [{"name": m.name, "pid": m.pid, "alive": alive(m.pid)} for m in [cluster.master, *cluster.workers]],
    }
    try:
        state = master_state(cluster)
    except (OSError, ValueError) as e:  # URLError is an OSError
        report["master"] = f"no answer: {e}"
        return report
    report["workers"] = [
        {k: w.get(k) for k in ("id", "host", "port", "state", "cores", "coresused", "memory", "memoryused")}
        for w in state.get("workers", [])
    ]
    report["applications"] = [
        {k: a.get(k) for k in ("id", "name", "state", "cores")} for a in state.get("activeapps", [])
    ]
    return report
