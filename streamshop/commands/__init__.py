"""The `streamshop` command's subcommands, one module per family, registered in the order of
`FAMILIES`.  Each module's `register(sub)` adds its parsers; implementations are imported when a
command runs, so `streamshop broker` never loads Spark or the services' Kafka clients.

A run registers the family of the command it was given alone: the others' parsers (their
settings classes, every flag's help) would cost each process a tenth of a CPU-second to build
and never be used.  The usage (`streamshop --help`, a command nobody knows) lists them all."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["FAMILIES", "families_for"]

# Each family's module under streamshop.commands and the subcommands its register() adds;
# tests/unit/test_cli_families.py holds the names to what each module registers.
FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("broker", ("broker",)),
    ("topics", ("topics",)),
    ("groups", ("groups",)),
    ("transactions", ("transactions",)),
    ("records", ("produce", "consume")),
    ("roundtrip", ("roundtrip",)),
    ("stack", ("up", "demo")),
    ("registry", ("registry", "users")),
    ("services", ("orders", "otp", "logs", "sms-sender", "email-sender", "catcher", "dashboard")),
    ("analytics", ("analytics",)),
    ("kafka_cluster", ("kafka-cluster", "scenario", "kafka-tool")),
    ("spark_cluster", ("spark-cluster",)),
    ("postgres", ("postgres",)),
    ("secure", ("secure",)),
    ("probe", ("probe",)),
    ("settings", ("settings",)),
)


def families_for(command: str | None) -> list[ModuleType]:
    """The modules whose parsers a run needs: the family of `command` alone, or, for no command
    or an unknown one, every family in order."""
    wanted = [module for module, names in FAMILIES if command in names] or [module for module, _ in FAMILIES]
    return [importlib.import_module(f"streamshop.commands.{module}") for module in wanted]
