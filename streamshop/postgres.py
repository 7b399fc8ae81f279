"""A PostgreSQL server on loopback, from Debian's `postgresql` package: `streamshop postgres
start|stop|status`, `streamshop up --postgres` and the tests run the services on it.

The directory holds everything: ``data/`` (the cluster, made by initdb on first start),
``socket/`` (its Unix socket), ``postgres.log``, ``password`` (the superuser's, mode 0600) and
``server.json`` (port and user).  The server listens on 127.0.0.1 only, logs in with
SCRAM-SHA-256, and runs as the invoking user, or as Debian's ``postgres`` user when that is root
(PostgreSQL refuses to run as root; the directories above its own then get the search bit for
others, so that user can reach it).
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import re
import secrets
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from kit.health import postgres_target
from kit.ports import free_port
from streamshop.clients import CommandError

__all__ = [
    "Server",
    "binaries",
    "create_database",
    "database_url",
    "ensure_databases",
    "serve",
    "start",
    "status",
    "stop",
]

USER = "streamshop"
DATABASE = "streamshop"
_SETTINGS = "server.json"
_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")


@dataclass(frozen=True)
class Server:
    directory: Path
    port: int
    password: str = field(repr=False)
    running: bool

    @property
    def url(self) -> str:
        return database_url(self, DATABASE)


READY_PREFIX = "streamshop postgres ready on "


def ready_line(server: Server) -> str:
    """What `streamshop postgres run` prints once it serves: the URL without the password (the
    line goes to logs; the password is in the server's directory)."""
    return f"{READY_PREFIX}postgresql://{USER}@127.0.0.1:{server.port}/{DATABASE}"


def parse_ready_line(line: str) -> str | None:
    """The URL of a `ready_line`, or None for any other line."""
    if not line.startswith(READY_PREFIX):
        return None
    url = line[len(READY_PREFIX) :].strip()
    return url if url.startswith("postgresql://") and " " not in url else None


def with_password(url: str, directory: Path) -> str:
    """`url` with the password of the server in `directory` (its ``password`` file)."""
    password = (directory / "password").read_text().strip()
    scheme, rest = url.split("://", 1)
    user, at, host = rest.partition("@")
    if not at:
        raise ValueError(f"{url!r}: no user")
    return f"{scheme}://{user.split(':', 1)[0]}:{quote(password, safe='')}@{host}"


def for_database(url: str, name: str) -> str:
    """`url` naming database `name` instead (same server, user and options)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def database_url(server: Server, name: str) -> str:
    return f"postgresql://{USER}:{quote(server.password, safe='')}@127.0.0.1:{server.port}/{name}"


def binaries() -> Path:
    """The directory of initdb and pg_ctl: PATH first, else Debian's newest
    /usr/lib/postgresql/N/bin."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent  # Debian links pg_ctl from its versioned directory
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parent.parent.name))
    if not versions:
        raise CommandError("PostgreSQL is not installed: `make postgres` installs Debian's postgresql package")
    return versions[-1].parent


def _as_server_user() -> tuple[Callable[[], None] | None, int | None, int | None]:
    """(preexec_fn, uid, gid) that run a child as Debian's `postgres` user when we are root."""
    if os.geteuid() != 0:
        return None, None, None
    try:
        account = pwd.getpwnam("postgres")
    except KeyError:
        raise CommandError("PostgreSQL refuses to run as root and there is no `postgres` user to run it as") from None
    uid, gid = account.pw_uid, account.pw_gid

    def demote() -> None:
        os.setgid(gid)
        os.setuid(uid)

    return demote, uid, gid


def _let_traverse(directory: Path, uid: int) -> None:
    """Give others the search bit (x: pass through, not list) on the ancestors of the server's
    directory that the server user cannot pass, e.g. a private temporary directory of root's."""
    for ancestor in [directory, *directory.parents]:
        info = ancestor.stat()
        if info.st_uid != uid and not info.st_mode & stat.S_IXOTH:
            ancestor.chmod(info.st_mode | stat.S_IXOTH)


def _run(command: list[str], directory: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    demote, _, _ = _as_server_user()
    env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
    return subprocess.run(
        command,
        cwd=directory,
        env=env,
        preexec_fn=demote,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _load(directory: Path) -> tuple[int, str] | None:
    try:
        settings = json.loads((directory / _SETTINGS).read_text())
        return int(settings["port"]), (directory / "password").read_text().strip()
    except (OSError, ValueError, KeyError):
        return None


def _initdb(directory: Path, bin_dir: Path, timeout: float) -> None:
    _, uid, gid = _as_server_user()
    password = secrets.token_urlsafe(24)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "socket").mkdir(exist_ok=True)
    pwfile = directory / "initdb.pw"
    pwfile.write_text(password + "\n")
    pwfile.chmod(0o600)
    if uid is not None and gid is not None:
        for path in (directory, directory / "socket", pwfile):
            os.chown(path, uid, gid)
        _let_traverse(directory.parent, uid)
    try:
        done = _run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(directory / "data"),
                "-U",
                USER,
                f"--pwfile={pwfile}",
                "--auth-host=scram-sha-256",
                "--auth-local=scram-sha-256",
                "--encoding=UTF8",
            ],
            directory,
            timeout,
        )
    finally:
        pwfile.unlink(missing_ok=True)
    if done.returncode != 0:
        raise CommandError(f"initdb failed: {(done.stderr or done.stdout).strip()[-2000:]}")
    secret_file = directory / "password"
    secret_file.write_text(password + "\n")
    secret_file.chmod(0o600)


def start(directory: Path, port: int | None = None, timeout: float = 60.0) -> Server:
    """Start the server of `directory` (initdb on first start) and wait until it accepts
    logins; its database ``streamshop`` exists.  A server already running is left as it is."""
    directory = directory.resolve()
    bin_dir = binaries()
    current = status(directory)
    if current is not None and current.running:
        return current
    if not (directory / "data" / "PG_VERSION").exists():
        _initdb(directory, bin_dir, timeout)
    port, password = _settle(directory, port)
    options = f"-p {port} -k {directory / 'socket'} -c listen_addresses=127.0.0.1"
    done = _run(
        [
            str(bin_dir / "pg_ctl"),
            "-D",
            str(directory / "data"),
            "-l",
            str(directory / "postgres.log"),
            "-o",
            options,
            "-w",
            "-t",
            str(int(timeout)),
            "start",
        ],
        directory,
        timeout + 10,
    )
    if done.returncode != 0:
        tail = _log_tail(directory)
        raise CommandError(f"PostgreSQL did not start: {(done.stderr or done.stdout).strip()}\n{tail}")
    server = Server(directory, port, password, running=True)
    create_database(server, DATABASE)
    return server


def _settle(directory: Path, port: int | None) -> tuple[int, str]:
    """The port to start on (`port`, else the last one if still free, else any free one), written
    down for `status`, and the superuser's password."""
    stored = _load(directory)
    password = stored[1] if stored else (directory / "password").read_text().strip()
    port = port or (stored[0] if stored and _port_free(stored[0]) else free_port())
    (directory / _SETTINGS).write_text(json.dumps({"port": port, "user": USER}) + "\n")
    return port, password


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _log_tail(directory: Path, lines: int = 20) -> str:
    try:
        return "\n".join((directory / "postgres.log").read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def stop(directory: Path, timeout: float = 60.0) -> bool:
    """Stop the server (fast shutdown: sessions ended, everything committed kept); False when
    none was running."""
    directory = directory.resolve()
    if not (directory / "data" / "postmaster.pid").exists():
        return False
    done = _run(
        [
            str(binaries() / "pg_ctl"),
            "-D",
            str(directory / "data"),
            "-m",
            "fast",
            "-w",
            "-t",
            str(int(timeout)),
            "stop",
        ],
        directory,
        timeout + 10,
    )
    if done.returncode != 0 and "not running" not in done.stderr + done.stdout:
        raise CommandError(f"PostgreSQL did not stop: {(done.stderr or done.stdout).strip()}")
    return done.returncode == 0


def status(directory: Path) -> Server | None:
    """The server of `directory` and whether it runs; None when it was never started."""
    directory = directory.resolve()
    stored = _load(directory)
    if stored is None:
        return None
    done = _run([str(binaries() / "pg_ctl"), "-D", str(directory / "data"), "status"], directory, 30)
    return Server(directory, stored[0], stored[1], running=done.returncode == 0)


def create_database(server: Server, name: str) -> str:
    """Create database `name` on `server` unless it exists; its URL."""
    ensure_databases(database_url(server, "postgres"), [name])  # from the maintenance database
    return database_url(server, name)


def ensure_databases(url: str, names: Sequence[str], timeout: float = 30.0) -> None:
    """Create each database of `names` that does not exist on the server of `url` (connected to
    as its user, who needs CREATEDB for a missing one); `CommandError` naming the server."""
    import asyncpg

    for name in names:
        if not _NAME.fullmatch(name):
            raise ValueError(f"database names here are lower-case letters, digits and _: {name!r}")

    async def ensure() -> None:
        try:
            conn = await asyncpg.connect(url, timeout=timeout)
        except Exception as e:
            raise CommandError(f"PostgreSQL at {postgres_target(url)}: {type(e).__name__}: {e}") from None
        try:
            for name in names:
                if await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
                    continue
                try:
                    await conn.execute(f'CREATE DATABASE "{name}"')
                except asyncpg.exceptions.DuplicateDatabaseError:
                    continue  # made meanwhile by another
                except asyncpg.exceptions.PostgresError as e:
                    raise CommandError(
                        f"PostgreSQL at {postgres_target(url)}: cannot create database {name} ({e}); "
                        "create it, or give a user allowed to (CREATEDB)"
                    ) from None
        finally:
            await conn.close()

    asyncio.run(ensure())


def serve(directory: Path, port: int | None, databases: Sequence[str], announce: Callable[[Server], None]) -> int:
    """Run the server in the foreground (a child of `streamshop up`): initdb on first start, wait
    until it accepts logins, create `databases`, `announce` it, then wait; SIGTERM or SIGINT is a
    fast shutdown (sessions ended, everything committed kept).  Its exit status."""
    import signal

    directory = directory.resolve()
    bin_dir = binaries()
    if not (directory / "data" / "PG_VERSION").exists():
        _initdb(directory, bin_dir, 120)
    port, password = _settle(directory, port)
    demote, _, _ = _as_server_user()
    proc = subprocess.Popen(
        [
            str(bin_dir / "postgres"),
            "-D",
            str(directory / "data"),
            "-p",
            str(port),
            "-k",
            str(directory / "socket"),
            "-c",
            "listen_addresses=127.0.0.1",
        ],
        cwd=directory,
        preexec_fn=demote,  # noqa: PLW1509 - only setuid/setgid before exec
        stdin=subprocess.DEVNULL,
    )

    def fast_shutdown(signum: int, frame: object) -> None:
        proc.send_signal(signal.SIGINT)  # PostgreSQL's "fast" shutdown

    signal.signal(signal.SIGTERM, fast_shutdown)
    signal.signal(signal.SIGINT, fast_shutdown)
    server = Server(directory, port, password, running=True)
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            return proc.returncode or 1
        try:
            ensure_databases(database_url(server, "postgres"), [DATABASE, *databases], timeout=5)
            break
        except CommandError:
            if time.monotonic() > deadline:
                proc.send_signal(signal.SIGINT)
                proc.wait()
                raise
            time.sleep(0.2)
    announce(server)
    return proc.wait()
