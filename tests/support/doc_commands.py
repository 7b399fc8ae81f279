"""Checks of a documented command line's syntax against the real parsers, nothing run: the
`streamshop` CLI's argparse parser, the Makefile's targets, a `python -m loadtest.X` module's
own parser (stopped right after it parsed), pytest's markers, the compose file's profiles.

Documents write values as placeholders (PORT, DIR, HOST:PORT, <port>, …) and synopses with
optional parts in brackets and alternatives as a|b: a placeholder passes any type and choice,
a synopsis is read with every optional part present and the first alternative."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import re
import shlex
import sys
import tomllib
from collections.abc import Iterator, Sequence
from typing import Any
from unittest import mock

import yaml  # type: ignore[import-untyped]

from tests.support.harness import REPO

_PLACEHOLDER = re.compile(r"[A-Z]{3,}|<\w+>|…|^[A-Z]$")
_ENV_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


class SyntaxProblem(AssertionError):
    """A documented command the real parser refuses, or one that names what does not exist."""


def is_placeholder(value: str) -> bool:
    return bool(_PLACEHOLDER.search(value))


@contextlib.contextmanager
def lenient_placeholders() -> Iterator[None]:
    """argparse with placeholder values taken as they are (no type conversion, no choices)."""
    get_value = argparse.ArgumentParser._get_value
    check_value = argparse.ArgumentParser._check_value

    def _get_value(self: argparse.ArgumentParser, action: argparse.Action, arg_string: str) -> Any:
        return arg_string if is_placeholder(arg_string) else get_value(self, action, arg_string)

    def _check_value(self: argparse.ArgumentParser, action: argparse.Action, value: Any) -> None:
        if not (isinstance(value, str) and is_placeholder(value)):
            check_value(self, action, value)

    with (
        mock.patch.object(argparse.ArgumentParser, "_get_value", _get_value),
        mock.patch.object(argparse.ArgumentParser, "_check_value", _check_value),
    ):
        yield


def words(command: str) -> list[list[str]]:
    """The simple commands of a pipeline, each without its redirections and leading VAR=value
    assignments; a synopsis (a word opening with `[`) read with its optional parts present."""
    tokens = shlex.split(command)
    synopsis = any(t.startswith("[") for t in tokens)
    parts: list[list[str]] = [[]]
    skip_next = False
    for i, raw in enumerate(tokens):
        token = raw
        if skip_next:
            skip_next = False
            continue
        if token in ("|", "&&", ";"):
            parts.append([])
            continue
        if token in (">", ">>", "<", "2>"):
            skip_next = True
            continue
        if synopsis:
            token = token.replace("[", "").replace("]", "")
            if token.endswith("...") and token != "...":
                token = token[:-3]
            if token in ("...", "…"):
                previous = tokens[i - 1].strip("[]")
                if previous.startswith("-"):
                    parts[-1].append("VALUE")
                continue
            if "|" in token:
                token = token.split("|")[0]
            if not token:
                continue
        if not parts[-1] and _ENV_ASSIGNMENT.match(token):
            continue
        parts[-1].append(token)
    return [p for p in parts if p]


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str], what: str) -> argparse.Namespace:
    err = io.StringIO()
    try:
        with lenient_placeholders(), contextlib.redirect_stderr(err):
            return parser.parse_args(list(argv))
    except SystemExit as e:
        raise SyntaxProblem(f"{what}: {err.getvalue().strip() or e}") from None


def check_streamshop(argv: Sequence[str], what: str) -> argparse.Namespace:
    from streamshop.cli import build_parser

    return _parse(build_parser(), argv, what)


def makefile_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):(?!=)", text, re.MULTILINE))


def check_make(argv: Sequence[str], what: str) -> None:
    targets = [a for a in argv[1:] if "=" not in a]
    unknown = set(targets) - makefile_targets()
    if unknown or not targets:
        raise SyntaxProblem(f"{what}: no Makefile target {sorted(unknown) or '(none named)'}")
    for assignment in (a for a in argv[1:] if a.startswith("ARGS=")):
        # `make demo ARGS=...` passes them to `streamshop up --demo`.
        check_streamshop(["up", "--demo", *shlex.split(assignment[5:])], what)


class _Parsed(Exception):
    """Raised right after a module's parser accepted the arguments: nothing else runs."""


def check_loadtest(module: str, argv: Sequence[str], what: str) -> None:
    """`python -m <module> argv`: the module exists and its own parser accepts argv."""
    if importlib.util.find_spec(module) is None:
        raise SyntaxProblem(f"{what}: no module {module}")
    source = (REPO / (module.replace(".", "/") + ".py")).read_text()
    if "argparse" not in source:
        if argv:
            raise SyntaxProblem(f"{what}: {module} takes no options, the document gives {list(argv)}")
        return
    parse_args = argparse.ArgumentParser.parse_args
    err = io.StringIO()

    def parse_then_stop(self: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
        parse_args(self, list(argv), namespace)
        raise _Parsed

    loaded = importlib.import_module(module)
    try:
        with (
            mock.patch.object(argparse.ArgumentParser, "parse_args", parse_then_stop),
            mock.patch.object(sys, "argv", [module, *argv]),
            lenient_placeholders(),
            contextlib.redirect_stderr(err),
        ):
            loaded.main()
    except _Parsed:
        return
    except SystemExit as e:
        raise SyntaxProblem(f"{what}: {err.getvalue().strip() or e}") from None
    raise SyntaxProblem(f"{what}: {module}.main() returned without parsing its arguments")


def pytest_markers() -> set[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return {m.split(":")[0] for m in config["tool"]["pytest"]["ini_options"]["markers"]}


def check_pytest(argv: Sequence[str], what: str) -> None:
    args = list(argv)
    for i, arg in enumerate(args):
        if arg == "-m" and args[i + 1] not in pytest_markers():
            raise SyntaxProblem(f"{what}: no pytest marker {args[i + 1]}")
        if arg.startswith("tests/") and not (REPO / arg.split("::")[0]).exists():
            raise SyntaxProblem(f"{what}: no {arg}")


def check_docker_compose(argv: Sequence[str], what: str) -> None:
    """The env files exist, the profiles and the services named are the compose file's."""
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services: dict[str, Any] = compose["services"]
    profiles = {p for s in services.values() for p in s.get("profiles", [])}
    args = list(argv[2:])
    i = 0
    while i < len(args) and args[i].startswith("-"):
        option, value = args[i], args[i + 1]
        if option == "--env-file" and not (REPO / value).is_file():
            raise SyntaxProblem(f"{what}: no env file {value}")
        if option == "--profile" and value not in profiles:
            raise SyntaxProblem(f"{what}: no profile {value} in docker-compose.yml")
        i += 2
    if i < len(args) and args[i] in ("exec", "logs") and args[i + 1] not in services:
        raise SyntaxProblem(f"{what}: no service {args[i + 1]}")


def check_command(command: str, what: str) -> list[str]:
    """Checks each simple command of `command`; returns what they were (e.g. 'streamshop')."""
    kinds = []
    for argv in words(command):
        head = argv[0]
        if head.endswith("bin/streamshop") or head == "streamshop":
            check_streamshop(argv[1:], what)
            kinds.append("streamshop")
        elif head == "make":
            check_make(argv, what)
            kinds.append("make")
        elif head.endswith("python") and argv[1:3] == ["-m", "pytest"]:
            check_pytest(argv[3:], what)
            kinds.append("pytest")
        elif head.endswith("python") and argv[1] == "-m" and argv[2].startswith("loadtest."):
            check_loadtest(argv[2], argv[3:], what)
            kinds.append("loadtest")
        elif head.endswith("python") and argv[1:3] == ["-m", "locust"]:
            if not (REPO / argv[argv.index("-f") + 1]).is_file():
                raise SyntaxProblem(f"{what}: no locust file {argv[argv.index('-f') + 1]}")
            kinds.append("locust")
        elif argv[:2] == ["docker", "compose"]:
            check_docker_compose(argv, what)
            kinds.append("docker compose")
        elif head in ("export", "printf", "echo"):
            kinds.append(head)
        else:
            raise SyntaxProblem(f"{what}: no check for {head!r}: add one to tests/support/doc_commands.py")
    return kinds


def command_name(command: str) -> str:
    """What a command line runs, without its options and values: `streamshop broker users`,
    `make docker`, `.venv/bin/python -m pytest` (at most three words, and -m's module)."""
    name: list[str] = []
    argv = words(command)[0]
    for i, token in enumerate(argv):
        if token == "-m" and name and name[-1].endswith("python") and i + 1 < len(argv):
            return " ".join([*name, "-m", argv[i + 1]])
        if len(name) == 3 or token.startswith("-") or not re.fullmatch(r"[\w./-]+", token):
            break
        name.append(token)
    return " ".join(name)
