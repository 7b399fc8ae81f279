"""`streamshop registry`: the Confluent-compatible schema registry (registry.app); and
`streamshop users hash-password|api-key`: a users file's PBKDF2 credential (kit.users) and a
service's API key (kit.api_keys)."""

from __future__ import annotations

import argparse
import sys

from registry.config import RegistryConfig
from streamshop.commands._common import SubParsers, setting_flag

__all__ = ["register"]


def register(sub: SubParsers) -> None:
    p = sub.add_parser(
        "registry",
        help="run the schema registry (Confluent's REST API; schemas kept in the broker's _schemas topic)",
    )
    setting_flag(
        p,
        RegistryConfig,
        "bootstrap_servers",
        "--bootstrap",
        "--bootstrap-server",
        metavar="HOST:PORT",
        dest="bootstrap_servers",
        text="the broker",
    )
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="HTTP address (env REGISTRY_LISTEN and REGISTRY_PORT; default 127.0.0.1:8081)",
    )
    p.set_defaults(func=_run_registry)

    users = sub.add_parser("users", help="users files of the registry and the dashboard")
    actions = users.add_subparsers(dest="users_action", required=True)
    hashing = actions.add_parser(
        "hash-password",
        help="print the PBKDF2 credential of the password on the first line of stdin",
        description="Reads one line (the password) from standard input and prints the credential to put in a "
        "users file line `name: credential,role`.",
    )
    hashing.set_defaults(func=_hash_password)
    key = actions.add_parser(
        "api-key",
        help="print a new random API key and its keys-file line (`<PREFIX>_API_KEYS_FILE` of a service)",
    )
    key.add_argument("caller", nargs="?", default="caller", help="the caller the key is for")
    key.set_defaults(func=_api_key)


def _run_registry(args: argparse.Namespace) -> int:
    from kit.settings import parse_host_port
    from registry.app import main

    overrides: dict[str, object] = {"bootstrap_servers": args.bootstrap_servers, "log_level": args.log_level}
    if args.listen is not None:
        try:
            address = parse_host_port(args.listen)
        except ValueError as e:
            print(f"streamshop registry: invalid configuration: --listen: {e}", file=sys.stderr)
            return 2
        overrides |= {"listen": address.host, "port": address.port}
    return main(overrides)


def _hash_password(args: argparse.Namespace) -> int:
    from kit.users import main

    return main()


def _api_key(args: argparse.Namespace) -> int:
    from kit.api_keys import main

    return main(args.caller)
