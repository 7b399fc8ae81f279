"""The compose tier: the images built on a base made from Debian's packages and docker-compose.yml
run for real, one profile after the other (they publish the same host ports), through the ports
a user would use.  `make test-compose` runs it alone; `make test` after the rest of the suite.

One engine and one build serve the whole tier; the figures (build times, image sizes, time until
`up --wait` returned) are printed at the end of the run."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest

from tests.support.docker import Compose, build_local_images, docker, engine

# What the tier measured, printed in the terminal summary.
FIGURES: dict[str, str] = {}
IMAGES = ("streamshop:local", "streamshop-broker:local")


@pytest.fixture(scope="session")
def docker_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with engine(tmp_path_factory.mktemp("dockerd") / "dockerd.log") as host:
        yield host


@pytest.fixture(scope="session")
def images(docker_host: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The local images of compose/local.env, then the Dockerfile's two on that base, built by
    compose from the file as a user's `up --build` would."""
    seconds = build_local_images(docker_host, tmp_path_factory.mktemp("build") / "build.log")
    FIGURES["build: local base, Kafka, PostgreSQL, Zipkin and Prometheus images"] = f"{seconds:.0f} s"
    began = time.monotonic()
    Compose(docker_host, "streamshop-build", profiles=("bundled",))("build", timeout=1800)
    FIGURES["build: the broker and app images (compose build)"] = f"{time.monotonic() - began:.0f} s"
    for image in (*IMAGES, *_local_images()):
        size = int(docker(docker_host, "image", "inspect", "-f", "{{.Size}}", image).stdout)
        FIGURES[f"image size: {image}"] = f"{size / 2**20:.0f} MiB"


@contextlib.contextmanager
def running(project: Compose, figure: str, timeout: float = 600) -> Iterator[Compose]:
    """`project` up (what an interrupted earlier run left removed first), its `up --wait` time
    recorded as `figure`; then `down -v`, and nothing of the project may be left."""
    project.down()
    try:
        FIGURES[figure] = f"{project.up(timeout=timeout):.0f} s"
        yield project
    finally:
        project.down()
    assert project.leftovers() == {"containers": [], "volumes": [], "networks": []}


def _local_images() -> list[str]:
    from tests.support.docker import LOCAL_ENV

    lines = LOCAL_ENV.read_text().splitlines()
    return [line.split("=", 1)[1] for line in lines if "=" in line and not line.startswith("#")]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("compose tier figures")
        for what, value in FIGURES.items():
            terminalreporter.write_line(f"{what:60} {value}")
