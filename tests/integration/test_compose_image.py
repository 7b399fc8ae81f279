"""The project's Dockerfile and images as docker-compose.yml uses them: Python 3.11 slim with
Java 17 for the app, the image lock pinning with hashes what the full lock pins, the build
context, and compose/local.env naming an image for each variable the file reads.

The fast tier (no Docker engine): each claim the file makes is checked against what the
processes really read and listen on.  tests/compose/ builds the images and runs the profiles
for real.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from fnmatch import fnmatch

from tests.support.compose_file import BASE_ARG, DOCKERFILE, SERVICES, image
from tests.support.harness import REPO


def _dockerfile_lines() -> Iterator[str]:
    """Instructions, continuation lines joined, comments left out."""
    lines = (line for line in DOCKERFILE.splitlines() if not line.lstrip().startswith("#"))
    yield from "\n".join(lines).replace("\\\n", " ").splitlines()


def _stages() -> dict[str, list[str]]:
    """The Dockerfile's lines by stage (`FROM ... AS name`), the ARGs before the first under ""."""
    stages: dict[str, list[str]] = {"": []}
    current = ""
    for line in _dockerfile_lines():
        if line.startswith("FROM "):
            current = line.split()[-1]
            stages[current] = []
        stages[current].append(line)
    return stages


def test_the_images_are_python_3_11_slim_the_app_with_java_17_and_the_project_installed() -> None:
    stages = _stages()
    (arg,) = [line for line in stages[""] if line.startswith("ARG STREAMSHOP_BASE_IMAGE=")]
    assert re.fullmatch(r"ARG STREAMSHOP_BASE_IMAGE=python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}", arg), (
        "pin the base image by digest"
    )
    assert stages["base"][0] == "FROM ${STREAMSHOP_BASE_IMAGE} AS base"
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    package_data = pyproject["tool"]["setuptools"].get("package-data", {})
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert "streamshop" in pyproject["project"]["scripts"], "services run the `streamshop` console script"
    for target, lock in (("broker", "requirements-broker.lock"), ("app", "requirements-image.lock")):
        lines = stages[target]
        assert lines[0] == f"FROM base AS {target}"
        (deps,) = [line for line in lines if lock in line and line.startswith("RUN ")]
        assert "--require-hashes" in deps.split()
        java = any("apt-get install" in line and "openjdk-17-jre-headless" in line.split() for line in lines)
        assert java == (target == "app"), f"{target}: Java is for Spark, in the app image only"
        (install,) = [line for line in lines if re.search(r"pip install .*\.$", line.strip())]
        # the services load schemas/*.avsc at start: an installed copy of the packages must have them
        assert " -e ." in install or "*.avsc" in package_data.get("schemas", []), "schemas/*.avsc missing"
        (user,) = [line.split()[1] for line in lines if line.startswith("USER ")]
        assert user not in ("root", "0")
        copied = {source for line in lines if line.startswith("COPY ") for source in line.split()[1:-1]}
        assert packages | {lock, "pyproject.toml", "README.md"} <= copied, target
    assert "loadtest" in {s for line in stages["app"] if line.startswith("COPY ") for s in line.split()[1:-1]}


def test_the_image_lock_pins_with_hashes_what_the_full_lock_pins() -> None:
    """Both locks come from one `make lock`: every runtime package at the version the suite ran
    with, each with the sha256 of its files."""

    def pins(name: str) -> dict[str, str]:
        text = (REPO / name).read_text()
        found = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.MULTILINE))
        blocks = re.split(r"\n(?=[A-Za-z0-9_.-]+==)", text)
        assert all("--hash=sha256:" in block for block in blocks[1:]), f"{name}: a package without hashes"
        return {k.lower().replace("_", "-"): v for k, v in found.items()}

    full = pins("requirements.lock")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    for lock, runtime in (
        (
            "requirements-image.lock",
            [*project["dependencies"], *(r for e in extras if e not in ("dev", "all") for r in extras[e])],
        ),
        ("requirements-broker.lock", [*project["dependencies"], *extras["broker"]]),
    ):
        image = pins(lock)
        assert image
        assert {name: full.get(name) for name in image} == image, lock
        for requirement in runtime:
            name = re.split(r"[<>=\[;! ]", requirement, maxsplit=1)[0].lower()
            assert name in image, f"{name} missing from {lock}"
    broker = pins("requirements-broker.lock")
    assert not {"pyspark", "pyarrow", "confluent-kafka", "aiokafka", "kafka-python", "locust"} & set(broker)


def test_the_build_context_keeps_the_sources_and_leaves_out_environments_and_data() -> None:
    patterns = [
        line.strip() for line in (REPO / ".dockerignore").read_text().splitlines() if line.strip() and line[0] != "#"
    ]

    def ignored(path: str) -> bool:
        return any(fnmatch(path, p) or fnmatch(path, p.removeprefix("**/")) for p in patterns)

    # (a COPY --from=STAGE copies out of an earlier stage, not from the context)
    copied = {
        source
        for line in _dockerfile_lines()
        if line.startswith("COPY ") and not line.startswith("COPY --from=")
        for source in line.split()[1:-1]
    }
    assert {"broker/protocol/_recordwalk.c", "analytics/_avrovm.c"} <= copied
    for path in copied:
        assert (REPO / path).exists(), path
        assert not ignored(path), path
    # a module compiled for the host's Python is not the image's: the image compiles its own
    host_built = "broker/protocol/_recordwalk.cpython-311-x86_64-linux-gnu.so"
    for path in (".git", ".venv", "data", "tests", ".env", "loadtest/results", "services/__pycache__", host_built):
        assert ignored(path), path


def test_local_env_names_an_image_for_each_variable_the_compose_file_reads() -> None:
    """compose/local.env swaps every image a registry would serve for one made on the host; its
    variables are exactly those, and the Dockerfile reads the base's."""
    local = dict(
        line.split("=", 1)
        for line in (REPO / "compose" / "local.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    assert set(local) == {BASE_ARG, "KAFKA_IMAGE", "POSTGRES_IMAGE", "ZIPKIN_IMAGE", "PROMETHEUS_IMAGE"}
    assert f"ARG {BASE_ARG}=" in DOCKERFILE
    swapped = {name: image(name, local) for name in SERVICES if image(name) != image(name, local)}
    from streamshop.kafka_jars import KAFKA_VERSION
    from streamshop.zipkin_jar import ZIPKIN_VERSION

    assert {image(name) for name in swapped} == {
        "postgres:15",
        f"apache/kafka:{KAFKA_VERSION}",
        f"openzipkin/zipkin:{ZIPKIN_VERSION}",
        image("prometheus"),
    }
    assert image("prometheus").startswith("prom/prometheus:")
    assert local["KAFKA_IMAGE"].endswith(f":{KAFKA_VERSION}")  # the same release, from Maven Central's jars
    assert local["ZIPKIN_IMAGE"].endswith(f":{ZIPKIN_VERSION}")  # the jar `make zipkin` fetches
    assert set(swapped.values()) == {
        local[name] for name in ("KAFKA_IMAGE", "POSTGRES_IMAGE", "ZIPKIN_IMAGE", "PROMETHEUS_IMAGE")
    }
