"""What the command modules share: the sub-parser type, running a command's implementation
(imported when it runs, so `streamshop broker` never loads the services), and the options of
the console tools that are Kafka clients."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from typing import TypeAlias

from kit.settings import SettingInfo, Settings
from streamshop.settings import CliSettings

__all__ = [
    "COMMAND_EXTRA",
    "EXTRA_OF",
    "OWN_PACKAGES",
    "SubParsers",
    "client_options",
    "lazy",
    "missing_extra",
    "registry_option",
    "setting_flag",
    "setting_help",
]

SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
Command = Callable[[argparse.Namespace], int]

# A component command needs its component's extra (pyproject.toml), whichever of its packages is
# missed first: an image installs only some extras (the broker's has no Spark or Kafka client).
# tests/unit/test_extras_imports.py holds this table to the commands and the extras to the imports.
COMMAND_EXTRA = {
    "broker": "broker",
    **dict.fromkeys(("registry", "users"), "registry"),
    **dict.fromkeys(("orders", "otp", "logs", "sms-sender", "email-sender", "catcher", "dashboard"), "services"),
    "analytics": "analytics",
    **dict.fromkeys(("topics", "groups", "transactions", "produce", "consume", "roundtrip"), "tools"),
}

# The extra that brings each third-party module, for the commands of no one component (the stack,
# the clusters, the one-shots); `all` for any other module.
EXTRA_OF = {
    "kio": "broker",
    "crc32c": "broker",
    "cramjam": "broker",
    "msgpack": "broker",
    "re2": "broker",
    "aiokafka": "services",
    "fastavro": "services",
    "multidict": "services",
    "aiosmtplib": "services",
    "aiosmtpd": "services",
    "pycountry": "services",
    "asyncpg": "services",
    "pyspark": "analytics",
    "pyarrow": "analytics",
    "confluent_kafka": "tools",
    "kafka": "tools",
    "locust": "load",
    "gevent": "load",
}

# The project's own top-level packages: one of them missing is a broken installation, not an extra.
OWN_PACKAGES = frozenset({"contracts", "kit", "schemas", "broker", "registry", "services", "analytics", "streamshop"})


def missing_extra(command: str, error: ModuleNotFoundError) -> str | None:
    """The extra to install for `error` raised by `command`, or None when no extra brings the
    module: it is the project's own or the standard library's (a broken installation, a bug)."""
    package = (error.name or "").partition(".")[0]
    if not package or package in OWN_PACKAGES or package in sys.stdlib_module_names:
        return None
    return COMMAND_EXTRA.get(command) or EXTRA_OF.get(package, "all")


def lazy(module: str, function: str, command: str, *, needs_broker: bool = False) -> Command:
    """Run `module.function(args)`, imported when the command runs; a `CommandError` is one
    line on stderr and exit status 1.  `needs_broker`: fail fast, with a clear message, when
    ``--bootstrap`` does not answer."""

    def run(args: argparse.Namespace) -> int:
        from streamshop.clients import CommandError, check_reachable, warn

        implementation = getattr(importlib.import_module(module), function)
        try:
            if needs_broker and isinstance(getattr(args, "bootstrap", None), str):
                check_reachable(args.bootstrap)
            return int(implementation(args))
        except CommandError as e:
            warn(command, str(e))
            return 1
        except KeyboardInterrupt:
            warn(command, "interrupted")
            return 130

    return run


def setting_flag(
    parser: argparse.ArgumentParser,
    cls: type[Settings],
    field: str,
    *flags: str,
    metavar: str | None = None,
    dest: str | None = None,
    text: str | None = None,
) -> None:
    """A flag overriding setting `field` of `cls`: parsed and checked as its variable is (a bad
    value is argparse's usage error), its help from the setting's."""

    def parse(raw: str) -> object:
        try:
            return cls.parse_value(field, raw)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = field  # argparse names the type in "invalid <type> value"
    names = flags or (f"--{field.replace('_', '-')}",)
    action = parser.add_argument(*names, type=parse, default=None, metavar=metavar, help=setting_help(cls, field, text))
    if dest:
        action.dest = dest


def setting_help(cls: type[Settings], field: str, text: str | None = None) -> str:
    """A flag's help from the setting it overrides: its help text, variable and default."""
    info = _described(cls)[field]
    default = info.default if info.default not in ("", "None") else "none"
    variables = ", then ".join((info.variable, *info.fallbacks))
    return f"{text or info.help} (env {variables}; default {default})"


_DESCRIBED: dict[type[Settings], dict[str, SettingInfo]] = {}


def _described(cls: type[Settings]) -> dict[str, SettingInfo]:
    # Once per class: every command's parser is built at each start, about 60 flags in all.
    if cls not in _DESCRIBED:
        _DESCRIBED[cls] = {info.field: info for info in cls.describe()}
    return _DESCRIBED[cls]


def client_options(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """--bootstrap and -X; `suppress` for a sub-action that may repeat them after its name."""
    default = CliSettings.from_env().bootstrap_servers if not suppress else argparse.SUPPRESS
    parser.add_argument(
        "--bootstrap",
        "--bootstrap-server",
        metavar="HOST:PORT",
        default=default,
        help=setting_help(CliSettings, "bootstrap_servers", "bootstrap servers"),
    )
    parser.add_argument(
        "-X",
        dest="client_config",
        action="append",
        metavar="KEY=VALUE",
        default=argparse.SUPPRESS if suppress else [],
        help="extra librdkafka setting, e.g. -X security.protocol=SSL (repeatable)",
    )


def registry_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--registry",
        metavar="URL",
        default=CliSettings.from_env().registry_url,
        help=setting_help(CliSettings, "registry_url", "schema registry"),
    )
