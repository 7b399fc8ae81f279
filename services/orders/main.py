"""Run the orders service: ``streamshop orders`` or ``python -m services.orders.main``.

Settings come from ``ORDERS_*`` environment variables (services.orders.config); ``--port`` and
``--database`` override the two most often changed ones.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from services.common.runner import PORT_DATABASE, add_port_database_arguments, run_service
from services.orders.app import create_app
from services.orders.config import OrdersConfig

__all__ = ["add_arguments", "main", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_port_database_arguments(parser, OrdersConfig)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; 2 on invalid configuration."""
    return run_service(OrdersConfig, lambda c, shipper: create_app(c, shipper=shipper), args, PORT_DATABASE)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="orders", description="the streamshop orders service")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
