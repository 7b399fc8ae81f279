"""What goes wrong fails fast and says why: a broken healthcheck, a wrong environment variable
or a file missing from the image fails `up --wait` within its limit, naming the service and
showing its log; no engine, or a Debian mirror that does not answer, is a clear message within
seconds, never a hang.  Each run starts the catcher alone (it depends on nothing)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.docker import BUILD_LOCAL, Compose, DockerUnavailable, docker, engine
from tests.support.harness import REPO

pytestmark = pytest.mark.compose

HEALTHCHECK = "import urllib.request as u; u.urlopen('http://127.0.0.1:{port}/readyz', timeout=2)"


@pytest.fixture
def broken(docker_host: str, images: None, tmp_path: Path) -> Iterator[tuple[Compose, Path]]:
    """A project for the catcher alone with the override file the test writes, removed after."""
    override = tmp_path / "override.yml"
    project = Compose(docker_host, "streamshop-broken", overrides=(override,))
    yield project, override
    project.down()
    assert project.leftovers() == {"containers": [], "volumes": [], "networks": []}


def _fails(project: Compose, *needles: str) -> float:
    began = time.monotonic()
    with pytest.raises(AssertionError) as failed:
        project.up("catcher", timeout=90)
    message = str(failed.value)
    assert "catcher" in message
    for needle in needles:
        assert needle in message, message
    return time.monotonic() - began


def test_a_broken_healthcheck_fails_up_wait(broken: tuple[Compose, Path]) -> None:
    project, override = broken
    test = HEALTHCHECK.format(port=8099)  # nothing listens there
    override.write_text(
        "services:\n  catcher:\n    healthcheck:\n"
        f'      test: [CMD, python, -c, "{test}"]\n      interval: 1s\n      retries: 3\n      start_period: 0s\n'
    )
    assert _fails(project, "unhealthy") < 90


def test_a_wrong_environment_variable_fails_up_wait_with_the_settings_error(broken: tuple[Compose, Path]) -> None:
    project, override = broken
    override.write_text('services:\n  catcher:\n    environment:\n      CATCHER_PORT: "not-a-port"\n')
    assert _fails(project, "CATCHER_PORT: expected an integer, got 'not-a-port'") < 90


def test_a_file_missing_from_the_image_fails_up_wait(broken: tuple[Compose, Path], tmp_path: Path) -> None:
    project, override = broken
    (tmp_path / "Dockerfile").write_text(
        "FROM streamshop:local\nUSER root\nRUN rm /app/services/catcher/app.py\nUSER streamshop\n"
    )
    docker(project.host, "build", "-q", "-t", "streamshop-broken:local", str(tmp_path))
    try:
        override.write_text("services:\n  catcher:\n    image: streamshop-broken:local\n")
        assert _fails(project, "services.catcher.app") < 90
    finally:
        project.down()
        docker(project.host, "image", "rm", "streamshop-broken:local")


def test_an_engine_that_does_not_answer_is_a_clear_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing.sock")
    began = time.monotonic()
    with (
        pytest.raises(DockerUnavailable, match="does not answer: start that engine or unset DOCKER_HOST"),
        engine(tmp_path / "dockerd.log"),
    ):
        pass
    assert time.monotonic() - began < 30
    done = subprocess.run(
        [str(BUILD_LOCAL)], env={**os.environ}, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert "no Docker engine answers" in done.stderr


def test_a_debian_mirror_that_does_not_answer_is_a_clear_message(docker_host: str) -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    env = {**os.environ, "DOCKER_HOST": docker_host, "DEBIAN_MIRROR": f"http://127.0.0.1:{port}/debian"}
    began = time.monotonic()
    done = subprocess.run(
        [str(REPO / "compose" / "local" / "base.sh"), "streamshop-base:unreachable"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert f"the Debian mirror http://127.0.0.1:{port}/debian does not answer" in done.stderr
    assert time.monotonic() - began < 60
