"""Run the otp service: ``streamshop otp`` or ``python -m services.otp.main``.

Settings come from ``OTP_*`` environment variables (services.otp.config); ``--port`` and
``--database`` override the two most often changed ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from services.common.config import ConfigError
from services.common.runner import serve_app
from services.otp.app import create_app
from services.otp.config import OtpConfig

__all__ = ["add_arguments", "main", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=None, help="HTTP port (env OTP_PORT; default 8002)")
    parser.add_argument(
        "--database", type=Path, default=None, help="SQLite file (env OTP_DATABASE_PATH; default data/otp.db)"
    )


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; 2 on invalid configuration."""
    try:
        config = OtpConfig.from_env()
        config.check()
    except ConfigError as e:
        sys.stderr.write(f"otp: {e}\n")
        return 2
    overrides: dict[str, object] = {}
    if getattr(args, "port", None) is not None:
        overrides["port"] = args.port
    if getattr(args, "database", None) is not None:
        overrides["database_path"] = Path(args.database)
    config = dataclasses.replace(config, **overrides)  # type: ignore[arg-type]
    return serve_app(config, lambda c, shipper: create_app(c, shipper=shipper))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="otp", description="the streamshop otp service")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
