"""`streamshop`: one command for every process of the project and its console tools.

The subcommands come from one explicit list (streamshop.commands.FAMILIES); each imports its
component when it runs, so `streamshop broker` never loads the services and vice versa.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

# Before the project's other modules: the stamp the analytics job's start phases are timed from.
import kit.start_phases  # noqa: F401
from kit.logging import LEVELS, configure_logging, get_logger
from kit.settings import ConfigError

__all__ = ["build_parser", "main"]


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser: for `command`, its family's subcommands alone (streamshop.commands.families_for);
    without one, every subcommand."""
    from streamshop.commands import families_for

    parser = argparse.ArgumentParser(prog="streamshop", description=__doc__)
    parser.add_argument(
        "--log-level", default=None, choices=LEVELS, help="lowest level logged (env STREAMSHOP_LOG_LEVEL; default info)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for family in families_for(command):
        family.register(sub)
    return parser


def command_named(argv: Sequence[str]) -> str | None:
    """The subcommand `argv` names: its first word that is neither an option nor the value of
    `--log-level`."""
    words = iter(argv)
    for word in words:
        if word == "--log-level":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def main(argv: Sequence[str] | None = None) -> int:
    from streamshop.env_file import EnvFileError, apply_env_file
    from streamshop.settings import CliSettings

    try:
        # Before the parser: its defaults come from the environment.
        applied = apply_env_file()
        settings = CliSettings.from_env()
    except (EnvFileError, ConfigError) as e:
        print(f"streamshop: {e}", file=sys.stderr)
        return 2
    args = build_parser(command_named(sys.argv[1:] if argv is None else argv)).parse_args(argv)
    # The console tools log as the command; a process (broker, registry, a service, the
    # analytics job) configures its own logging from its settings when it starts.
    configure_logging(level=args.log_level or settings.log_level, fmt=settings.log_format)
    log = get_logger("streamshop")
    if applied is not None:
        log.info("settings from file", path=str(applied))
    for message in settings.deprecations:
        log.warning("deprecated setting", problem=message)
    try:
        return int(args.func(args) or 0)
    except ModuleNotFoundError as e:
        from streamshop.commands._common import missing_extra

        extra = missing_extra(args.command, e)
        if extra is None:
            raise  # a module of the project or of Python itself: a broken installation or a bug, never hidden
        print(
            f"streamshop {args.command}: needs {(e.name or '').partition('.')[0]!r}, which this installation lacks: "
            f"pip install 'streamshop[{extra}]'",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
