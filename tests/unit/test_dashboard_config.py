"""The dashboard's settings: DASHBOARD_* variables (the names `streamshop up` and compose set),
defaults, and every invalid value reported at once by name; `streamshop dashboard` is a command."""

from __future__ import annotations

import pytest

from services.common.config import ConfigError
from services.dashboard.config import DashboardConfig
from streamshop.cli import build_parser


def test_defaults_and_the_environment_variables_the_stack_sets() -> None:
    defaults = DashboardConfig()
    assert (defaults.port, defaults.catcher_url, defaults.logs_url) == (
        8080,
        "http://127.0.0.1:8025",
        "http://127.0.0.1:8003",
    )
    assert (defaults.refresh_interval, defaults.history_points, defaults.metrics_topic) == (
        2.0,
        150,
        "analytics.metrics",
    )
    assert defaults.metrics_window_minutes == 60
    assert defaults.log_shipping is False
    defaults.check()
    config = DashboardConfig.from_env(
        {
            "DASHBOARD_PORT": "9090",
            "DASHBOARD_LISTEN": "0.0.0.0",
            "DASHBOARD_BOOTSTRAP_SERVERS": "kafka:9092",
            "DASHBOARD_REGISTRY_URL": "http://registry:8081",
            "DASHBOARD_CATCHER_URL": "http://catcher:8025",
            "DASHBOARD_LOGS_URL": "http://logs:8003",
            "DASHBOARD_REFRESH_INTERVAL": "0.5",
            "DASHBOARD_HISTORY_POINTS": "30",
            "DASHBOARD_METRICS_TOPIC": "analytics.metrics.replay",
            "DASHBOARD_METRICS_WINDOW_MINUTES": "15",
        }
    )
    config.check()
    assert (config.port, config.listen, config.bootstrap_servers, config.registry_url) == (
        9090,
        "0.0.0.0",
        "kafka:9092",
        "http://registry:8081",
    )
    assert (config.catcher_url, config.logs_url) == ("http://catcher:8025", "http://logs:8003")
    assert (config.refresh_interval, config.history_points, config.metrics_window_minutes) == (0.5, 30, 15)
    assert config.metrics_topic == "analytics.metrics.replay"


def test_every_invalid_setting_is_reported_by_its_variable_name() -> None:
    config = DashboardConfig(
        refresh_interval=0,
        poll_timeout=-1,
        history_points=1,
        metrics_window_minutes=0,
        catcher_url="catcher:8025",
        logs_url="ftp://logs",
        registry_url="http://host:99999",
        metrics_topic="bad topic!",
        bootstrap_servers=" ",
    )
    with pytest.raises(ConfigError) as caught:
        config.check()
    named = {problem.split(":")[0] for problem in caught.value.problems}
    assert len(named) == len(caught.value.problems)
    assert named == {
        "DASHBOARD_REFRESH_INTERVAL",
        "DASHBOARD_POLL_TIMEOUT",
        "DASHBOARD_HISTORY_POINTS",
        "DASHBOARD_METRICS_WINDOW_MINUTES",
        "DASHBOARD_CATCHER_URL",
        "DASHBOARD_LOGS_URL",
        "DASHBOARD_REGISTRY_URL",
        "DASHBOARD_METRICS_TOPIC",
        "DASHBOARD_BOOTSTRAP_SERVERS",
    }


@pytest.mark.parametrize("servers", ["kafka", "kafka:", "a:9092,b", "host:port"])
def test_bootstrap_servers_must_each_be_host_and_port(servers: str) -> None:
    with pytest.raises(ConfigError, match="DASHBOARD_BOOTSTRAP_SERVERS"):
        DashboardConfig(bootstrap_servers=servers).check()
    DashboardConfig(bootstrap_servers="a:9092, [::1]:9093,PLAINTEXT://b:9094").check()


def test_streamshop_dashboard_is_a_command_with_a_port_option() -> None:
    args = build_parser().parse_args(["dashboard", "--port", "0"])
    assert args.port == 0
    assert callable(args.func)


def test_the_trace_viewer_is_off_by_default_and_links_to_zipkins_page_of_a_trace() -> None:
    """DASHBOARD_TRACES_URL empty (the default): no trace links; set: Zipkin's UI page of one
    trace, whatever trailing slash the URL has; a URL that is not http(s) is refused by name
    (the page puts the link in an href)."""
    assert DashboardConfig().traces_url == ""
    assert DashboardConfig().trace_link is None
    for url in ("http://127.0.0.1:9411", "http://127.0.0.1:9411/"):
        config = DashboardConfig.from_env({"DASHBOARD_TRACES_URL": url})
        config.check()
        assert config.trace_link == "http://127.0.0.1:9411/zipkin/traces/{trace_id}"
    behind_a_proxy = DashboardConfig.from_env({"DASHBOARD_TRACES_URL": "https://ops.example/tools"})
    assert behind_a_proxy.trace_link == "https://ops.example/tools/zipkin/traces/{trace_id}"
    for bad in ("javascript:alert(1)", "127.0.0.1:9411", "ftp://zipkin:21"):
        with pytest.raises(ConfigError) as raised:
            DashboardConfig(traces_url=bad).check()
        assert [p.split(":")[0] for p in raised.value.problems] == ["DASHBOARD_TRACES_URL"]
