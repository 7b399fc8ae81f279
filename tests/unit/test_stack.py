"""The pure parts of `streamshop up` and `streamshop demo`: ready lines, the children's
environments (read back by the services' own settings classes), start levels, restart backoff,
secrets, stack.json, the URL table, prefixed output, percentiles and the progress bar."""

from __future__ import annotations

import base64
import io
import json
import os
import random
import signal
import stat
from pathlib import Path
from typing import Any

import pytest

from kit.process import base_url, ready_line
from services.common.config import DEFAULT_PORTS, ServiceConfig
from services.orders.domain import CREATE_ORDER, NewOrder, order_total
from streamshop.broker_process import parse_service_ready_line
from streamshop.clients import CommandError
from streamshop.stack.console import Console, use_color
from streamshop.stack.demo import Progress, Report, Stats, Targets, Traffic, percentile
from streamshop.stack.plan import (
    CHILDREN,
    Backoff,
    ChildDef,
    Launch,
    LaunchError,
    Row,
    Secrets,
    StackContext,
    levels,
    select,
    url_table,
)
from streamshop.stack.state import read_stack, running_stack, write_stack
from streamshop.stack.supervisor import _describe_exit, default_data_dir, exit_reason, last_words

BY_NAME = {c.name: c for c in CHILDREN}
SECRETS = Secrets("hash-key", base64.b64encode(bytes(range(32))).decode(), "k7")
ENDPOINTS = {
    "broker": {"bootstrap": "127.0.0.1:19092", "admin": "http://127.0.0.1:19644"},
    "registry": {"http": "http://127.0.0.1:18081"},
    "catcher": {"http": "http://127.0.0.1:18025", "smtp": "127.0.0.1:11025"},
}


def context(tmp_path: Path, endpoints: dict[str, dict[str, str]] | None = None) -> StackContext:
    return StackContext(tmp_path, "127.0.0.1", SECRETS, "json", ENDPOINTS if endpoints is None else endpoints)


def settings(name: str, config_cls: type[ServiceConfig], tmp_path: Path, port: int = 0) -> Any:
    """`config_cls` as the child `name` started by `up` would load it."""
    launch = BY_NAME[name].launch(context(tmp_path), {"http": port, "smtp": 0})
    assert launch.command[-1] == name
    return config_cls.from_env(launch.environment({}))


# -- ready lines ------------------------------------------------------------------------------------


def test_service_ready_line_round_trips_with_extra_fields() -> None:
    line = ready_line("catcher", "http://127.0.0.1:8025", {"smtp": "127.0.0.1:1025", "mode": "memory"})
    assert line == "streamshop catcher ready on http://127.0.0.1:8025 smtp=127.0.0.1:1025 mode=memory"
    ready = parse_service_ready_line(line + "\n")
    assert ready is not None
    assert (ready.name, ready.url, ready.fields) == (
        "catcher",
        "http://127.0.0.1:8025",
        {"smtp": "127.0.0.1:1025", "mode": "memory"},
    )


def test_service_ready_line_parser_maps_wildcards_to_loopback_and_ignores_other_lines() -> None:
    ready = parse_service_ready_line("streamshop orders ready on http://0.0.0.0:8001")
    assert ready is not None
    assert ready.url == "http://127.0.0.1:8001"
    assert ready.fields == {}
    assert parse_service_ready_line("streamshop broker ready on 127.0.0.1:9092 admin http://x:1 data d") is None
    assert parse_service_ready_line('{"event": "streamshop orders ready on http://127.0.0.1:1"}') is None
    assert parse_service_ready_line("streamshop orders ready on http://127.0.0.1:1 smtp") is None


@pytest.mark.parametrize(("key", "value"), [("smtp", "a b"), ("smtp", ""), ("bad key", "x"), ("", "x")])
def test_ready_line_refuses_fields_that_would_not_parse_back(key: str, value: str) -> None:
    with pytest.raises(ValueError, match="ready-line field"):
        ready_line("catcher", "http://127.0.0.1:1", {key: value})


def test_base_url_gives_an_address_a_client_can_use() -> None:
    assert base_url("0.0.0.0", 8001) == "http://127.0.0.1:8001"
    assert base_url("::", 8001) == "http://127.0.0.1:8001"
    assert base_url("::1", 8001) == "http://[::1]:8001"
    assert base_url("10.0.0.5", 80) == "http://10.0.0.5:80"


def test_children_read_their_ready_lines_and_keep_the_announced_ports() -> None:
    broker = BY_NAME["broker"].parse_ready("streamshop broker ready on 0.0.0.0:40001 admin http://0.0.0.0:40002 data d")
    assert broker is not None
    assert broker.urls == {"bootstrap": "127.0.0.1:40001", "admin": "http://127.0.0.1:40002"}
    assert broker.ports == {"kafka": 40001, "admin": 40002}
    registry = BY_NAME["registry"].parse_ready("streamshop registry ready on http://127.0.0.1:40003")
    assert registry is not None
    assert registry.ports == {"http": 40003}
    catcher = BY_NAME["catcher"].parse_ready(
        ready_line("catcher", "http://127.0.0.1:40004", {"smtp": "127.0.0.1:40005"})
    )
    assert catcher is not None
    assert catcher.urls == {"http": "http://127.0.0.1:40004", "smtp": "127.0.0.1:40005"}
    assert catcher.ports == {"http": 40004, "smtp": 40005}
    assert BY_NAME["orders"].parse_ready("orders starting") is None


# -- environments -----------------------------------------------------------------------------------


def test_orders_otp_and_logs_read_the_stack_settings(tmp_path: Path) -> None:
    from services.logs.config import LogsConfig
    from services.orders.config import OrdersConfig
    from services.otp.config import OtpConfig

    orders = settings("orders", OrdersConfig, tmp_path, port=18001)
    assert (orders.listen, orders.port) == ("127.0.0.1", 18001)
    assert orders.bootstrap_servers == "127.0.0.1:19092"
    assert orders.registry_url == "http://127.0.0.1:18081"
    assert orders.database_path == tmp_path / "orders" / "orders.db"
    assert orders.log_format == "json"

    otp = settings("otp", OtpConfig, tmp_path)
    otp.check()
    assert otp.hash_key == "hash-key"
    assert otp.seal_key_bytes() == bytes(range(32))
    assert otp.seal_key_id == "k7"

    logs = settings("logs", LogsConfig, tmp_path)
    assert logs.database_path == tmp_path / "logs" / "logs.db"


def test_senders_share_the_otp_seal_key_and_reach_the_catcher(tmp_path: Path) -> None:
    from services.notify.config import EmailSenderConfig, SmsSenderConfig

    sms = settings("sms-sender", SmsSenderConfig, tmp_path)
    assert (sms.seal_key, sms.seal_key_id) == (SECRETS.seal_key, "k7")
    assert (sms.provider, sms.webhook_url) == ("webhook", "http://127.0.0.1:18025/sms")
    email = settings("email-sender", EmailSenderConfig, tmp_path)
    assert (email.seal_key, email.seal_key_id) == (SECRETS.seal_key, "k7")
    assert (email.smtp_host, email.smtp_port) == ("127.0.0.1", 11025)
    assert email.database_path == tmp_path / "email-sender" / "email-sender.db"


def test_the_email_sender_is_a_share_group_on_the_bundled_broker_only(tmp_path: Path) -> None:
    from services.notify.config import EmailSenderConfig, SmsSenderConfig

    bundled = ENDPOINTS  # the bundled broker announces its admin API
    external = {**ENDPOINTS, "broker": {"bootstrap": ENDPOINTS["broker"]["bootstrap"]}}
    for endpoints, expected in ((bundled, "share"), (external, "consumer")):
        launch = BY_NAME["email-sender"].launch(context(tmp_path, endpoints), {"http": 0, "smtp": 0})
        assert EmailSenderConfig.from_env(launch.environment({})).group_type == expected
    assert settings("sms-sender", SmsSenderConfig, tmp_path).group_type == "consumer"


def test_catcher_binds_the_ports_it_is_given_and_needs_no_broker(tmp_path: Path) -> None:
    from services.catcher.config import CatcherConfig

    launch = BY_NAME["catcher"].launch(context(tmp_path, {}), {"http": 18025, "smtp": 0})
    config = CatcherConfig.from_env(launch.environment({}))
    assert (config.port, config.smtp_port) == (18025, 0)
    assert not any("BOOTSTRAP" in name for name in launch.env)


def test_a_missing_announcement_is_a_launch_error_naming_it(tmp_path: Path) -> None:
    endpoints = {**ENDPOINTS, "catcher": {"http": "http://127.0.0.1:18025"}}
    with pytest.raises(LaunchError, match="needs the smtp address of catcher"):
        BY_NAME["email-sender"].launch(context(tmp_path, endpoints), {"http": 0})


def test_user_environment_overrides_defaults_but_not_what_the_stack_sets() -> None:
    launch = Launch(["x"], {"ORDERS_PORT": "1"}, {"ORDERS_LOG_FORMAT": "json"})
    env = launch.environment({"ORDERS_LOG_FORMAT": "console", "ORDERS_PORT": "9", "PATH": "/bin"})
    assert env == {"ORDERS_LOG_FORMAT": "console", "ORDERS_PORT": "1", "PATH": "/bin"}
    assert launch.environment({})["ORDERS_LOG_FORMAT"] == "json"


def test_default_ports_are_the_design_ports() -> None:
    assert BY_NAME["broker"].ports == {"kafka": 9092, "admin": 9644}
    assert BY_NAME["registry"].ports == {"http": 8081}
    assert BY_NAME["catcher"].ports == {"http": DEFAULT_PORTS["catcher"], "smtp": 1025}
    assert {name: BY_NAME[name].ports["http"] for name in ("orders", "otp", "logs")} == {
        "orders": 8001,
        "otp": 8002,
        "logs": 8003,
    }


# -- order ------------------------------------------------------------------------------------------


def names(groups: list[list[ChildDef]]) -> list[list[str]]:
    return [[c.name for c in group] for group in groups]


def test_children_start_once_what_they_need_is_up() -> None:
    assert names(levels(CHILDREN)) == [
        ["broker", "catcher"],
        ["registry"],
        ["orders", "otp", "logs", "sms-sender", "email-sender", "analytics"],
        ["dashboard"],
    ]


def test_without_a_child_leaves_out_everything_that_needs_it() -> None:
    without_catcher = ["broker", "registry", "orders", "otp", "logs", "analytics"]
    assert [c.name for c in select(CHILDREN, ["catcher"])] == without_catcher
    assert "dashboard" not in [c.name for c in select(CHILDREN, ["logs"])]
    assert [c.name for c in select(CHILDREN, ["broker"])] == ["catcher"]
    assert len(select(CHILDREN, [])) == len(CHILDREN)
    with pytest.raises(CommandError, match="no child named nope"):
        select(CHILDREN, ["nope"])


def test_levels_refuse_a_cycle_and_a_missing_dependency() -> None:
    a = ChildDef("a", ("b",), {}, BY_NAME["orders"].launch, BY_NAME["orders"].parse_ready)
    b = ChildDef("b", ("a",), {}, BY_NAME["orders"].launch, BY_NAME["orders"].parse_ready)
    with pytest.raises(ValueError, match="cycle"):
        levels([a, b])
    with pytest.raises(ValueError, match="a needs b"):
        levels([a])


def test_nothing_may_need_an_optional_child_and_only_the_analytics_job_is_one() -> None:
    optional = ChildDef("opt", (), {}, BY_NAME["orders"].launch, BY_NAME["orders"].parse_ready, optional=True)
    needs_it = ChildDef("x", ("opt",), {}, BY_NAME["orders"].launch, BY_NAME["orders"].parse_ready)
    with pytest.raises(ValueError, match="x needs opt, which is optional"):
        levels([optional, needs_it])
    assert [c.name for c in CHILDREN if c.optional] == ["analytics"]
    assert [c.name for c in CHILDREN if c.jvm] == ["analytics"]


def test_each_child_stops_within_its_own_grace() -> None:
    graces = {c.name: c.stop_grace for c in CHILDREN}
    assert graces.pop("broker") == 10.0  # closes its logs
    assert graces.pop("analytics") == 30.0  # finishes its batch, then Spark's shutdown, on a saturated host too
    assert set(graces.values()) == {5.0}  # the registry and every service


def test_a_stack_on_another_cluster_gets_a_data_directory_of_its_own() -> None:
    assert default_data_dir(None) == Path("data/stack")
    assert default_data_dir("127.0.0.1:19092,127.0.0.1:19093") == Path("data/stack-127.0.0.1-19092")
    assert default_data_dir(" kafka-1.example:9092 ") == Path("data/stack-kafka-1.example-9092")


def test_a_childs_last_words_are_its_last_error_line_not_a_stack_frame() -> None:
    lines = [
        '{"event": "config", "level": "info"}',
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "py4j.protocol.Py4JJavaError: An error occurred while calling o42.start.",
        "\tat org.apache.spark.api.python.PythonWorkerFactory.createSimpleWorker(PythonWorkerFactory.scala:250)",
        "\tat java.base/java.lang.Thread.run(Thread.java:840)",
    ]
    assert last_words(lines) == "py4j.protocol.Py4JJavaError: An error occurred while calling o42.start."
    json_error = '{"event": "cannot reach the broker", "error": "timed out", "level": "error"}'
    assert last_words([*lines, json_error]) == "cannot reach the broker: timed out"
    assert last_words(["starting", "still starting"]) == "still starting"
    access_log = '{"event": "GET /healthz 200", "level": "info"}'
    assert last_words(["starting", access_log], errors_only=True) == ""  # killed: not its last word
    assert last_words([*lines, access_log], errors_only=True).startswith("py4j.protocol.Py4JJavaError")
    long = last_words(["x" * 1000])
    assert long.endswith("…")
    assert len(long) == 240
    assert last_words([]) == ""


def access_line(method: str, path: str, status: int, level: str = "info") -> str:
    """A line of the services' access log, as kit.middleware writes it."""
    return json.dumps(
        {
            "event": "http request",
            "method": method,
            "path": path,
            "status": status,
            "duration_ms": 3.2,
            "remote": "127.0.0.1",
            "user_agent": "Python/3.11 aiohttp/3.12",
            "level": level,
            "logger": "services.common.access",
            "timestamp": "2026-12-07T10:00:00.000000Z",
        }
    )


def test_a_killed_childs_reason_is_the_signal_not_its_last_access_log_line(tmp_path: Path) -> None:
    log = tmp_path / "orders.log"
    killed = f"exited ({_describe_exit(-signal.SIGKILL)})"
    assert killed == "exited (killed by SIGKILL)"
    served = [
        '{"event": "orders ready", "level": "info"}',
        access_line("POST", "/orders", 201),
        access_line("POST", "/orders/0c9e/status", 409, "warning"),
        access_line("GET", "/orders/0c9e", 200),
    ]
    assert exit_reason("orders", killed, served, log) == f"orders exited (killed by SIGKILL); see {log}"
    # An error it wrote before the kill is quoted, whatever it served after.
    failing = [*served[:2], '{"event": "relay failed", "error": "timed out", "level": "error"}', *served[2:]]
    reason = exit_reason("orders", killed, failing, log)
    assert reason == f"orders exited (killed by SIGKILL): relay failed: timed out; see {log}"
    # A child that exited by itself chose its last line: it is quoted.
    assert exit_reason("orders", "exited (status 1)", served, log).startswith("orders exited (status 1): http request")


# -- backoff ----------------------------------------------------------------------------------------


def test_backoff_doubles_to_its_maximum_and_resets_after_a_long_uptime() -> None:
    backoff = Backoff()
    assert [backoff.next_delay(1.0) for _ in range(9)] == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    assert backoff.next_delay(59.9) == 30
    assert backoff.next_delay(60.0) == 0.5  # it had been healthy for a minute
    assert backoff.next_delay(0.1) == 1
    assert Backoff().next_delay(0) == 0.5
    huge = Backoff(failures=10_000)
    assert huge.next_delay(0) == 30


# -- secrets, stack.json ----------------------------------------------------------------------------


def test_secrets_are_made_once_private_and_then_reused(tmp_path: Path) -> None:
    path = tmp_path / "secrets.json"
    first = Secrets.load_or_create(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(base64.b64decode(first.seal_key)) == 32
    assert len(first.otp_hash_key) >= 32
    assert Secrets.load_or_create(path) == first
    assert Secrets.load_or_create(tmp_path / "other.json") != first
    assert not list(tmp_path.glob("*.tmp"))


def test_a_damaged_secrets_file_is_an_error_not_new_keys(tmp_path: Path) -> None:
    path = tmp_path / "secrets.json"
    path.write_text("{")
    with pytest.raises(CommandError, match="remove it to make new keys"):
        Secrets.load_or_create(path)
    assert path.read_text() == "{"


def test_stack_file_is_replaced_whole_and_running_only_while_its_pid_lives(tmp_path: Path) -> None:
    document = {"version": 1, "state": "running", "pid": os.getpid(), "children": {}}
    write_stack(tmp_path / "stack.json", document)
    assert read_stack(tmp_path) == document
    assert running_stack(tmp_path) == document
    assert [p.name for p in tmp_path.iterdir()] == ["stack.json"]

    write_stack(tmp_path / "stack.json", {**document, "state": "stopped"})
    assert running_stack(tmp_path) is None
    write_stack(tmp_path / "stack.json", {**document, "pid": 2**22 + 12345})  # above pid_max: never alive
    assert running_stack(tmp_path) is None
    assert read_stack(tmp_path / "nowhere") is None
    (tmp_path / "stack.json").write_text('{"version": 99}')
    with pytest.raises(CommandError, match="not a version 1 stack file"):
        read_stack(tmp_path)


# -- output -----------------------------------------------------------------------------------------


def test_url_table_shows_the_main_url_other_endpoints_pid_and_log(tmp_path: Path) -> None:
    rows = [
        Row("broker", {"bootstrap": "127.0.0.1:9092", "admin": "http://127.0.0.1:9644"}, 10, tmp_path / "b.log"),
        Row("catcher", {"http": "http://127.0.0.1:8025", "smtp": "127.0.0.1:1025"}, 11, tmp_path / "c.log"),
        Row("orders", {}, None, Path("/elsewhere/o.log")),
    ]
    lines = url_table(rows, tmp_path).splitlines()
    assert lines[0].split() == ["CHILD", "URL", "ALSO", "PID", "LOG"]
    assert lines[1].split() == ["broker", "127.0.0.1:9092", "admin", "http://127.0.0.1:9644", "10", "b.log"]
    assert lines[2].split() == ["catcher", "http://127.0.0.1:8025", "smtp", "127.0.0.1:1025", "11", "c.log"]
    assert lines[3].split() == ["orders", "-", "/elsewhere/o.log"]


def test_url_table_shows_where_the_analytics_job_runs(tmp_path: Path) -> None:
    """`up --spark-cluster`: the job's row names the master it was submitted to and its web UI,
    as its ready line announced them."""
    ready = BY_NAME["analytics"].parse_ready(
        "streamshop analytics ready: jobs orders,otp,logs, group analytics, data d, results topic r, "
        "trigger 5 s, master spark://127.0.0.1:27077, ui http://127.0.0.1:40405"
    )
    assert ready is not None
    [line] = url_table([Row("analytics", ready.urls, 12, tmp_path / "a.log")], tmp_path).splitlines()[1:]
    assert line.split() == [
        "analytics",
        "master",
        "spark://127.0.0.1:27077",
        "ui",
        "http://127.0.0.1:40405",
        "12",
        "a.log",
    ]


def test_console_pads_names_and_colours_only_when_asked() -> None:
    out = io.StringIO()
    Console(["orders", "email-sender"], out).line("orders", "hello")
    assert out.getvalue() == "orders       | hello\n"
    coloured = io.StringIO()
    console = Console(["orders"], coloured, color=True)
    console.line("orders", "hi")
    console.say("two\nlines")
    assert coloured.getvalue().startswith("\x1b[36morders |\x1b[0m hi\n")
    assert coloured.getvalue().count("up     |") == 2


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_needs_a_terminal_and_no_no_color() -> None:
    assert use_color(Tty(), environ={})
    assert not use_color(Tty(), environ={"NO_COLOR": "1"})
    assert not use_color(Tty(), disabled=True, environ={})
    assert not use_color(io.StringIO(), environ={})


# -- demo -------------------------------------------------------------------------------------------


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50
    assert percentile(values, 0.99) == 99
    assert percentile([7.0], 0.99) == 7
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2


def test_progress_plain_lines_come_at_most_every_interval_and_at_the_end() -> None:
    now = [0.0]
    lines: list[str] = []
    progress = Progress(4, write_line=lines.append, interval=2.0, clock=lambda: now[0])
    progress.advance()
    now[0] = 1.0
    progress.advance(failed=True)
    now[0] = 2.5
    progress.advance()
    progress.advance()
    progress.finish()
    assert [line.split("]")[1].split()[:4] for line in lines] == [
        ["1/4", "flows", "25%", "0"],
        ["3/4", "flows", "75%", "1"],
        ["4/4", "flows", "100%", "1"],
    ]


def test_progress_on_a_terminal_redraws_one_line() -> None:
    stream = Tty()
    progress = Progress(2, stream=stream, clock=lambda: 0.0)
    progress.advance()
    progress.advance()  # within 0.1 s of the last redraw: none
    progress.finish()
    text = stream.getvalue()
    assert text.count("\r") == 2
    assert text.endswith("\n")
    assert "\n" not in text[:-1]
    assert "] 2/2 flows 100%  0 failed" in text.rsplit("\r", 1)[1]


def test_demo_baskets_are_valid_orders_with_the_total_the_service_computes() -> None:
    traffic = Traffic(None, Targets("o", "p", "c"), random.Random(3), 1.0)  # type: ignore[arg-type]
    for _ in range(200):
        currency, items, total = traffic.basket()
        new = NewOrder.from_cleaned(CREATE_ORDER.validate({"customer_id": "c", "currency": currency, "items": items}))
        assert order_total(new.items) == total
        if currency == "JPY":
            assert all("." not in item["unit_price"] for item in items)


def test_demo_targets_come_from_a_running_stack_only() -> None:
    children = {
        "orders": {"urls": {"http": "http://o"}},
        "otp": {"urls": {"http": "http://p"}},
        "catcher": {"urls": {"http": "http://c", "smtp": "h:1"}},
    }
    assert Targets.from_stack({"state": "running", "children": children}) == Targets("http://o", "http://p", "http://c")
    with pytest.raises(CommandError, match="is starting, not running"):
        Targets.from_stack({"state": "starting", "data_dir": "d", "children": children})
    with pytest.raises(CommandError, match="no otp"):
        Targets.from_endpoints({"orders": {"http": "http://o"}})
    assert Targets.from_endpoints({"orders": {"http": "o"}, "otp": {"http": "p"}}).catcher is None


def test_report_lists_failures_and_is_not_ok_with_any() -> None:
    stats = Stats()
    stats.latency["orders.create"] += [10.0, 20.0]
    with pytest.raises(Exception, match="HTTP 500"):
        stats.fail("orders.status", "POST /orders/x/status: HTTP 500")
    report = Report(Targets("o", "p", None), 2, 0, 1.0, stats)
    assert not report.ok
    text = "\n".join(report.lines())
    assert "result: 1 failures" in text
    assert "- orders.status: POST /orders/x/status: HTTP 500" in text
    assert [line.split() for line in report.lines() if "orders." in line and "|" not in line][:2] == [
        ["orders.create", "2", "0", "10.0", "20.0"],
        ["orders.status", "0", "1", "-", "-"],
    ]
    assert Report(Targets("o", "p", None), 0, 0, 1.0, Stats()).ok


def test_analytics_reads_the_stack_broker_registry_and_data_dir(tmp_path: Path) -> None:
    from analytics.settings import AnalyticsConfig
    from streamshop.cli import build_parser

    launch = BY_NAME["analytics"].launch(context(tmp_path), {})
    assert launch.command[-2:] == ["analytics", "run"]
    args = build_parser().parse_args(launch.command[3:])
    config = AnalyticsConfig.from_args(args, launch.environment({}))
    assert (config.bootstrap_servers, config.registry_url) == ("127.0.0.1:19092", "http://127.0.0.1:18081")
    assert config.data_dir == tmp_path / "analytics"
    assert not config.once
    assert config.spark_master == "local[2,4]"


def test_with_a_spark_cluster_the_analytics_job_runs_on_its_master(tmp_path: Path) -> None:
    from dataclasses import replace

    from analytics.settings import AnalyticsConfig
    from streamshop.cli import build_parser

    ctx = replace(context(tmp_path), spark_master="spark://127.0.0.1:27077")
    launch = BY_NAME["analytics"].launch(ctx, {})
    args = build_parser().parse_args(launch.command[3:])
    assert AnalyticsConfig.from_args(args, launch.environment({})).spark_master == "spark://127.0.0.1:27077"


def test_analytics_ready_line_announces_where_the_job_runs_and_serves_nothing() -> None:
    ready = BY_NAME["analytics"].parse_ready(
        "streamshop analytics ready: jobs orders,otp,logs, group analytics, data d, results topic r, "
        "trigger 5 s, master spark://127.0.0.1:7077, ui http://127.0.0.1:4040"
    )
    assert ready is not None
    assert (ready.urls, ready.ports) == ({"master": "spark://127.0.0.1:7077", "ui": "http://127.0.0.1:4040"}, {})
    bare = BY_NAME["analytics"].parse_ready("streamshop analytics ready: jobs orders, group x, master local[2,4]")
    assert bare is not None
    assert bare.urls == {"master": "local[2,4]"}
    assert BY_NAME["analytics"].parse_ready("streamshop orders ready on http://127.0.0.1:1") is None


def test_dashboard_is_told_where_the_catcher_and_logs_are(tmp_path: Path) -> None:
    endpoints = {**ENDPOINTS, "logs": {"http": "http://127.0.0.1:18003"}}
    launch = BY_NAME["dashboard"].launch(context(tmp_path, endpoints), {"http": 0})
    env = launch.environment({})
    assert env["DASHBOARD_CATCHER_URL"] == "http://127.0.0.1:18025"
    assert env["DASHBOARD_LOGS_URL"] == "http://127.0.0.1:18003"
    assert env["DASHBOARD_BOOTSTRAP_SERVERS"] == "127.0.0.1:19092"
    assert BY_NAME["dashboard"].ports == {"http": 8080}


def test_java_is_looked_for_in_java_home_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from streamshop.stack.supervisor import java_found

    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    assert not java_found()
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "java").touch()
    assert java_found()
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert not java_found()
