"""Run an OTP sender: ``streamshop sms-sender`` / ``streamshop email-sender``, or
``python -m services.notify.main sms|email``.

Settings come from ``SMS_SENDER_*`` / ``EMAIL_SENDER_*`` environment variables
(services.notify.config); ``--port`` and ``--database`` override the two most often changed ones.
The seal key (``*_SEAL_KEY``, the otp service's ``OTP_SEAL_KEY``) is required: without it the
command exits with status 2 and says so.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from services.common.runner import PORT_DATABASE, add_port_database_arguments, run_service
from services.notify.app import create_app
from services.notify.config import EmailSenderConfig, SenderConfig, SmsSenderConfig

__all__ = ["main", "run_email", "run_sms"]


def _run(args: argparse.Namespace, config_cls: type[SenderConfig]) -> int:
    return run_service(config_cls, lambda c, shipper: create_app(c, shipper=shipper), args, PORT_DATABASE)


def run_sms(args: argparse.Namespace) -> int:
    """`streamshop sms-sender`: serve until SIGINT/SIGTERM; 2 on invalid configuration."""
    return _run(args, SmsSenderConfig)


def run_email(args: argparse.Namespace) -> int:
    """`streamshop email-sender`: serve until SIGINT/SIGTERM; 2 on invalid configuration."""
    return _run(args, EmailSenderConfig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="notify", description="the streamshop OTP senders")
    sub = parser.add_subparsers(dest="channel", required=True)
    for channel, config_cls in (("sms", SmsSenderConfig), ("email", EmailSenderConfig)):
        add_port_database_arguments(sub.add_parser(channel, help=f"run the {config_cls.service_name}"), config_cls)
    args = parser.parse_args(argv)
    return run_sms(args) if args.channel == "sms" else run_email(args)


if __name__ == "__main__":
    raise SystemExit(main())
