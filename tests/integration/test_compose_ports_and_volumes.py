"""docker-compose.yml's host ports (unique, local, the ports the processes listen on) and volumes
(declared, used, each holding one process's state, the secure volume mounted read only).

The fast tier (no Docker engine): each claim the file makes is checked against what the
processes really read and listen on.  tests/compose/ builds the images and runs the profiles
for real.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from analytics.settings import AnalyticsConfig
from services.catcher.config import CatcherConfig
from streamshop.env_file import ENV_FILE
from tests.support.compose_file import (
    COMPOSE,
    DOCKERFILE,
    SECURE_DIR,
    SECURE_VOLUME,
    SERVICE_CONFIGS,
    SERVICES,
    _effective,
    command_of,
    config_of,
    dependencies,
    environment,
    http_port,
    is_long_running,
    runs_locust,
    runs_streamshop,
)


def published(service: str) -> list[tuple[str, int, int]]:
    """(host ip or "", host port, container port) of each ``[IP:]HOST:CONTAINER`` entry."""
    out = []
    for entry in SERVICES[service].get("ports", []):
        *ip, host, container = str(entry).split(":")
        out.append(("".join(ip), int(host), int(container)))
    return out


def mounts(service: str) -> list[tuple[str, str]]:
    """(volume, target) of each ``VOLUME:TARGET[:MODE]`` entry."""
    return [(v.split(":")[0], v.split(":")[1]) for v in map(str, SERVICES[service].get("volumes", []))]


def test_host_ports_are_unique_local_and_the_ports_the_processes_listen_on() -> None:
    seen: dict[int, str] = {}
    for name in SERVICES:
        for ip, host, container in published(name):
            assert host not in seen, f"host port {host}: {seen.get(host)} and {name}"
            seen[host] = name
            assert ip == "127.0.0.1", f"{name}: port {host} is open beyond the host"
            assert host == container, f"{name}: {host}:{container}, the URLs of the README would not hold"
            listening = {http_port(name)}
            if command_of(name)[:2] == ["streamshop", "catcher"]:
                catcher = config_of(name)
                assert isinstance(catcher, CatcherConfig)
                listening.add(catcher.smtp_port)
            assert container in listening, f"{name} publishes {container}, listens on {listening}"


def test_named_volumes_are_declared_used_and_each_holds_one_process_state(monkeypatch: pytest.MonkeyPatch) -> None:
    declared = set(COMPOSE.get("volumes") or {})
    used = [(name, volume, target) for name in SERVICES for volume, target in mounts(name)]
    assert all(not v.startswith((".", "/")) for _, v, _ in used), "bind mounts: the stack uses named volumes"
    assert {v for _, v, _ in used} == declared, "every volume declared is used, and vice versa"
    image_dirs = set(re.findall(r"(/var/lib/streamshop/[\w.-]+)", DOCKERFILE))
    for volume in declared - {SECURE_VOLUME}:
        # One process keeps its state there; a one-shot may prepare it only before that process starts.
        (owner,) = [name for name, v, _ in used if v == volume and is_long_running(name)]
        for name, _, _ in ((n, v, t) for n, v, t in used if v == volume and n != owner):
            assert name in dependencies(owner), f"{volume}: {name} writes it while {owner} may run"
    for name, volume, target in used:
        if volume == SECURE_VOLUME or not is_long_running(name):
            continue
        argv = command_of(name)
        env = environment(name)
        if name == "postgres":
            assert target == "/var/lib/postgresql/data", name  # the official image's PGDATA
            continue
        if name == "prometheus":
            assert f"--storage.tsdb.path={target}" in argv, name
            continue
        if not runs_streamshop(name):
            assert env["KAFKA_LOG_DIRS"] == target, name
            continue
        assert target in image_dirs, f"{name}: {target} is not made (and owned) in the Dockerfile"
        if argv[1] in SERVICE_CONFIGS:
            state = config_of(name).database_path.parent
        elif argv[1] == "analytics":
            state = AnalyticsConfig.from_args(argparse.Namespace(), env).data_dir
        else:
            state = _effective(argv[1], argv[1:], monkeypatch)(env).data_dir
        assert state == Path(target), f"{name} keeps its state in {state}, the volume is at {target}"


def test_every_process_reads_its_secure_settings_file_from_the_secure_volume_read_only() -> None:
    assert SECURE_DIR in re.findall(r"(/var/lib/streamshop/[\w.-]+)", DOCKERFILE), "not made and owned in the image"
    for name, service in SERVICES.items():
        if not (runs_locust(name) or runs_streamshop(name)):
            continue
        entries = [str(e) for e in service.get("volumes", []) if str(e).startswith(SECURE_VOLUME + ":")]
        if is_long_running(name):
            assert entries == [f"{SECURE_VOLUME}:{SECURE_DIR}:ro"], f"{name}: {entries}"
            assert environment(name)[ENV_FILE] == f"{SECURE_DIR}/env/{name}.env", name
    writers = [n for n in SERVICES for e in SERVICES[n].get("volumes", []) if str(e) == f"{SECURE_VOLUME}:{SECURE_DIR}"]
    assert writers == ["secure-setup"], writers


def test_every_process_that_keeps_state_has_a_volume_for_it() -> None:
    for name in SERVICES:
        argv = command_of(name)
        if runs_streamshop(name) and argv[1] in ("broker", "analytics", *SERVICE_CONFIGS):
            if argv[1] in ("catcher", "dashboard"):
                continue  # in memory by design: the catcher's mailbox, the dashboard's history
            assert mounts(name), f"{name} would lose its state with its container"
