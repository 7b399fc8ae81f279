"""Run the catcher: ``streamshop catcher [--port N] [--smtp-port N]`` or ``python -m services.catcher.main``.

Settings come from ``CATCHER_*`` environment variables (services.catcher.config); the options
override ``CATCHER_PORT`` and ``CATCHER_SMTP_PORT``.  Once listening it prints its ready line on
stdout: ``streamshop catcher ready on http://127.0.0.1:8025 smtp=127.0.0.1:1025``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from services.catcher.app import create_app
from services.catcher.config import CatcherConfig
from services.common.runner import run_service

__all__ = ["main", "run"]


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; 2 on invalid configuration."""
    options = {"port": "port", "smtp_port": "smtp_port"}
    return run_service(CatcherConfig, lambda c, shipper: create_app(c, shipper=shipper), args, options)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="catcher", description="the streamshop SMTP catcher and SMS sink")
    parser.add_argument("--port", type=int, default=None, help="HTTP port (env CATCHER_PORT; default 8025)")
    parser.add_argument("--smtp-port", type=int, default=None, help="SMTP port (env CATCHER_SMTP_PORT; default 1025)")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
