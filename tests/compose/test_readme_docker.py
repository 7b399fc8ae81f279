"""README.md's Docker commands as a user types them: read from the README's shell blocks, run by
bash in the repository with the `docker` command (`docker compose` as its plugin, which `make
docker` installs; not the lock's docker-compose), in the README's order.  The form for a host
without an image registry is run whole (`make docker-images`, then `up --build --wait` with
compose/local.env, on the tier's images and build cache); the form on the official images needs
a registry, so its file, env files and profiles are resolved by `config` instead.  A command the
README prints that is neither fails the test, and so does a README without both forms."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from tests.compose.conftest import FIGURES
from tests.support.docblocks import shell_blocks
from tests.support.docker import Compose, run
from tests.support.harness import REPO

pytestmark = pytest.mark.compose

SECTION_START = "With Docker instead"


def readme_docker_commands() -> list[str]:
    """The command lines of the README's shell blocks from its Docker paragraph to the next
    heading."""
    text = (REPO / "README.md").read_text()
    start = text.index(SECTION_START)
    end = text.index("\n#", start)
    first_line = text.count("\n", 0, start) + 1
    last_line = text.count("\n", 0, end) + 1
    blocks = [b for b in shell_blocks(REPO / "README.md") if first_line <= b.line <= last_line]
    return [command for block in blocks for command in block.commands()]


def user_env(host: str) -> dict[str, str]:
    # As Compose.env: the project's variables come from its env files, not from this run's.
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "STREAMSHOP_", "KAFKA_"))}
    return {**clean, "DOCKER_HOST": host}


def typed(command: str, host: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return run(["bash", "-c", command], timeout=timeout, env=user_env(host), cwd=REPO)


def test_the_readmes_docker_commands_run_as_printed(docker_host: str, images: None) -> None:
    commands = readme_docker_commands()
    local = [c for c in commands if re.match(r"docker compose .*--env-file compose/local\.env .*\bup\b", c)]
    official = [c for c in commands if c.startswith("docker compose ") and c not in local]
    makes = [c for c in commands if c.startswith("make ")]
    assert set(commands) == {*local, *official, *makes}, f"unclassified: {set(commands) - {*local, *official, *makes}}"
    assert local, commands
    assert official, commands
    assert "make docker" in makes, commands

    # The project a user's command makes: named after the checkout's folder, as compose does.
    up = local[0]
    prefix = up[: up.index(" up")]
    config = json.loads(typed(f"{prefix} config --format json", docker_host, 60).stdout)
    project = Compose(docker_host, config["name"])  # .env and compose/local.env: the same files
    project.down()
    try:
        for command in commands:
            if command in official:
                # Pulls the official images: here only resolved, with the same options.
                resolved = command[: command.index(" up")] + " config --quiet"
                typed(resolved, docker_host, 60)
                continue
            began = time.monotonic()
            typed(command, docker_host, 1800)
            if command in local:
                FIGURES["README: docker compose ... up --build --wait (compose/local.env)"] = (
                    f"{time.monotonic() - began:.0f} s"
                )
                assert project.not_ready() == []
                assert {c["Service"] for c in project.ps()} >= {"broker", "registry", "orders", "dashboard"}
        version = typed("docker compose version --short", docker_host, 30).stdout.strip()
        assert re.fullmatch(r"v?2\.\d+\.\d+", version), version
    finally:
        project.down()
    assert project.leftovers() == {"containers": [], "volumes": [], "networks": []}
