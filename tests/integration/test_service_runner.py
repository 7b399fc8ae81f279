"""`serve_app` (services.common.runner) in a real process: the ready line with the bound port
and the fields the app announced, then a graceful shutdown on SIGTERM or SIGINT."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request

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
