"""`streamshop up --observability`: two more children, started before the others, and every other
child's traces sent to one of them.

- ``traces``: Zipkin's server (streamshop.zipkin_jar) on 127.0.0.1, its spans in memory (at most
  `MAX_SPANS`, the oldest traces dropped first) in a JVM of at most `ZIPKIN_HEAP_MB`; ready once
  GET /health answers 200.  Every child the stack launches exports its spans to it through the
  OpenTelemetry SDK's own Zipkin exporter, named after the child (`traced_env`): the children
  need it, so that no span of their start is sent to a server not yet listening.  The dashboard
  is also told where Zipkin is (`VIEWER_ENV`): its page links traced items to their trace there.
- ``prometheus``: Debian's Prometheus on 127.0.0.1 with a configuration of its own
  (`prometheus_config`, in DIR/prometheus with its database), scraping every `SCRAPE_INTERVAL`
  the targets of DIR/prometheus/targets.json: the supervisor rewrites that file as children
  announce their URLs (`write_targets`), and Prometheus re-reads it on change.  Ready once GET
  /-/ready answers 200.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from streamshop import zipkin_jar
from streamshop.clients import CommandError
from streamshop.stack.plan import Announced, ChildDef, Launch, StackContext

__all__ = [
    "PROMETHEUS",
    "TRACES",
    "Backends",
    "backends",
    "children",
    "prometheus_config",
    "scrape_targets",
    "targets_file",
    "traced_env",
    "with_observability",
    "write_targets",
]

TRACES, PROMETHEUS = "traces", "prometheus"
HOST = "127.0.0.1"  # both serve loopback alone, whatever --listen says: neither asks for a login
ZIPKIN_PORT, PROMETHEUS_PORT = 9411, 9090  # each project's own default
ZIPKIN_HEAP_MB = 256
MAX_SPANS = 100_000  # about 100 MB of the heap at most, at the demo's spans of ~1 KB
SCRAPE_INTERVAL = "2s"  # short: a test or a person waits a scrape or two, not a minute
RETENTION = ("--storage.tsdb.retention.time=2d", "--storage.tsdb.retention.size=512MB")


@dataclass(frozen=True)
class Backends:
    """What the two children run: Zipkin's jar on Java, and Prometheus's program."""

    zipkin_jar: Path
    java: str
    prometheus: str


def backends() -> Backends:
    """Zipkin's jar (fetched by Maven the first time) and Debian's Prometheus; `CommandError`
    saying how to get what is missing."""
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        raise CommandError("--observability needs Prometheus: `make prometheus` (apt-get install prometheus)")
    java = shutil.which("java")
    if java is None:
        raise CommandError("--observability runs Zipkin, which needs Java 17 (apt-get install openjdk-17-jre-headless)")
    return Backends(zipkin_jar.resolve(), java, prometheus)


def _http_at(ports: Mapping[str, int]) -> Announced:
    return Announced({"http": f"http://{HOST}:{ports['http']}"}, {"http": ports["http"]})


def children(found: Backends) -> tuple[ChildDef, ChildDef]:
    """The ``traces`` and ``prometheus`` children: they need nothing and print no ready line."""

    def traces(ctx: StackContext, ports: Mapping[str, int]) -> Launch:
        return Launch(
            zipkin_jar.zipkin_command(
                found.java, found.zipkin_jar, HOST, ports["http"], heap_mb=ZIPKIN_HEAP_MB, max_spans=MAX_SPANS
            ),
            {},
        )

    def prometheus(ctx: StackContext, ports: Mapping[str, int]) -> Launch:
        directory = ctx.data_dir / PROMETHEUS
        directory.mkdir(parents=True, exist_ok=True)
        config = directory / "prometheus.yml"
        write_targets(targets_file(ctx.data_dir), ctx.endpoints)  # there from its first read
        _replace(config, json.dumps(prometheus_config(targets_file(ctx.data_dir)), indent=1) + "\n")
        command = [
            found.prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address={HOST}:{ports['http']}",
            *RETENTION,
        ]
        return Launch(command, {})

    def no_line(_: str) -> Announced | None:
        return None

    return (
        ChildDef(
            TRACES,
            (),
            {"http": ZIPKIN_PORT},
            traces,
            no_line,
            announce=_http_at,
            health="/health",
            jvm=True,  # `up --jvm-start-timeout`: 10 s idle, up to a minute on a busy 2-core host
            stop_grace=10.0,
        ),
        ChildDef(
            PROMETHEUS,
            (),
            {"http": PROMETHEUS_PORT},
            prometheus,
            no_line,
            announce=_http_at,
            health="/-/ready",
            stop_grace=10.0,  # it closes its database's head block
        ),
    )


def traced_env(name: str, traces_url: str) -> dict[str, str]:
    """The standard OpenTelemetry variables that send a child's spans to Zipkin: the service's
    name (``orders`` for ``orders-2`` too, as OpenTelemetry names a service) and the child's
    own as its instance."""
    instance = re.fullmatch(r"(.+)-\d+", name)
    return {
        "OTEL_TRACES_EXPORTER": "zipkin",
        "OTEL_EXPORTER_ZIPKIN_ENDPOINT": traces_url.rstrip("/") + "/api/v2/spans",
        "OTEL_SERVICE_NAME": instance.group(1) if instance else name,
        "OTEL_RESOURCE_ATTRIBUTES": f"service.instance.id={name}",
    }


# Children whose pages link to a trace in the viewer, and the variable that says where it is.
VIEWER_ENV = {"dashboard": "DASHBOARD_TRACES_URL"}


def _traced(name: str, launch: Callable[[StackContext, Mapping[str, int]], Launch]) -> Callable[..., Launch]:
    def traced(ctx: StackContext, ports: Mapping[str, int]) -> Launch:
        made = launch(ctx, ports)
        traces_url = ctx.url(TRACES, "http")
        viewer = {VIEWER_ENV[name]: traces_url} if name in VIEWER_ENV else {}
        return Launch(made.command, {**made.env, **traced_env(name, traces_url), **viewer}, made.defaults)

    return traced


def with_observability(stack: Sequence[ChildDef], found: Backends) -> list[ChildDef]:
    """`stack` (its final names: after --scale) with ``traces`` and ``prometheus`` first, and each
    child it launches needing ``traces`` and exporting its spans there."""
    traced = [
        c if c.external is not None else replace(c, needs=(*c.needs, TRACES), launch=_traced(c.name, c.launch))
        for c in stack
    ]
    return [*children(found), *traced]


# -- Prometheus's configuration and targets ------------------------------------------------------


def targets_file(data_dir: Path) -> Path:
    return data_dir / PROMETHEUS / "targets.json"


def prometheus_config(targets: Path) -> dict[str, Any]:
    """Prometheus's configuration (JSON, which is YAML too): one scrape job over `targets`."""
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL},
        "scrape_configs": [
            {
                "job_name": "streamshop",
                # Re-read on change (inotify); the interval is the fallback.
                "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "5s"}],
            }
        ],
    }


def scrape_targets(endpoints: Mapping[str, Mapping[str, str]]) -> list[dict[str, Any]]:
    """A target group per child that serves metrics, `job` its name: the broker on its admin API,
    Zipkin on /prometheus, every other HTTP child (Prometheus too) on /metrics.  Instances of a
    service (``up --scale``) share one port: it is scraped once, as the first instance's."""
    groups: list[dict[str, Any]] = []
    seen: set[str] = set()
    for name, urls in endpoints.items():
        url = urls.get("admin") or urls.get("http")
        if url is None:
            continue  # the analytics job, PostgreSQL, an external broker
        address = urlsplit(url).netloc
        if address in seen:
            continue
        seen.add(address)
        path = "/prometheus" if name == TRACES else "/metrics"
        groups.append({"targets": [address], "labels": {"job": name, "__metrics_path__": path}})
    return groups


def write_targets(path: Path, endpoints: Mapping[str, Mapping[str, str]]) -> None:
    """`path` listing `endpoints`' targets, rewritten only when they changed."""
    text = json.dumps(scrape_targets(endpoints), indent=1) + "\n"
    if path.parent.is_dir() and not (path.exists() and path.read_text() == text):
        _replace(path, text)


def _replace(path: Path, text: str) -> None:
    """`path` holding `text`, whole: Prometheus may read it at any moment."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
