"""log.durability from the command line: `streamshop broker --durability` (BROKER_DURABILITY),
`streamshop up --durability`, and `streamshop settings`' listing of it."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from broker.settings import BrokerSettings
from kit.settings import ConfigError
from streamshop.cli import build_parser
from streamshop.clients import CommandError
from streamshop.commands.broker import broker_overrides
from streamshop.commands.settings import markdown
from streamshop.stack.plan import CHILDREN, Secrets, StackContext
from streamshop.stack.supervisor import up


def _parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_the_durability_flags_and_settings_listing(tmp_path: Path) -> None:
    """`streamshop broker --durability page-cache` sets log.durability; a contradicting --set is
    refused; `streamshop up --durability page-cache` starts its broker so; `streamshop settings`
    lists BROKER_DURABILITY with its choices and default."""
    args = _parse("broker", "--durability", "page-cache")
    settings = BrokerSettings.from_env({}, overrides=broker_overrides(args))
    assert settings.to_config().values.log_durability == "page-cache"
    default = BrokerSettings.from_env({}, overrides=broker_overrides(_parse("broker")))
    assert default.to_config().values.log_durability == "fsync"
    assert "log.durability" not in default.to_config().settings  # described as DEFAULT_CONFIG
    with pytest.raises(ConfigError, match="contradicts"):
        settings.to_config({"log.durability": "fsync"})
    with pytest.raises(SystemExit):
        _parse("broker", "--durability", "sometimes")

    up = _parse("up", "--durability", "page-cache")
    assert up.durability == "page-cache"
    broker = next(c for c in CHILDREN if c.name == "broker")
    ctx = StackContext(tmp_path, "127.0.0.1", Secrets.generate(), "json", {}, durability=up.durability)
    command = broker.launch(ctx, {"kafka": 0, "admin": 0}).command
    assert command[command.index("--durability") + 1] == "page-cache"
    assert _parse("up").durability is None

    row = next(line for line in markdown(["broker"]).splitlines() if "BROKER_DURABILITY" in line)
    assert "one of fsync, page-cache" in row
    assert "`fsync`" in row


def test_up_refuses_a_durability_for_a_cluster_it_does_not_run(tmp_path: Path) -> None:
    args = _parse("up", "--data-dir", str(tmp_path), "--bootstrap", "127.0.0.1:9", "--durability", "page-cache")
    with pytest.raises(CommandError, match="--durability sets the bundled broker's"):
        up(args)
    assert not any(tmp_path.iterdir())  # nothing started or written
