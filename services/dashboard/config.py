"""Settings of the dashboard, from ``DASHBOARD_*`` environment variables."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit

from kit.users import Users, UsersFileError
from services.common.config import DEFAULT_PORTS, ConfigError, ServiceConfig, secret, setting

__all__ = ["DashboardConfig"]

# Kafka's own rule for topic names (Topic.validate in the Java client).
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
# host:port, [v6]:port, or Kafka's listener form PLAINTEXT://host:port.
_HOST_PORT = re.compile(r"(?:[A-Za-z_]+://)?(?:\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):\d{1,5}")


@dataclass(frozen=True, repr=False)
class DashboardConfig(ServiceConfig):
    """`DashboardConfig.from_env()` reads DASHBOARD_PORT, DASHBOARD_BOOTSTRAP_SERVERS,
    DASHBOARD_REGISTRY_URL, DASHBOARD_CATCHER_URL, DASHBOARD_LOGS_URL...

    The dashboard keeps everything in memory and never opens `database_path` (it is inherited,
    and ignored).  It does not ship its own logs by default: its access log would otherwise
    show up in the very log tail it displays, one line per page refresh.
    """

    service_name: ClassVar[str] = "dashboard"

    port: int = setting(DEFAULT_PORTS["dashboard"], help="HTTP port")
    catcher_url: str = setting(f"http://127.0.0.1:{DEFAULT_PORTS['catcher']}", help="SMTP catcher, for the inbox")
    logs_url: str = setting(f"http://127.0.0.1:{DEFAULT_PORTS['logs']}", help="logs service, for the live tail")
    traces_url: str = setting(
        "", help="trace viewer (Zipkin) the page links each traced item to; empty: no trace links"
    )
    refresh_interval: float = setting(2.0, help="seconds between two snapshots of the cluster")
    poll_timeout: float = setting(10.0, help="seconds a snapshot may take before it counts as failed")
    history_points: int = setting(150, help="snapshots kept for the rate and lag charts")
    rate_window: float = setting(
        20.0, help="seconds of offsets a rate is measured over (producers and commits come in bursts)"
    )
    metrics_topic: str = setting("analytics.metrics", help="compacted topic of the analytics job's metrics")
    metrics_window_minutes: int = setting(60, help="minutes of metric windows kept, back from the newest")
    log_shipping: bool = setting(False, help="ship own logs to the logs.* topics")
    # Sign-in (services.dashboard.login): None leaves the dashboard open.
    users_file: Path | None = None
    session_key: str | None = secret(help="signs session cookies; random per process when unset")
    session_hours: float = setting(8.0, help="hours a sign-in lasts")
    login_throttle_max_s: float = setting(
        30.0,
        minimum=0,
        help="failed logins: the longest a login is then refused unchecked, per user and address, per address"
        " and per user (docs/security.md; 0: no throttle)",
    )
    # API keys the dashboard presents to the catcher and the logs service when they need one.
    catcher_token: str | None = secret()
    logs_token: str | None = secret()

    def check(self) -> None:
        problems = [
            f"{self.env_name(name)}: must be positive"
            for name in ("refresh_interval", "poll_timeout", "metrics_window_minutes")
            if getattr(self, name) <= 0
        ]
        if self.history_points < 2:
            problems.append(f"{self.env_name('history_points')}: must be at least 2 (a rate needs two points)")
        if not 0 <= self.port < 65536:
            problems.append(f"{self.env_name('port')}: must be a TCP port")
        urls = ["catcher_url", "logs_url", "registry_url"] + (["traces_url"] if self.traces_url else [])
        for name in urls:
            problem = _url_problem(getattr(self, name))
            if problem:
                problems.append(f"{self.env_name(name)}: {problem}")
        if not _TOPIC_NAME.fullmatch(self.metrics_topic) or self.metrics_topic in (".", ".."):
            problems.append(f"{self.env_name('metrics_topic')}: not a valid topic name")
        servers = [s.strip() for s in self.bootstrap_servers.split(",") if s.strip()]
        if not servers or not all(_HOST_PORT.fullmatch(s) for s in servers):
            problems.append(f"{self.env_name('bootstrap_servers')}: must be a comma list of HOST:PORT")
        if self.users_file is not None:
            try:
                Users.load(self.users_file)
            except UsersFileError as e:
                problems.append(f"{self.env_name('users_file')}: {e}")
        if self.session_hours <= 0:
            problems.append(f"{self.env_name('session_hours')}: must be positive")
        if problems:
            raise ConfigError(problems)

    @property
    def trace_link(self) -> str | None:
        """Where the viewer shows one trace, `{trace_id}` standing for its id (Zipkin's UI:
        /zipkin/traces/<id>); None without a viewer."""
        if not self.traces_url:
            return None
        return self.traces_url.rstrip("/") + "/zipkin/traces/{trace_id}"


def _url_problem(url: str) -> str | None:
    """What is wrong with an http(s) base URL, or None."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as e:
        return f"not a URL ({e})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"must be an http:// or https:// URL with a host, got {url!r}"
    return None
