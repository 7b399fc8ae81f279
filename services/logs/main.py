"""Run the logs service: ``python -m services.logs.main`` or ``streamshop logs``.

Settings come from ``LOGS_*`` environment variables (services.logs.config); the command-line
options of ``streamshop logs`` are shorthands that override them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping

from services.common.runner import run_service
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


def serve(environ: Mapping[str, str] | None = None, args: argparse.Namespace | None = None) -> int:
    """Load the settings (flags of `args` over the variables), configure logging (shipped to
    logs.* too) and serve until stopped."""
    return run_service(LogsConfig, lambda c, shipper: create_app(c, shipper=shipper), args, _OPTIONS, environ)


def run(args: argparse.Namespace) -> int:
    """`streamshop logs`: options given on the command line override the LOGS_* variables."""
    return serve(args=args)


def main() -> int:
    return serve()


if __name__ == "__main__":
    sys.exit(main())
