"""`streamshop`: one command for every process of the project.

Each subcommand imports its component lazily, so `streamshop broker` never loads the
services and vice versa.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from streamshop.logs import configure_logging

ENV_PREFIX = "STREAMSHOP_BROKER_"


def host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT")
    return host or "0.0.0.0", int(port)


def _env(name: str, default: str | None) -> str | None:
    return os.environ.get(ENV_PREFIX + name, default)


def _broker_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("broker", help="run the bundled Kafka-protocol broker")
    p.add_argument(
        "--data-dir", default=_env("DATA_DIR", "./data/broker"), help="log directory (env STREAMSHOP_BROKER_DATA_DIR)"
    )
    p.add_argument(
        "--listen",
        default=_env("LISTEN", "127.0.0.1:9092"),
        type=host_port,
        help="Kafka listener HOST:PORT (env STREAMSHOP_BROKER_LISTEN)",
    )
    p.add_argument(
        "--advertise",
        default=_env("ADVERTISE", None),
        type=host_port,
        help="address given to clients in metadata (env STREAMSHOP_BROKER_ADVERTISE)",
    )
    p.add_argument(
        "--admin-listen",
        default=_env("ADMIN_LISTEN", "127.0.0.1:9644"),
        help="admin HTTP HOST:PORT, or 'off' (env STREAMSHOP_BROKER_ADMIN_LISTEN)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="broker setting or topic default by its Kafka name (env STREAMSHOP_BROKER_SET, comma-separated)",
    )
    p.set_defaults(func=_run_broker)
    actions = p.add_subparsers(dest="broker_action", metavar="{verify,users}")
    v = actions.add_parser(
        "verify",
        help="check every batch's CRC and every index entry of a data directory (offline)",
        description="Check a broker data directory: each batch's length, CRC and offsets, each offset-index "
        "entry against the batch it points at, each time-index entry.  Prints one line per problem and a "
        "summary; exits 1 when anything is wrong.",
    )
    v.add_argument("--data-dir", required=True, help="the broker's log directory")
    v.add_argument("--deep", action="store_true", help="also decompress and decode every record")
    v.set_defaults(func=_run_verify)
    from streamshop import broker_users

    broker_users.register(actions)


def _run_verify(args: argparse.Namespace) -> int:
    from broker.log.verify import verify

    data_dir = Path(args.data_dir)
    if not data_dir.is_dir():
        print(f"streamshop broker verify: {data_dir} is not a directory", file=sys.stderr)
        return 2
    return 1 if verify(data_dir, deep=args.deep) else 0


def _parse_sets(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def _run_broker(args: argparse.Namespace) -> int:
    from broker.app import run
    from broker.config import BrokerConfig, ConfigError

    # KEY=VALUE pairs separated by commas; a value may hold commas itself (listeners=A://h:1,B://h:2)
    sets = [s for s in re.split(r",(?=[a-z0-9_.]+=)", _env("SET", "") or "") if s.strip()] + list(args.set)
    admin = None if str(args.admin_listen).lower() == "off" else host_port(str(args.admin_listen))
    try:
        config = BrokerConfig(
            data_dir=Path(args.data_dir),
            listen=args.listen if isinstance(args.listen, tuple) else host_port(args.listen),
            advertise=args.advertise
            if isinstance(args.advertise, tuple) or args.advertise is None
            else host_port(args.advertise),
            admin_listen=admin,
            settings=_parse_sets(sets),
        )
    except ConfigError as e:
        print(f"streamshop broker: {e}", file=sys.stderr)
        return 2
    from broker.lock import DataDirInUse
    from broker.security.listeners import ListenerError
    from broker.security.tls import TlsConfigError

    try:
        run(config)
    except (DataDirInUse, ListenerError, TlsConfigError) as e:
        print(f"streamshop broker: {e}", file=sys.stderr)
        return 2
    return 0


_REGISTRARS: list[Callable[[argparse._SubParsersAction], None]] = [_broker_parser]  # type: ignore[type-arg]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="streamshop", description=__doc__)
    parser.add_argument("--log-level", default=None, help="debug, info, warning, error")
    sub = parser.add_subparsers(dest="command", required=True)
    for register in _REGISTRARS:
        register(sub)
    try:
        from streamshop.tools import register_tools

        register_tools(sub)
    except ImportError:
        pass
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from streamshop.env_file import EnvFileError, apply_env_file

    try:
        # Before the parser: its defaults come from the environment.
        applied = apply_env_file()
    except EnvFileError as e:
        print(f"streamshop: {e}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    if applied is not None:
        logging.getLogger("streamshop").info("settings from %s", applied)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
