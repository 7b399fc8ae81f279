"""`streamshop up`: run the stack's children (streamshop.stack.plan) on one asyncio loop.

Each child has one task that owns its process: start it, pump its stdout and stderr (verbatim
to its log file; to our stdout too with --verbose), wait for its ready line and then for GET
/readyz 200, wait for it to exit, and restart it after a backoff; on stop, SIGTERM it and SIGKILL
it after the grace period.  The console gets one line per event that matters: a child ready, one
that exited or failed (with its last error line and where the rest is).  The supervisor starts
the children level by level (what a child needs must be ready first), prints the URL table, and
stops them in reverse order on SIGINT, SIGTERM or SIGHUP (a second Ctrl-C kills whatever is
left).  An optional child (the analytics job) is not waited for: the stack serves without it, a
failed first start is retried, and it says when it is ready.  Children run in their own process group, so a terminal's
Ctrl-C reaches only the supervisor and the stop order holds; on Linux they get SIGTERM if the
supervisor dies without stopping them.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import aiohttp

from kit.ports import free_ports
from kit.process import signal_child
from streamshop import postgres
from streamshop.broker_users import set_offline
from streamshop.clients import CommandError
from streamshop.spark_cluster import master_url_of
from streamshop.stack import observability
from streamshop.stack.console import Console, use_color
from streamshop.stack.plan import (
    CHILDREN,
    POSTGRES,
    STATEFUL,
    Announced,
    Backoff,
    ChildDef,
    LaunchError,
    Row,
    Secrets,
    StackContext,
    database_name,
    external_broker,
    external_postgres,
    levels,
    parse_scale,
    scaled,
    select,
    url_table,
    with_broker,
    with_postgres,
)
from streamshop.stack.secure import ACCESS, ADMIN, SecureStack, apply_access
from streamshop.stack.state import FILE_NAME, VERSION, iso_now, running_stack, write_stack
from streamshop.stack.up_demo import Endpoints, demo_after_ready

__all__ = ["StackOptions", "Supervisor", "up"]

_LINE_LIMIT = 1 << 20  # longest output line kept whole
_RECENT_LINES = 200  # a child's last lines, kept to say why it failed
_WORD_LIMIT = 240  # longest last line shown on the console
_ERROR_WORDS = re.compile(r"error|exception|failed|fatal|critical|refused|cannot|must be|invalid", re.IGNORECASE)
_JAVA_FRAME = re.compile(r"^[\w$.]+\([\w$.]*(:\d+)?\)$")
_READYZ_INTERVAL = 0.2
# SIGHUP too: closing the terminal stops the stack in order (its children, in their own process
# groups, do not get the terminal's SIGHUP).
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StartError(Exception):
    """A child failed to become ready while the stack was starting."""


@dataclass(frozen=True)
class StackOptions:
    data_dir: Path
    listen: str = "127.0.0.1"
    ephemeral_ports: bool = False
    start_timeout: float = 60.0  # a service, the broker, the registry
    jvm_start_timeout: float = 300.0  # a child that starts a JVM (the analytics job's Spark)
    stop_timeout: float | None = None  # SIGTERM to SIGKILL for every child; None: each its own grace
    log_format: str = "json"
    verbose: bool = False  # every child's output on the console too, not only in its log file
    postgres_url: str | None = None  # `--postgres URL`: a server the stack uses but does not run
    spark_master: str | None = None  # `--spark-cluster`: the analytics job's Spark master
    durability: str | None = None  # `--durability`: the bundled broker's log.durability


def _describe_exit(status: int | None) -> str:
    if status is None:
        return "still running"
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"status {status}"


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn asking Linux to SIGTERM the child when the supervisor dies (even by SIGKILL),
    so a killed `up` leaves no stack behind holding the ports."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)

    return preexec


class Child:
    """One child and the task that keeps it running."""

    def __init__(self, spec: ChildDef, supervisor: Supervisor) -> None:
        self.spec = spec
        self.name = spec.name
        self.sup = supervisor
        options = supervisor.options
        # Ports to bind: after the first start, the ones the child announced, so a restart keeps
        # its URLs (the other children and stack.json stay right) even with --ephemeral-ports.
        self.ports = {role: supervisor.free.pop() if options.ephemeral_ports else p for role, p in spec.ports.items()}
        self.log_path = options.data_dir / "output" / f"{spec.name}.log"
        self.proc: asyncio.subprocess.Process | None = None
        self.state = "pending"
        self.restarts = 0
        self.last_exit: int | None = None
        self.started_at: str | None = None
        self.announced: Announced | None = None
        self.backoff = Backoff()
        self.first_ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.stop_event = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self._log: IO[str] | None = None
        self._not_ready = ""
        self._recent: collections.deque[str] = collections.deque(maxlen=_RECENT_LINES)
        self.timed_out = False  # whether the last `_race` ended at its limit

    @property
    def start_timeout(self) -> float:
        options = self.sup.options
        return options.jvm_start_timeout if self.spec.jvm else options.start_timeout

    def last_words(self) -> str:
        return last_words(self._recent)

    # -- state ------------------------------------------------------------------------------------

    def set_state(self, state: str) -> None:
        self.state = state
        self.sup.save()

    def as_json(self) -> dict[str, Any]:
        running = self.proc is not None and self.proc.returncode is None
        return {
            "state": self.state,
            "pid": self.proc.pid if running and self.proc is not None else None,
            "urls": dict(self.announced.urls) if self.announced else {},
            "restarts": self.restarts,
            "last_exit": self.last_exit,
            "started_at": self.started_at,
            "log": str(self.log_path),
        }

    def note(self, text: str) -> None:
        """A supervisor line about this child, in its log file too."""
        self.sup.console.say(f"{self.name} {text}")
        self._write_log(f"# streamshop up: {self.name} {text}")

    def _write_log(self, text: str) -> None:
        if self._log is None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = self.log_path.open("a", buffering=1, encoding="utf-8")
        self._log.write(text + "\n")

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    # -- the task ---------------------------------------------------------------------------------

    def start(self) -> None:
        run = self._external() if self.spec.external is not None else self._run()
        self.task = asyncio.create_task(run, name=f"child-{self.name}")

    async def _external(self) -> None:
        """A part the stack uses but does not run (a Kafka cluster, a PostgreSQL server): ready
        once it answers."""
        assert self.spec.external is not None
        if "postgresql" in self.spec.external:
            await self._external_postgres()
            return
        bootstrap = self.spec.external["bootstrap"]
        self.set_state("starting")
        try:
            settings = self.sup.secure.operator_kafka() if self.sup.secure else {}
            brokers = await asyncio.to_thread(_cluster_brokers, bootstrap, self.sup.options.start_timeout, settings)
        except Exception as e:  # whatever the client raised is the reason, said once
            self.first_ready.set_exception(StartError(f"the Kafka cluster at {bootstrap} did not answer: {e}"))
            self.state = "failed"
            self.sup.save()
            return
        self.announced = Announced(dict(self.spec.external), {})
        self.note(f"is the Kafka cluster at {bootstrap} ({brokers} brokers), not started by the stack")
        self.set_state("external")
        self.first_ready.set_result(None)
        await self.stop_event.wait()
        self.set_state("stopped")

    async def _external_postgres(self) -> None:
        assert self.spec.external is not None
        url, shown = self.sup.options.postgres_url, self.spec.external["postgresql"]
        assert url is not None
        self.set_state("starting")
        try:
            names = [database_name(n) for n in STATEFUL]
            await asyncio.to_thread(postgres.ensure_databases, url, names, self.sup.options.start_timeout)
        except CommandError as e:
            self.first_ready.set_exception(StartError(str(e)))
            self.state = "failed"
            self.sup.save()
            return
        self.announced = Announced(dict(self.spec.external), {})
        self.note(f"is the PostgreSQL server at {shown}, not started by the stack")
        self.set_state("external")
        self.first_ready.set_result(None)
        await self.stop_event.wait()
        self.set_state("stopped")

    async def _run(self) -> None:
        try:
            await self._keep_running()
        except Exception as e:  # a bug here: say so and fail this child, not the supervisor's loop
            self.note(f"supervision failed: {type(e).__name__}: {e}")
            self.kill()
            if not self.first_ready.done():
                self.first_ready.set_exception(StartError(f"{self.name}: supervision failed: {e}"))
            self.state = "failed"
        finally:
            if not self.first_ready.done():
                self.first_ready.cancel()  # stopped before it was ever ready
            if self.state != "failed":
                self.set_state("stopped")

    async def _keep_running(self) -> None:
        while not self.stop_event.is_set():
            began = time.monotonic()
            failure = await self._run_once()
            if self.stop_event.is_set() or self.sup.stop_requested.is_set():
                break  # the stack is stopping: an exit now is no crash to restart
            why = self.why(failure)
            if not self.first_ready.done() and not self.spec.optional:
                # While the stack starts, a failure is reported, not retried: a bad setting or a
                # taken port would otherwise restart forever.
                self.first_ready.set_exception(StartError(why))
                self.set_state("failed")
                return
            uptime = time.monotonic() - began
            delay = self.backoff.next_delay(uptime)
            self.restarts += 1
            without = (
                "; the rest of the stack serves without it" if self.spec.optional and self.state != "ready" else ""
            )
            self.note(f"{why.removeprefix(self.name + ' ')}{without}; restart {self.restarts} in {delay:g} s")
            self.set_state("backoff")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop_event.wait(), delay)

    def why(self, failure: str) -> str:
        return exit_reason(self.name, failure, self._recent, self.log_path)

    async def _run_once(self) -> str:
        """Start the child, wait until it is ready, then until it exits or a stop is asked for;
        what ended it, as words."""
        self.set_state("starting")
        try:
            proc = await self._spawn()
        except (OSError, LaunchError) as e:
            self.note(f"could not be started: {e}")
            return f"could not be started: {e}"
        ready_line: asyncio.Future[Announced | None] = asyncio.get_running_loop().create_future()
        pumps = asyncio.gather(self._pump(proc.stdout, ready_line), self._pump(proc.stderr, None))
        began = time.monotonic()
        becoming = asyncio.ensure_future(self._become_ready(ready_line))
        failure = await self._race(becoming, proc, self.start_timeout)
        if failure is not None and self.timed_out and self.spec.optional:
            # Slow, not broken (a JVM on a busy machine): said once, then waited for while the
            # rest of the stack serves; it still fails if it exits.
            self.note(f"{failure}: {self.last_words() or 'no output yet'}; still waiting for it")
            failure = await self._race(becoming, proc, None)
        becoming.cancel()
        if failure is None:
            self.set_state("ready")
            urls = " ".join(self.announced.urls.values()) if self.announced else ""
            self.note(f"ready in {time.monotonic() - began:.1f} s" + (f": {urls}" if urls else ""))
            if not self.first_ready.done():
                self.first_ready.set_result(None)
                if self.sup.state == "running":  # an optional child, ready after the rest
                    self.sup.console.say(url_table(self.sup.rows(), Path.cwd()))
            await self._race(proc.wait(), proc, None)
        if proc.returncode is None:  # asked to stop, or not ready in time
            await self._terminate(proc)
        await pumps
        self.last_exit = proc.returncode
        return failure or f"exited ({_describe_exit(proc.returncode)})"

    async def _spawn(self) -> asyncio.subprocess.Process:
        launch = self.spec.launch(self.sup.context(), self.ports)
        env = launch.environment(os.environ)
        env["PYTHONUNBUFFERED"] = "1"  # lines as they are written, not a pipe buffer later
        proc = await asyncio.create_subprocess_exec(
            *launch.command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            limit=_LINE_LIMIT,
            process_group=0,
            preexec_fn=self.sup.preexec,
        )
        self.proc = proc
        self.started_at = iso_now()
        self.note(f"started (pid {proc.pid})")
        return proc

    async def _pump(
        self, stream: asyncio.StreamReader | None, ready_line: asyncio.Future[Announced | None] | None
    ) -> None:
        """Copy `stream` line by line to the console and the log; the first ready line found
        resolves `ready_line` (None at end of output without one)."""
        assert stream is not None
        while True:
            try:
                raw = await stream.readline()
            except ValueError:  # longer than _LINE_LIMIT: readline dropped it
                raw = b"[streamshop up: an output line over 1 MiB was dropped]\n"
            if not raw:
                break
            text = raw.decode("utf-8", "replace").rstrip("\r\n")
            self._write_log(text)
            self._recent.append(text)
            if self.sup.options.verbose:
                self.sup.console.line(self.name, text)
            if ready_line is not None and not ready_line.done():
                announced = self.spec.parse_ready(text)
                if announced is not None:
                    ready_line.set_result(announced)
        if ready_line is not None and not ready_line.done():
            ready_line.set_result(None)

    async def _become_ready(self, ready_line: asyncio.Future[Announced | None]) -> None:
        if self.spec.announce is not None:  # no ready line: ready once its health check answers
            announced = self.spec.announce(self.ports)
            await self._poll_readyz(announced.urls["http"].rstrip("/") + self.spec.health)
        else:
            line = await ready_line
            if line is None:
                raise StartError("closed its output without a ready line")
            announced = line
        self.announced = announced
        self.ports.update(announced.ports)
        if self.spec.readyz:
            await self._poll_readyz(announced.urls["http"].rstrip("/") + self.spec.health)

    async def _poll_readyz(self, url: str) -> None:
        while True:
            try:
                async with self.sup.http.get(url, timeout=aiohttp.ClientTimeout(total=5)) as response:
                    if response.status == 200:
                        return
                    self._not_ready = f"GET {url}: {response.status} {(await response.text())[:300]}"
            except (aiohttp.ClientError, TimeoutError) as e:
                self._not_ready = f"GET {url}: {type(e).__name__}: {e}"
            await asyncio.sleep(_READYZ_INTERVAL)

    async def _race(self, work: Awaitable[Any], proc: asyncio.subprocess.Process, limit: float | None) -> str | None:
        """Run `work` until it is done (None), or the process exits, a stop is asked for, or
        `limit` seconds pass: then what happened, as words (`timed_out` says whether the limit
        passed; `work` is then left running, for the caller to wait on again or cancel)."""
        self._not_ready = ""
        self.timed_out = False
        main = asyncio.ensure_future(work)
        exited = asyncio.ensure_future(proc.wait())
        stop = asyncio.ensure_future(self.stop_event.wait())
        try:
            done, _ = await asyncio.wait({main, exited, stop}, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
            self.timed_out = not done
        finally:
            for future in (exited, stop) if self.timed_out else (main, exited, stop):
                future.cancel()
        finished = main in done and not main.cancelled()
        error = main.exception() if finished else None  # retrieved in every case: no asyncio warning
        if finished and error is None:
            return None
        if stop in done:
            return "was stopped"
        if exited in done:
            return f"exited ({_describe_exit(proc.returncode)}) before it was ready"
        if error is not None:
            # Output closing is usually the process exiting: say how it exited when it did.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 1.0)
            if proc.returncode is not None:
                return f"exited ({_describe_exit(proc.returncode)}) before it was ready"
            return str(error)
        waiting = f" ({self._not_ready})" if self._not_ready else ""
        return f"was not ready within {limit:g} s{waiting}"

    async def _terminate(self, proc: asyncio.subprocess.Process) -> None:
        """SIGTERM (the child's clean shutdown), SIGKILL after the grace period."""
        if proc.returncode is not None:
            return
        self.set_state("stopping")
        signal_child(proc, signal.SIGTERM)
        override = self.sup.options.stop_timeout
        grace = self.spec.stop_grace if override is None else override
        began = time.monotonic()
        try:
            await asyncio.wait_for(proc.wait(), grace)
        except TimeoutError:
            self.note(f"did not stop within {grace:g} s; killing it")
            signal_child(proc, signal.SIGKILL)
            await proc.wait()
        self.note(f"stopped ({_describe_exit(proc.returncode)}) in {time.monotonic() - began:.1f} s")

    def kill(self) -> None:
        if self.proc is not None:
            signal_child(self.proc, signal.SIGKILL)


class Supervisor:
    """Starts the children level by level, keeps them running, stops them in reverse order."""

    def __init__(
        self,
        options: StackOptions,
        children: Sequence[ChildDef],
        console: Console,
        secrets: Secrets,
        *,
        after_ready: Callable[[Endpoints], Coroutine[Any, Any, None]] | None = None,
        secure: SecureStack | None = None,
    ) -> None:
        self.options = options
        self.secure = secure
        self.console = console
        self.secrets = secrets
        self.after_ready = after_ready
        self.levels = levels(children)
        # --ephemeral-ports: free ports below the kernel's ephemeral range, chosen together so that
        # no two children get the same one. A port bind(0) handed out would come from that range,
        # where a client connection's local port may take it while its child restarts after a
        # crash, and the child could not bind it again until that connection ends.
        wanted = sum(len(spec.ports) for spec in children) if options.ephemeral_ports else 0
        self.free = free_ports(wanted, options.listen) if wanted else []
        self.children = {spec.name: Child(spec, self) for spec in children}  # declared order, for people
        self.state = "starting"
        self.stop_requested = asyncio.Event()
        self.preexec = _die_with_parent()
        self.http = aiohttp.ClientSession()
        self.stack_file = options.data_dir / FILE_NAME
        # --observability: Prometheus's targets follow the URLs the children announce.
        prometheus = observability.PROMETHEUS in self.children
        self.targets = observability.targets_file(options.data_dir) if prometheus else None

    def endpoints(self) -> Endpoints:
        """Each child's announced urls, by child name."""
        return {c.name: c.announced.urls for c in self.children.values() if c.announced is not None}

    def context(self) -> StackContext:
        return StackContext(
            self.options.data_dir,
            self.options.listen,
            self.secrets,
            self.options.log_format,
            self.endpoints(),
            self.secure,
            self.options.postgres_url,
            self.options.spark_master,
            self.options.durability,
        )

    def save(self) -> None:
        write_stack(
            self.stack_file,
            {
                "version": VERSION,
                "state": self.state,
                "pid": os.getpid(),
                "data_dir": str(self.options.data_dir),
                "updated_at": iso_now(),
                "children": {name: child.as_json() for name, child in self.children.items()},
            },
        )
        if self.targets is not None:
            observability.write_targets(self.targets, self.endpoints())

    def _set_state(self, state: str) -> None:
        self.state = state
        self.save()

    def _on_signal(self, signum: int) -> None:
        if not self.stop_requested.is_set():
            self.console.say(f"{signal.Signals(signum).name}: stopping the stack (Ctrl-C again kills it)")
            self.stop_requested.set()
        elif signum == signal.SIGINT:
            # Only an impatient human: process managers (and `timeout`) may send SIGTERM twice.
            self.console.say("SIGINT again: killing every child")
            for child in self.children.values():
                child.kill()

    def rows(self) -> list[Row]:
        return [
            Row(c.name, c.announced.urls if c.announced else {}, c.proc.pid if c.proc else None, c.log_path)
            for c in self.children.values()
        ]

    async def run(self) -> int:
        """0 once stopped by a signal; 1 when the stack could not start."""
        loop = asyncio.get_running_loop()
        for sig in _STOP_SIGNALS:
            loop.add_signal_handler(sig, self._on_signal, sig)
        began = time.monotonic()
        status = 0
        extra: asyncio.Task[None] | None = None
        try:
            self.save()
            if await self._start_levels():
                self._set_state("running")
                self.console.say(
                    f"stack ready in {time.monotonic() - began:.1f} s; data in {self.options.data_dir}, "
                    f"described in {self.stack_file}"
                )
                self.console.say(url_table(self.rows(), Path.cwd()))
                dashboard = self.children.get("dashboard")
                if dashboard is not None and dashboard.announced is not None:
                    self.console.say(f"dashboard: {dashboard.announced.urls['http']}")
                for child in self.children.values():
                    if child.spec.optional and child.state != "ready":
                        self.console.say(f"{child.name} is still starting; the rest of the stack serves meanwhile")
                if not self.options.verbose:
                    self.console.say(
                        f"each child's output: {self.options.data_dir / 'output'} (--verbose shows it here)"
                    )
                demo = "streamshop demo"
                if self.options.data_dir != Path.cwd() / "data" / "stack":
                    demo += f" --stack {self.options.data_dir}"
                self.console.say(f"Ctrl-C stops the stack; `{demo}` drives traffic against it")
                if self.after_ready is not None:
                    extra = asyncio.create_task(self.after_ready(self.endpoints()))
                await self.stop_requested.wait()
        except StartError as e:
            self.console.say(f"the stack did not start: {e}")
            status = 1
        finally:
            if extra is not None:
                extra.cancel()
                await asyncio.gather(extra, return_exceptions=True)
            await self._stop_all(failed=status != 0)
            for sig in _STOP_SIGNALS:
                loop.remove_signal_handler(sig)
        return status

    async def _start_levels(self) -> bool:
        """Start each level once the previous one is ready; False when stopped meanwhile."""
        for level in self.levels:
            children = [self.children[spec.name] for spec in level]
            for child in children:
                child.start()
            # Nothing needs an optional child (plan.levels holds that): the stack does not wait.
            ready = asyncio.gather(*(c.first_ready for c in children if not c.spec.optional))
            stop = asyncio.ensure_future(self.stop_requested.wait())
            waiters: set[asyncio.Future[Any]] = {ready, stop}
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if ready not in done:
                ready.cancel()
                return False
            ready.result()  # the first StartError, if any
            broker = self.children.get("broker")
            if self.secure is not None and broker in children and broker.announced is not None:
                bootstrap = broker.announced.urls["bootstrap"]
                try:
                    await asyncio.to_thread(apply_access, bootstrap, self.secure)
                except Exception as e:
                    raise StartError(f"cannot create the users and ACLs at {bootstrap}: {e}") from e
                self.console.say(f"users and ACLs in place for {', '.join(ACCESS)}")
        return True

    async def _stop_all(self, *, failed: bool) -> None:
        self._set_state("stopping")
        for level in reversed(self.levels):
            children = [self.children[spec.name] for spec in level]
            for child in children:
                child.stop_event.set()
            await asyncio.gather(*(c.task for c in children if c.task is not None), return_exceptions=True)
        await self.http.close()
        for child in self.children.values():
            child.close()
        self._set_state("failed" if failed else "stopped")
        self.console.say("stack stopped" + (" after a failed start" if failed else ""))


def _cluster_brokers(bootstrap: str, timeout: float, settings: dict[str, str]) -> int:
    """How many brokers a Kafka cluster lists, retried until `timeout` (it may be starting)."""
    from confluent_kafka.admin import AdminClient

    from streamshop.clients import client_config

    admin = AdminClient(client_config(bootstrap, settings=settings))
    deadline = time.monotonic() + timeout
    while True:
        try:
            return len(admin.list_topics(timeout=min(5.0, max(0.1, deadline - time.monotonic()))).brokers)
        except Exception:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


def default_data_dir(bootstrap: str | None) -> Path:
    """./data/stack; for a cluster the stack does not run, a directory of that cluster's own: its
    consumer groups' offsets and the analytics job's checkpoints mean nothing on another."""
    if not bootstrap:
        return Path("data/stack")
    first = bootstrap.split(",")[0].strip()
    return Path("data") / ("stack-" + re.sub(r"[^A-Za-z0-9.]+", "-", first).strip("-"))


def java_found() -> bool:
    """Whether Spark will find a JVM: JAVA_HOME's, else ``java`` on PATH (how spark-submit looks)."""
    home = os.environ.get("JAVA_HOME")
    if home:
        return (Path(home) / "bin" / "java").exists()
    return shutil.which("java") is not None


def up(args: argparse.Namespace) -> int:
    """`streamshop up`."""
    data_dir = Path(args.data_dir or default_data_dir(args.bootstrap)).resolve()
    running = running_stack(data_dir)
    if running is not None:
        raise CommandError(f"a stack already runs from {data_dir} (pid {running['pid']}); stop it first")
    without = list(args.without)
    # Spark needs a JVM; without one the job could only crash and be restarted forever.
    no_java = "analytics" not in without and not java_found()
    if no_java:
        without.append("analytics")
    children = select(CHILDREN, without)
    if args.bootstrap:
        if "broker" in without:
            raise CommandError("--bootstrap names the broker; it cannot also be left --without")
        if args.durability is not None:
            raise CommandError("--durability sets the bundled broker's; --bootstrap uses another cluster")
        children = with_broker(children, external_broker(args.bootstrap))
    counts = parse_scale(args.scale) if args.scale else {}
    if any(n > 1 for n in counts.values()) and args.postgres is None:
        raise CommandError("--scale runs several instances over one database: it needs --postgres")
    if args.postgres is not None:
        children = with_postgres(children, external_postgres(args.postgres) if args.postgres else POSTGRES)
    children = scaled(children, counts)
    if args.observability:
        if args.secure:
            raise CommandError("--observability scrapes and collects over plain HTTP without keys: not with --secure")
        children = observability.with_observability(children, observability.backends())
    data_dir.mkdir(parents=True, exist_ok=True)
    secrets = Secrets.load_or_create(data_dir / "secrets.json")
    secure = _secure_stack(data_dir, args, children) if args.secure else None
    color = use_color(sys.stdout, args.no_color)
    options = StackOptions(
        data_dir=data_dir,
        listen=args.listen,
        ephemeral_ports=args.ephemeral_ports,
        start_timeout=args.start_timeout,
        jvm_start_timeout=args.jvm_start_timeout,
        stop_timeout=args.stop_timeout,
        verbose=args.verbose,
        # Readable lines in a terminal; JSON (what the logs service indexes anyway) otherwise.
        log_format="console" if sys.stdout.isatty() else "json",
        postgres_url=args.postgres or None,
        spark_master=master_url_of(args.spark_cluster) if args.spark_cluster is not None else None,
        durability=args.durability,
    )
    names = [c.name for c in children]
    console = Console([*names, "demo"] if args.demo else names, sys.stdout, color=color)
    after_ready = demo_after_ready(args, console) if args.demo else None

    if secure is not None:
        console.say(
            "secured: SASL_SSL with SCRAM-SHA-512, ACLs, API keys; credentials in "
            f"{secure.directory / 'credentials.json'}, Kafka client settings in "
            f"{secure.directory / 'client.properties'}"
        )
    if no_java:
        console.say("analytics left out: it needs Java 17 (java on PATH or JAVA_HOME); or pass --without analytics")

    async def main() -> int:
        supervisor = Supervisor(options, children, console, secrets, after_ready=after_ready, secure=secure)
        return await supervisor.run()

    return asyncio.run(main())


def _secure_stack(data_dir: Path, args: argparse.Namespace, children: Sequence[ChildDef]) -> SecureStack:
    """The secured stack's material; the bundled broker's first user (the operator) is written
    into its data directory before it starts, as `streamshop broker users set` would."""
    hosts = tuple(dict.fromkeys(("127.0.0.1", "localhost", args.listen)))
    secure = SecureStack.load_or_create(data_dir / "secure", hosts)
    if any(c.name == "broker" and c.external is None for c in children):
        set_offline(data_dir / "broker", ADMIN, secure.kafka_passwords[ADMIN])
    # The in-process demo calls the services as the operator (streamshop.stack.demo reads this).
    os.environ["STREAMSHOP_API_KEY"] = secure.api_keys[ADMIN]
    return secure


def _shorten(line: str) -> str:
    return line if len(line) <= _WORD_LIMIT else line[: _WORD_LIMIT - 1] + "…"


def _readable(line: str) -> str:
    """A JSON log line as its event and error (what a person reads first); any other line stripped."""
    line = line.strip()
    if line.startswith("{"):
        try:
            record = json.loads(line)
        except ValueError:
            return line
        if isinstance(record, dict) and "event" in record:
            extra = [str(record[k]) for k in ("error", "problem", "reason") if k in record]
            exc = str(record.get("exception", "")).strip().splitlines()
            return ": ".join([str(record["event"]), *extra, *exc[-1:]])
    return line


def exit_reason(name: str, failure: str, lines: Iterable[str], log_path: Path) -> str:
    """The console's line for child `name`'s `failure` (``exited (killed by SIGKILL)``): with
    the last error line of its output `lines` and where the rest is.  A child killed by a signal
    did not choose its last line (often an access-log line): only an error line it wrote is
    quoted then, else the signal alone says why."""
    words = last_words(lines, errors_only="killed by" in failure)
    return f"{name} {failure}" + (f": {words}" if words else "") + f"; see {log_path}"


def last_words(lines: Iterable[str], *, errors_only: bool = False) -> str:
    """A child's last line that reads as an error (a Java stack trace's frames and Python's
    traceback lines skipped), else its last line (nothing with `errors_only`): what a person
    needs first."""
    readable = [_readable(line) for line in lines if line.strip()]
    for line in reversed(readable):
        if line.startswith(("at ", "File ", "...", "Caused by")) or _JAVA_FRAME.match(line):
            continue
        if _ERROR_WORDS.search(line):
            return _shorten(line)
    return _shorten(readable[-1]) if readable and not errors_only else ""
