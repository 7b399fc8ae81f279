"""Run the dashboard: ``streamshop dashboard [--port N]`` or ``python -m services.dashboard.main``.

Settings come from ``DASHBOARD_*`` environment variables (services.dashboard.config); ``--port``
overrides ``DASHBOARD_PORT``.  Once listening it prints its ready line on stdout:
``streamshop dashboard ready on http://127.0.0.1:8080``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from services.common.runner import run_service
from services.dashboard.app import create_app
from services.dashboard.config import DashboardConfig

__all__ = ["main", "run"]


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; 2 on invalid configuration."""
    return run_service(DashboardConfig, lambda c, shipper: create_app(c, shipper=shipper), args, {"port": "port"})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dashboard", description="the streamshop dashboard")
    parser.add_argument("--port", type=int, default=None, help="HTTP port (env DASHBOARD_PORT; default 8080)")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
