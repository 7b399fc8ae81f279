"""`serve_app` (kit.process) in a real process: the ready line with the bound port
and the fields the app announced, then a graceful shutdown on SIGTERM or SIGINT."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from streamshop.broker_process import parse_service_ready_line
from tests.support.harness import REPO


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_serve_app_prints_the_bound_port_and_fields_then_cleans_up_on_a_signal(stop: signal.Signals) -> None:
    env = {**os.environ, "READY_DEMO_PORT": "0", "READY_DEMO_LOG_FORMAT": "json", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.ready_app"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        ready = parse_service_ready_line(line)
        assert ready is not None, line
        assert ready.name == "ready-demo"
        assert ready.fields == {"smtp": "127.0.0.1:2525"}
        host, port = ready.url.removeprefix("http://").split(":")
        assert host == "127.0.0.1"
        assert int(port) > 0
        with urllib.request.urlopen(f"{ready.url}/healthz", timeout=10) as response:
            assert json.load(response)["service"] == "ready-demo"
        proc.send_signal(stop)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err
    assert out == "cleaned up\n"


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_during_startup_stops_the_service_at_once(tmp_path: Path, stop: signal.Signals) -> None:
    """The orders service starts against a "broker" that accepts connections and never answers
    (a listening socket nobody accepts on: a hung or firewalled broker), so its startup waits on
    the Kafka client's timeouts.  SIGTERM (`streamshop up` stopping) or Ctrl-C must end it now,
    cleanly, as `web.run_app` did, not once the client gives up about 40 s later."""
    with socket.socket() as blackhole:
        blackhole.bind(("127.0.0.1", 0))
        blackhole.listen(16)
        env = {
            **os.environ,
            "ORDERS_BOOTSTRAP_SERVERS": f"127.0.0.1:{blackhole.getsockname()[1]}",
            "ORDERS_PORT": "0",
            "ORDERS_DATABASE_PATH": str(tmp_path / "orders.db"),
            "ORDERS_LOG_SHIPPING": "false",
            "ORDERS_LOG_FORMAT": "json",
            "PYTHONUNBUFFERED": "1",
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamshop.cli", "orders"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # The service's Kafka client has connected: it is inside its startup now.
            readable, _, _ = select.select([blackhole], [], [], 30)
            assert readable, "the service never connected to the broker address"
            time.sleep(0.5)
            proc.send_signal(stop)
            out, err = proc.communicate(timeout=10)
        finally:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    assert "ready on" not in out
    assert "Traceback" not in err


def test_a_service_whose_brokers_do_not_answer_exits_with_one_line_naming_them(tmp_path: Path) -> None:
    with socket.socket() as unused:  # bound, never listening: connections to it are refused
        unused.bind(("127.0.0.1", 0))
        bootstrap = f"127.0.0.1:{unused.getsockname()[1]}"
        done = subprocess.run(
            [sys.executable, "-m", "streamshop.cli", "orders", "--port", "0"],
            cwd=REPO,
            env={**os.environ, "ORDERS_BOOTSTRAP_SERVERS": bootstrap, "ORDERS_DATABASE_PATH": str(tmp_path / "o.db")},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        f"streamshop orders: cannot reach the Kafka brokers at {bootstrap} "
        "(set ORDERS_BOOTSTRAP_SERVERS to where they listen)"
    )
