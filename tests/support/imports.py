"""The imports of the project's modules, read with `ast` (nothing is imported): which project
modules a component reaches from its packages and commands, and which third-party modules those
import.  An import under ``if TYPE_CHECKING:`` is for the type checker only and is left out; a
string that is a module's dotted name is an import of that module when the command runs (the
commands' ``lazy("streamshop.topics", ...)``, importlib's).

A component's own modules (its package, its commands and what they run) count with the imports
inside their functions; a shared module they reach (the kit, the schemas, the CLI's helpers) with
its top-level imports only: its functions' imports are those of whichever caller uses them, e.g.
streamshop.clients reads confluent-kafka's errors for the console tools, never for the broker."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path

from tests.support.harness import REPO

# The project's top-level packages (the distribution's) and the load test run from a checkout.
OWN = ("contracts", "kit", "schemas", "broker", "registry", "services", "analytics", "streamshop", "loadtest")

# Each component's extra of pyproject.toml and its own modules (a package: each of its modules):
# its package and its commands; the console tools' commands and the modules implementing them;
# what Locust runs (`python -m locust -f loadtest/locustfile.py`; loadtest.load runs a stack).
COMPONENTS: dict[str, tuple[str, ...]] = {
    "broker": ("broker", "streamshop.commands.broker", "streamshop.broker_users"),
    "registry": ("registry", "streamshop.commands.registry"),
    "services": ("services", "streamshop.commands.services"),
    "analytics": ("analytics", "streamshop.commands.analytics", "streamshop.analytics_pack"),
    "tools": (
        *(f"streamshop.commands.{name}" for name in ("topics", "groups", "transactions", "records", "roundtrip")),
        *(f"streamshop.{name}" for name in ("topics", "groups", "share_groups", "reset_offsets", "transactions")),
        *(f"streamshop.{name}" for name in ("console", "formats", "roundtrip")),
    ),
    "load": ("loadtest.locustfile", "loadtest.targets"),
}

_DOTTED = re.compile(r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)+")


@cache
def project_modules() -> dict[str, Path]:
    """Every module of the project by its dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for package in OWN:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _runtime_nodes(tree: ast.AST, *, functions: bool) -> Iterator[ast.AST]:
    """The nodes of `tree` but those under ``if TYPE_CHECKING:`` (and inside functions, unless
    `functions`)."""
    todo = list(ast.iter_child_nodes(tree))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
            continue
        yield node
        if functions or not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))


@cache
def imports(module: str, path: Path, *, functions: bool = True) -> tuple[frozenset[str], frozenset[str]]:
    """The absolute names `module` imports at run time (for ``from m import n`` both m and m.n:
    n may be a module; a relative import resolved against `module`'s package), and the modules
    its strings may name (a dotted name: ``lazy("streamshop.topics", ...)``).  `functions`: the
    imports inside its functions too."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    commands: set[str] = set()
    for node in _runtime_nodes(_tree(path), functions=functions):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _DOTTED.fullmatch(node.value):
            commands.add(node.value)
    return frozenset(names), frozenset(commands)


class Component:
    """The project modules a component reaches from `roots` (a root that is a package: each of its
    modules) and the third-party modules they import.  An import's parent packages are not
    followed: `streamshop.commands`' own module registers every command, and importing one of
    them runs none of the others."""

    def __init__(self, roots: Iterable[str], modules: dict[str, Path]) -> None:
        self.modules: set[str] = set()
        self.third_party: dict[str, set[str]] = {}  # top-level module: the project modules importing it
        own = [m for root in roots for m in modules if m == root or m.startswith(f"{root}.")]
        todo = [(m, True) for m in own]
        walked: set[tuple[str, bool]] = set()
        while todo:
            module, functions = todo.pop()
            if (module, functions) in walked or (module, True) in walked:
                continue
            walked.add((module, functions))
            self.modules.add(module)
            names, commands = imports(module, modules[module], functions=functions)
            todo.extend((name, False) for name in names if name in modules)
            todo.extend((name, True) for name in commands if name in modules)
            for name in names:
                top = name.partition(".")[0]
                if top and top not in OWN and top not in sys.stdlib_module_names:
                    self.third_party.setdefault(top, set()).add(module)


def component(extra: str, modules: dict[str, Path] | None = None) -> Component:
    return Component(COMPONENTS[extra], modules if modules is not None else project_modules())
