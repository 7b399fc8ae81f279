"""How to start `streamshop broker` and `streamshop registry` as child processes and
recognise their ready lines (and the services' ones); shared by `streamshop roundtrip`,
`streamshop up`, the benchmark and the test harness."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

_READY = re.compile(
    r"streamshop broker ready on (\S+):(\d+)(?: admin (http://\S+))?(?: data \S+)?(?: listeners (\S+))?"
)


@dataclass(frozen=True)
class ReadyLine:
    host: str
    port: int
    admin_url: str | None
    listeners: dict[str, str] = field(default_factory=dict)  # name: host:port, when several

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


def broker_command(
    data_dir: Path,
    listen: str,
    admin_listen: str = "off",
    settings: dict[str, str] | None = None,
    *,
    advertise: str | None = None,
    durability: str | None = None,
) -> list[str]:
    cmd = [sys.executable, "-m", "streamshop.cli", "broker", "--data-dir", str(data_dir)]
    cmd += ["--listen", listen, "--admin-listen", admin_listen]
    if advertise is not None:
        cmd += ["--advertise", advertise]
    if durability is not None:
        cmd += ["--durability", durability]
    for key, value in (settings or {}).items():
        cmd += ["--set", f"{key}={value}"]
    return cmd


_REGISTRY_READY = re.compile(r"streamshop registry ready on (https?://\S+)")


def registry_command(bootstrap: str, listen: str) -> list[str]:
    return [sys.executable, "-m", "streamshop.cli", "registry", "--bootstrap", bootstrap, "--listen", listen]


def parse_registry_ready_line(line: str) -> str | None:
    """The registry prints `streamshop registry ready on URL`; returns the URL."""
    match = _REGISTRY_READY.search(line)
    return match.group(1).replace("//0.0.0.0:", "//127.0.0.1:") if match else None


def parse_ready_line(line: str) -> ReadyLine | None:
    """The broker prints `streamshop broker ready on HOST:PORT [admin URL] data DIR
    [listeners NAME=HOST:PORT,…]` once it serves; a wildcard listen address is reported as loopback."""
    match = _READY.search(line)
    if match is None:
        return None
    host = "127.0.0.1" if match.group(1) in ("0.0.0.0", "") else match.group(1)
    admin = match.group(3)
    if admin:
        admin = admin.replace("//0.0.0.0:", "//127.0.0.1:")
    listeners = dict(item.split("=", 1) for item in match.group(4).split(",")) if match.group(4) else {}
    listeners = {name: address.replace("0.0.0.0:", "127.0.0.1:") for name, address in listeners.items()}
    return ReadyLine(host, int(match.group(2)), admin, listeners)


# kit.process.ready_line writes it: `streamshop NAME ready on URL[ KEY=VALUE]...`.
_SERVICE_READY = re.compile(r"streamshop ([a-z0-9-]+) ready on (https?://\S+)((?: [A-Za-z0-9_.-]+=\S+)*)\s*")


@dataclass(frozen=True)
class ServiceReady:
    """A service's ready line: its name, HTTP base URL and the extra fields it announced."""

    name: str
    url: str
    fields: dict[str, str] = field(default_factory=dict)


def parse_service_ready_line(line: str) -> ServiceReady | None:
    """`streamshop NAME ready on URL[ KEY=VALUE]...` (from kit.process.serve_app, and
    the registry's line too); a wildcard host is reported as loopback."""
    match = _SERVICE_READY.fullmatch(line)
    if match is None:
        return None
    fields = dict(item.split("=", 1) for item in match.group(3).split())
    url = match.group(2).replace("//0.0.0.0:", "//127.0.0.1:").replace("//[::]:", "//127.0.0.1:")
    return ServiceReady(match.group(1), url, fields)
