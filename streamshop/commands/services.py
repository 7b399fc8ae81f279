"""`streamshop orders|otp|logs|sms-sender|email-sender|catcher|dashboard`: the services, each
with its settings from ``<NAME>_*`` variables and a few flags over them (services.*.main)."""

from __future__ import annotations

import argparse

from services.catcher.config import CatcherConfig
from services.common.config import ServiceConfig
from services.dashboard.config import DashboardConfig
from services.logs.config import LogsConfig
from services.notify.config import EmailSenderConfig, SmsSenderConfig
from services.orders.config import OrdersConfig
from services.otp.config import OtpConfig
from streamshop.commands._common import SubParsers, lazy, setting_flag

__all__ = ["register"]


def register(sub: SubParsers) -> None:
    config: type[ServiceConfig]
    for name, config, help_text in (
        ("orders", OrdersConfig, "run the orders service (settings from ORDERS_* env vars)"),
        ("otp", OtpConfig, "run the otp service (settings from OTP_* env vars)"),
    ):
        p = sub.add_parser(name, help=help_text)
        _port_database(p, config)
        p.set_defaults(func=lazy(f"services.{name}.main", "run", name))

    p = sub.add_parser("logs", help="run the logs service (indexes the logs.* topics; GET /logs, /logs/stats)")
    setting_flag(p, LogsConfig, "listen", metavar="HOST")
    setting_flag(p, LogsConfig, "port")
    setting_flag(
        p, LogsConfig, "bootstrap_servers", "--bootstrap", "--bootstrap-server", metavar="HOST:PORT", dest="bootstrap"
    )
    setting_flag(p, LogsConfig, "registry_url", metavar="URL")
    setting_flag(p, LogsConfig, "database_path", "--database", metavar="PATH", dest="database")
    setting_flag(p, LogsConfig, "max_records")
    p.set_defaults(func=lazy("services.logs.main", "run", "logs"))

    for name, function, channel, config in (
        ("sms-sender", "run_sms", "SMS", SmsSenderConfig),
        ("email-sender", "run_email", "email", EmailSenderConfig),
    ):
        env = config.prefix()
        p = sub.add_parser(
            name,
            help=f"run the {name} consumer group: deliver OTP codes by {channel} (settings from {env}_* env vars)",
        )
        _port_database(p, config)
        p.set_defaults(func=lazy("services.notify.main", function, name))

    p = sub.add_parser(
        "catcher",
        help="run the local SMTP catcher and SMS sink; received messages listed over HTTP (settings from CATCHER_*)",
    )
    setting_flag(p, CatcherConfig, "port")
    setting_flag(p, CatcherConfig, "smtp_port")
    p.set_defaults(func=lazy("services.catcher.main", "run", "catcher"))

    p = sub.add_parser(
        "dashboard",
        help="run the dashboard: topics, consumer groups and lag, analytics, inbox and live logs on one page "
        "(settings from DASHBOARD_*)",
    )
    setting_flag(p, DashboardConfig, "port")
    p.set_defaults(func=lazy("services.dashboard.main", "run", "dashboard"))


def _port_database(parser: argparse.ArgumentParser, config: type[ServiceConfig]) -> None:
    setting_flag(parser, config, "port")
    setting_flag(parser, config, "database_path", "--database", metavar="PATH", dest="database")
