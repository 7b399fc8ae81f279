"""Run the otp service: ``streamshop otp`` or ``python -m services.otp.main``.

Settings come from ``OTP_*`` environment variables (services.otp.config); ``--port`` and
``--database`` override the two most often changed ones.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from services.common.runner import PORT_DATABASE, add_port_database_arguments, run_service
from services.otp.app import create_app
from services.otp.config import OtpConfig

__all__ = ["add_arguments", "main", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_port_database_arguments(parser, OtpConfig)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; 2 on invalid configuration."""
    return run_service(OtpConfig, lambda c, shipper: create_app(c, shipper=shipper), args, PORT_DATABASE)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="otp", description="the streamshop otp service")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
