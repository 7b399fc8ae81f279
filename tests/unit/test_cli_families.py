"""The `streamshop` command builds the parsers of the family its command belongs to alone
(streamshop.commands.FAMILIES): the names listed for each family must be exactly those its
module registers, or a command would be parsed by the wrong family or not at all."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from streamshop.cli import build_parser, command_named
from streamshop.commands import FAMILIES


def registered(parser: argparse.ArgumentParser) -> list[str]:
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(sub.choices)


@pytest.mark.parametrize(("module", "names"), FAMILIES)
def test_each_family_lists_exactly_the_commands_its_module_registers(module: str, names: tuple[str, ...]) -> None:
    parser = argparse.ArgumentParser()
    importlib.import_module(f"streamshop.commands.{module}").register(parser.add_subparsers())
    assert tuple(registered(parser)) == names


def test_without_a_command_every_family_is_registered_in_order_and_a_command_gets_its_own_alone() -> None:
    assert registered(build_parser()) == [name for _, names in FAMILIES for name in names]
    assert registered(build_parser("sms-sender")) == list(dict(FAMILIES)["services"])
    assert registered(build_parser("no-such-command")) == registered(build_parser())


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["broker", "--data-dir", "d"], "broker"),
        (["--log-level", "debug", "topics", "list"], "topics"),
        (["--log-level=debug", "consume"], "consume"),
        (["-h"], None),
        ([], None),
        (["--log-level"], None),
    ],
)
def test_the_command_is_the_first_word_that_is_no_option_and_no_log_level(argv: list[str], command: str | None) -> None:
    assert command_named(argv) == command


def test_a_mistyped_command_is_refused_with_every_command_listed() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "streamshop.cli", "brokr"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert "invalid choice: 'brokr'" in done.stderr
    assert all(f"'{name}'" in done.stderr for _, names in FAMILIES for name in names)
