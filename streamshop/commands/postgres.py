"""`streamshop postgres start|stop|status`: a PostgreSQL server on loopback for the services
(streamshop.postgres, imported when a command runs)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from streamshop.commands._common import SubParsers

__all__ = ["register"]

DEFAULT_DIR = Path("data/postgres")


def register(sub: SubParsers) -> None:
    p = sub.add_parser(
        "postgres",
        help="run a PostgreSQL server on loopback (Debian's package) for the services",
        description="A PostgreSQL server of its own directory: made by initdb on first start, on 127.0.0.1 "
        "with a free port (or --port), password logins (SCRAM-SHA-256). `start` prints the URL of its "
        "database `streamshop` and of each of --databases, for <SERVICE>_DATABASE_URL; "
        "`streamshop up --postgres` runs one for the stack.",
    )
    actions = p.add_subparsers(dest="postgres_action", required=True)
    for name, help_text in (
        ("start", "start the server (made the first time) and print its URL"),
        ("stop", "stop the server (fast shutdown: committed work is kept)"),
        ("status", "whether it runs, its port and URL"),
        ("run", "run the server in the foreground until SIGTERM or Ctrl-C (what `streamshop up --postgres` runs)"),
    ):
        a = actions.add_parser(name, help=help_text)
        a.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"server directory (default {DEFAULT_DIR})")
        if name in ("start", "run"):
            a.add_argument("--port", type=int, help="port (default: the last one if free, else any free port)")
        if name in ("start", "run"):
            a.add_argument("--databases", default="", metavar="A,B", help="databases to create if missing")
        if name == "status":
            a.add_argument("--json", action="store_true")
        a.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from streamshop import postgres
    from streamshop.clients import CommandError, warn

    try:
        if args.postgres_action == "start":
            server = postgres.start(args.dir, port=args.port)
            print(f"PostgreSQL ready on 127.0.0.1:{server.port} ({args.dir}); URL: {server.url}")
            for name in _names(args.databases):
                print(f"database {name}: {postgres.create_database(server, name)}")
            return 0
        if args.postgres_action == "run":
            return postgres.serve(args.dir, args.port, _names(args.databases), _announce)
        if args.postgres_action == "stop":
            print("stopped" if postgres.stop(args.dir) else f"no server running in {args.dir}")
            return 0
        found = postgres.status(args.dir)
        if found is None:
            report = {"directory": str(args.dir), "running": False, "port": None, "url": None}
        else:
            report = {"directory": str(args.dir), "running": found.running, "port": found.port, "url": found.url}
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            print(f"{'running' if report['running'] else 'stopped'}: port {report['port']}, URL {report['url']}")
        return 0 if report["running"] else 1
    except CommandError as e:
        warn("postgres", str(e))
        return 1


def _names(databases: str) -> list[str]:
    return [n.strip() for n in databases.split(",") if n.strip()]


def _announce(server: object) -> None:
    from streamshop.postgres import ready_line

    print(ready_line(server), flush=True)  # type: ignore[arg-type]
