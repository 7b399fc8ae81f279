"""No two modules of the broker import each other, directly or through others: grimp's graph
of broker/, with the imports inside functions and under TYPE_CHECKING counted (a circle
there still ties the modules together).  `make lint` holds the same at package level."""

from __future__ import annotations

import grimp


def _cycles(graph: grimp.ImportGraph) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in graph.modules:
                continue
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(component)

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_two_broker_modules_import_each_other() -> None:
    graph = grimp.build_graph("broker")
    assert len(graph.modules) > 50
    assert _cycles(graph) == []


def test_the_check_finds_a_circle() -> None:
    graph = grimp.build_graph("broker")
    graph.add_import(importer="broker.log.cleaner", imported="broker.log.partition_log")
    assert _cycles(graph) == [{"broker.log.cleaner", "broker.log.partition_log"}]
