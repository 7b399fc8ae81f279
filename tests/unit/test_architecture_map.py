"""docs/architecture.md's map of the broker and the `layers` contract `make lint` holds are one
order: the same parts, row by row, with the same modules.  The contract is exhaustive, so the
lint already fails on a module the map lacks; this keeps the table from drifting from it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = "Broker: its parts in layers, each importing only the parts below it"


def _contract_rows() -> list[set[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["name"] == CONTRACT]
    assert contract["type"] == "layers"
    assert contract["containers"] == ["broker"]
    assert contract["exhaustive"]
    return [{name.strip() for name in re.split(r"[:|]", layer)} for layer in contract["layers"]]


def _map_rows(text: str) -> list[set[str]]:
    section = text.split("### The broker, part by part", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| part ")]
    out = []
    for row in rows:
        modules = row.split("|")[2]
        out.append({m.removesuffix(".py").removesuffix("/") for m in re.findall(r"`([^`]+)`", modules)})
    return out


def test_the_architecture_map_lists_the_contracts_layers_in_order() -> None:
    assert _map_rows((ROOT / "docs" / "architecture.md").read_text()) == _contract_rows()


def test_every_module_of_the_broker_has_a_row() -> None:
    # The lint checks this too (exhaustive), but only when it runs; a map missing a module
    # fails here whatever the contract says.
    placed = set().union(*_contract_rows())
    modules = {p.stem for p in (ROOT / "broker").glob("*.py") if p.stem != "__init__"}
    packages = {p.parent.name for p in (ROOT / "broker").glob("*/__init__.py")}
    assert modules | packages == placed


def test_a_row_out_of_order_is_told_apart() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    security, metrics = (re.search(rf"^\| {part} \|.*$", text, re.M) for part in ("security", "metrics"))
    assert security is not None
    assert metrics is not None
    first, second = security.group(0), metrics.group(0)
    swapped = text.replace(first, "\0").replace(second, first).replace("\0", second)
    assert _map_rows(swapped) != _contract_rows()
