"""Each extra of pyproject.toml carries exactly what its component imports, read from the source
with `ast` (tests/support/imports.py), and a component command run without a package of its extra
says in one line which extra to install: a new import without its dependency fails here at once."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path
from types import ModuleType

import pytest

from streamshop.commands import analytics, broker, groups, records, registry, roundtrip, services, topics, transactions
from streamshop.commands._common import COMMAND_EXTRA, EXTRA_OF, OWN_PACKAGES
from tests.support.harness import REPO
from tests.support.imports import COMPONENTS, OWN, Component, component, project_modules

# One worker: the source walk (project_modules, _components) is cached per process and is most of
# the module's time; spread over the workers, each would walk the whole project again.
pytestmark = pytest.mark.xdist_group("extras-imports")

# Each extra's command modules: every command they register is that component's.
COMMAND_MODULES: dict[str, tuple[ModuleType, ...]] = {
    "broker": (broker,),
    "registry": (registry,),
    "services": (services,),
    "analytics": (analytics,),
    "tools": (topics, groups, transactions, records, roundtrip),
}


def _name(requirement: str) -> str:
    """The normalized distribution name of a requirement (PEP 503)."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group()).lower()


@cache
def _project() -> dict[str, list[str]]:
    """The base dependencies ("") and each extra's, as distribution names."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = {name: [_name(r) for r in reqs] for name, reqs in project["optional-dependencies"].items()}
    return {"": [_name(r) for r in project["dependencies"]], **extras}


@cache
def _distributions() -> dict[str, set[str]]:
    """Each importable top-level module's distributions (normalized), from the installed metadata."""
    return {module: {_name(d) for d in dists} for module, dists in packages_distributions().items()}


@cache
def _components() -> dict[str, Component]:
    modules = project_modules()
    return {extra: component(extra, modules) for extra in COMPONENTS}


def _provided(module: str, extra: str) -> bool:
    """Whether installing `extra` (with the base dependencies) names a distribution of `module`."""
    return bool(_distributions().get(module, set()) & {*_project()[""], *_project()[extra]})


@pytest.mark.parametrize("extra", COMPONENTS)
def test_an_extra_names_every_package_its_component_imports(extra: str) -> None:
    """Not one brought along by another package (yarl by aiohttp): what a dependency needs may
    change under it."""
    third_party = _components()[extra].third_party
    assert "aiohttp" in third_party  # the walk goes through the shared modules (the kit, the schemas' client)
    unknown = sorted(module for module in third_party if module not in _distributions())
    assert not unknown, f"not installed in the development venv (is it in the dev extra?): {unknown}"
    missing = {module: sorted(by) for module, by in third_party.items() if not _provided(module, extra)}
    assert not missing, f"the {extra!r} extra lacks the distribution of (module: imported by): {missing}"


@pytest.mark.parametrize("extra", COMPONENTS)
def test_an_extra_names_nothing_its_component_does_not_import(extra: str) -> None:
    imported = {dist for module in _components()[extra].third_party for dist in _distributions().get(module, ())}
    unused = sorted(set(_project()[extra]) - imported)
    assert not unused, f"the {extra!r} extra names what its component never imports: {unused}"


@pytest.mark.parametrize("extra", COMMAND_MODULES)
def test_each_component_command_names_its_components_extra(extra: str) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    for module in COMMAND_MODULES[extra]:
        module.register(sub)
    assert sub.choices, extra
    wrong = {command: COMMAND_EXTRA.get(command) for command in sub.choices if COMMAND_EXTRA.get(command) != extra}
    assert not wrong, f"commands of the {extra!r} component naming another extra: {wrong}"


def _application_imports() -> Iterator[tuple[str, str]]:
    """(third-party module, the project module importing it) across the distribution's packages."""
    modules = project_modules()
    roots = [package for package in OWN if package in OWN_PACKAGES]
    for module, by in Component(roots, modules).third_party.items():
        yield from ((module, importer) for importer in sorted(by))


def test_every_package_of_no_base_dependency_names_an_extra_that_carries_it() -> None:
    """What the commands of no one component (the stack, the clusters) name when it is missing."""
    assert set(OWN_PACKAGES) == {package for package in OWN if package != "loadtest"}
    wrong: dict[str, str] = {}
    for module, importer in _application_imports():
        if _provided(module, ""):
            continue
        extra = EXTRA_OF.get(module)
        if extra is None or not _provided(module, extra):
            wrong[module] = f"{extra!r} (imported by {importer})"
    assert not wrong, f"EXTRA_OF names no extra that carries: {wrong}"


# Runs each case in one interpreter: the project's modules dropped, one package made missing
# (None in sys.modules: its import raises ModuleNotFoundError), then the command.
_RUN_MISSING = """
import contextlib, io, json, sys
from streamshop.cli import main
OWN = set(json.loads(sys.argv[1]))
results = []
for argv, missing in json.loads(sys.argv[2]):
    for name in [n for n in sys.modules if n.partition(".")[0] in OWN | {missing}]:
        del sys.modules[name]
    sys.modules[missing] = None
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            status = main(argv)
    except BaseException as e:
        status = f"{type(e).__name__}: {e}"
    del sys.modules[missing]
    results.append([status, err.getvalue()])
print(json.dumps(results))
"""

# (the command, a package its main imports before anything starts, the extra it must name)
MISSING = [
    (["broker", "--listen", "127.0.0.1:0", "--admin-listen", "off"], "re2", "broker"),
    (["registry", "--bootstrap", "127.0.0.1:9", "--listen", "127.0.0.1:0"], "confluent_kafka", "registry"),
    (["sms-sender", "--port", "0"], "confluent_kafka", "services"),
    (["catcher", "--port", "0"], "multidict", "services"),
    (["analytics", "run", "--once"], "pyspark", "analytics"),
    (["topics", "list", "--bootstrap", "127.0.0.1:9"], "confluent_kafka", "tools"),
]


@pytest.mark.slow  # a few seconds: the project imported once per case
def test_a_component_command_missing_a_package_says_which_extra_in_one_line(tmp_path: Path) -> None:
    cases = [
        [[*argv[:1], *(["--data-dir", str(tmp_path)] if argv[0] == "broker" else []), *argv[1:]], m]
        for argv, m, _ in MISSING
    ]
    done = subprocess.run(
        [sys.executable, "-c", _RUN_MISSING, json.dumps(sorted(OWN_PACKAGES)), json.dumps(cases)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.splitlines()[-1])
    for (argv, missing, extra), (status, stderr) in zip(MISSING, results, strict=True):
        lacks = f"needs {missing!r}, which this installation lacks"
        expected = f"streamshop {argv[0]}: {lacks}: pip install 'streamshop[{extra}]'\n"
        assert (status, stderr) == (2, expected), (argv, missing)
