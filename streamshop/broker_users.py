"""`streamshop broker users`: SCRAM users of a stopped broker's data directory.

This is how the first user (a super user, who then manages the rest over the Kafka
protocol) comes to exist, as `kafka-storage format --add-scram` does for Kafka.  Passwords
are read from a file or standard input, never from the command line, and only the salted
StoredKey and ServerKey are written.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from broker.security.scram import MECHANISMS, make_credential


def _password(args: argparse.Namespace) -> str:
    raw = Path(args.password_file).read_text() if args.password_file else sys.stdin.read()
    password = raw.splitlines()[0] if raw.strip() else ""
    if not password:
        raise SystemExit("streamshop broker users: the password is empty")
    return password


def set_offline(data_dir: Path, name: str, password: str, iterations: int = 8192) -> None:
    """Give `name` SCRAM credentials (every mechanism) in a stopped broker's data directory:
    the first user, before any client can log in to add the others."""
    from broker.config import BrokerConfig
    from broker.core import Broker
    from broker.lock import lock_data_dir

    fd = lock_data_dir(data_dir)
    try:
        broker = Broker(BrokerConfig(data_dir=data_dir, admin_listen=None))
        broker.security.store.change_credentials(
            [(name, m, make_credential(m, password, iterations)) for m in MECHANISMS], []
        )
        asyncio.run(broker.stop())
    finally:
        os.close(fd)


def run(args: argparse.Namespace) -> int:
    from broker.config import BrokerConfig
    from broker.core import Broker
    from broker.lock import DataDirInUse, lock_data_dir

    data_dir = Path(args.data_dir)
    try:
        fd = lock_data_dir(data_dir)
    except DataDirInUse as e:
        print(f"streamshop broker users: {e}; stop it, or use AlterUserScramCredentials", file=sys.stderr)
        return 2
    try:
        broker = Broker(BrokerConfig(data_dir=data_dir, admin_listen=None))
        store = broker.security.store
        if args.users_action == "set":
            password = _password(args)
            mechanisms = args.mechanism or list(MECHANISMS)
            store.change_credentials(
                [(args.name, m, make_credential(m, password, args.iterations)) for m in mechanisms], []
            )
            print(f"user {args.name}: {', '.join(mechanisms)}")
        elif args.users_action == "delete":
            known = sorted(store.users.get(args.name, {}))
            if not known:
                print(f"streamshop broker users: no user {args.name}", file=sys.stderr)
                asyncio.run(broker.stop())
                return 1
            store.change_credentials([], [(args.name, m) for m in known])
            print(f"user {args.name} deleted")
        else:
            for name, creds in sorted(store.users.items()):
                print(f"{name}\t" + ", ".join(f"{m} (iterations {c.iterations})" for m, c in sorted(creds.items())))
        asyncio.run(broker.stop())  # fsyncs the metadata log and marks a clean shutdown
    finally:
        os.close(fd)
    return 0
