"""`streamshop broker`: the bundled Kafka-protocol broker (broker.app), and its offline tools:
`broker verify` (a data directory's batches and indexes) and `broker users` (SCRAM users of a
stopped broker, streamshop.broker_users)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from broker.settings import BrokerSettings, parse_sets
from streamshop.commands._common import SubParsers, setting_flag, setting_help

__all__ = ["register"]


def register(sub: SubParsers) -> None:
    p = sub.add_parser("broker", help="run the bundled Kafka-protocol broker")
    setting_flag(p, BrokerSettings, "data_dir")
    setting_flag(p, BrokerSettings, "listen", metavar="HOST:PORT")
    setting_flag(p, BrokerSettings, "advertise", metavar="HOST:PORT")
    setting_flag(p, BrokerSettings, "durability", metavar="fsync|page-cache")
    # Given as text and parsed with the settings: "off" (None) must not read as "not given".
    p.add_argument("--admin-listen", metavar="HOST:PORT|off", help=setting_help(BrokerSettings, "admin_listen"))
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="broker setting or topic default by its Kafka name, over BROKER_SET (repeatable)",
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
    _users_parser(actions)


def _users_parser(actions: SubParsers) -> None:
    from broker.security.scram import MECHANISMS, MIN_ITERATIONS

    u = actions.add_parser(
        "users",
        help="add, delete or list SCRAM users of a stopped broker's data directory",
        description="Manage SCRAM credentials offline (the broker must be stopped). A running broker is "
        "managed over the Kafka protocol instead: AlterUserScramCredentials, e.g. kafka-configs "
        "--entity-type users.",
    )
    u.add_argument("--data-dir", required=True, help="the broker's log directory")
    sub = u.add_subparsers(dest="users_action", required=True)
    s = sub.add_parser("set", help="create or replace a user's credentials")
    s.add_argument("name")
    s.add_argument("--mechanism", action="append", choices=list(MECHANISMS), help="default: both SCRAM mechanisms")
    s.add_argument("--iterations", type=int, default=MIN_ITERATIONS)
    source = s.add_mutually_exclusive_group(required=True)
    source.add_argument("--password-file", help="a file whose first line is the password")
    source.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    d = sub.add_parser("delete", help="delete a user's credentials")
    d.add_argument("name")
    sub.add_parser("list", help="list users and their mechanisms")

    def run(args: argparse.Namespace) -> int:
        from streamshop.broker_users import run

        return run(args)

    u.set_defaults(func=run)


def _run_verify(args: argparse.Namespace) -> int:
    from broker.log.verify import verify

    data_dir = Path(args.data_dir)
    if not data_dir.is_dir():
        print(f"streamshop broker verify: {data_dir} is not a directory", file=sys.stderr)
        return 2
    return 1 if verify(data_dir, deep=args.deep) else 0


def broker_overrides(args: argparse.Namespace) -> dict[str, object]:
    """The settings the flags of `streamshop broker` give (None: not given)."""
    return {
        name: getattr(args, name)
        for name in ("data_dir", "listen", "advertise", "admin_listen", "durability", "log_level")
    }


def _run_broker(args: argparse.Namespace) -> int:
    from broker.app import main

    overrides = broker_overrides(args)
    try:
        extra = parse_sets(",".join(args.set))
    except ValueError as e:
        print(f"streamshop broker: --set {e}", file=sys.stderr)
        return 2
    return main(overrides, extra)
