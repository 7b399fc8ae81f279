"""Run the logs service: ``python -m services.logs.main`` or ``streamshop logs``.

Settings come from ``LOGS_*`` environment variables (services.logs.config); the command-line
options of ``streamshop logs`` are shorthands that override them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping

from services.common.config import ConfigError
from services.common.runner import serve_app
from services.logs.app import create_app
from services.logs.config import LogsConfig

__all__ = ["main", "run", "serve"]

# `streamshop logs` option -> LogsConfig field
_OPTIONS = {
    "listen": "listen",
    "port": "port",
    "bootstrap": "bootstrap_servers",
    "registry_url": "registry_url",
    "database": "database_path",
    "max_records": "max_records",
}


def serve(environ: Mapping[str, str] | None = None) -> int:
    """Load the settings, configure logging (shipped to logs.* too) and serve until stopped."""
    try:
        config = LogsConfig.from_env(environ)
    except ConfigError as e:
        print(f"streamshop logs: {e}", file=sys.stderr)
        return 2
    return serve_app(config, lambda c, shipper: create_app(c, shipper=shipper))


def run(args: argparse.Namespace) -> int:
    """`streamshop logs`: options given on the command line override the LOGS_* variables."""
    env = dict(os.environ)
    for option, field_name in _OPTIONS.items():
        value = getattr(args, option, None)
        if value is not None:
            env[LogsConfig.env_name(field_name)] = str(value)
    return serve(env)


def main() -> int:
    return serve()


if __name__ == "__main__":
    sys.exit(main())
