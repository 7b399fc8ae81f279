"""`streamshop secure setup|grant`: the compose file's secured stack, its one-shots
(streamshop.stack.compose_secure)."""

from __future__ import annotations

import argparse

from streamshop.commands._common import SubParsers

__all__ = ["register"]

# The compose file's bundled broker, as its containers reach it.
DEFAULT_BOOTSTRAP = "broker:9092"


def register(sub: SubParsers) -> None:
    p = sub.add_parser("secure", help="the compose file's secured stack: set-up and ACLs (one-shots)")
    actions = p.add_subparsers(dest="secure_action", required=True, metavar="{setup,grant}")
    s = actions.add_parser("setup", help="certificates, logins, keys and every process's settings file")
    s.add_argument("--dir", required=True, help="where the secured stack's material is kept (a shared volume)")
    s.add_argument("--broker-data", help="the stopped bundled broker's data directory: the operator is written there")
    s.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP, help="the stack's bootstrap servers (checked)")
    g = actions.add_parser("grant", help="as the operator: every other user and the ACLs, through the Admin API")
    g.add_argument("--dir", required=True, help="the directory `setup` wrote")
    g.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP, help="the broker, over SASL_SSL")
    g.add_argument("--timeout", type=float, default=60.0, help="seconds to keep retrying (default 60)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from streamshop.stack.compose_secure import run

    return run(args)
