"""`make demo`, as the README has it, on a busy machine: the stack serves before the analytics
job's JVM is ready, the job becomes ready later and commits, the console stays readable, and
Ctrl-C (SIGINT to the terminal's process group) stops every child without SIGKILL."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.harness import REPO
from tests.support.stack import Stack, alive, http

pytestmark = pytest.mark.stack

# CPU-bound processes beside the stack, as a laptop that is also running something else; niced,
# so that in the suite they load the machine without starving the tests running beside this one.
BUSY = 2
NICE = 10
JVM_START_TIMEOUT = 5  # far less than the job's JVM needs on 2 cores: it is reported, not fatal


@pytest.fixture
def busy() -> Iterator[None]:
    loops = [subprocess.Popen(["nice", "-n", str(NICE), sys.executable, "-c", "while True: pass"]) for _ in range(BUSY)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def committed(bootstrap: str, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition("orders", p) for p in range(3)])]
    futures = admin.list_consumer_group_offsets(request, request_timeout=10)
    result = next(iter(futures.values())).result(timeout=15)
    return sum(max(tp.offset, 0) for tp in result.topic_partitions)


def test_make_demo_serves_before_the_analytics_job_is_ready_and_stops_cleanly_on_ctrl_c(
    tmp_path: Path, busy: None
) -> None:
    data = tmp_path / "stack"
    output = tmp_path / "demo.out"
    args = f"--ephemeral-ports --data-dir {data} --jvm-start-timeout {JVM_START_TIMEOUT} --demo-orders 10 --demo-otp 2"
    with output.open("wb") as out:
        # A session of its own, as a terminal's job: Ctrl-C is SIGINT to the whole process group.
        make = subprocess.Popen(
            ["make", "--no-print-directory", "demo", f"VENV={sys.prefix}", f"ARGS={args}"],
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    stack = Stack(make, data, output)
    began = time.monotonic()
    try:
        document = stack.wait_for("running stack", lambda d: d["state"] == "running", within=120)
        serving = time.monotonic() - began
        assert document["children"]["analytics"]["state"] != "ready", "the job was ready before the timeout"
        orders = document["children"]["orders"]["urls"]["http"]
        assert http("GET", orders + "/readyz")[0] == 200

        stack.wait_for("demo traffic", lambda _: "result: OK" in output.read_text(), within=120)
        stack.wait_for("analytics ready", lambda d: d["children"]["analytics"]["state"] == "ready", within=300)
        bootstrap = stack.child("broker")["urls"]["bootstrap"]
        deadline = time.monotonic() + 180
        while (done := committed(bootstrap, "analytics")) < 10 and time.monotonic() < deadline:
            time.sleep(1)
        assert done >= 10, f"the analytics job committed {done} of the demo's orders"
        job = stack.child("analytics")
        assert job["restarts"] == 0, output.read_text()[-3000:]

        up = stack.document()["pid"]  # and every child's pid, for the checks after the stop
        os.killpg(make.pid, signal.SIGINT)
        # make itself ends on the SIGINT (`make: *** ... Interrupt`), as for any target; `up` stops
        # the stack in order and exits.
        assert make.wait(timeout=60) in (0, -signal.SIGINT)
        deadline = time.monotonic() + 60
        while alive(up) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(up), output.read_text()[-3000:]
        assert stack.document()["state"] == "stopped"
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
        for pid in stack.pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)

    text = output.read_text()
    lines = text.splitlines()
    # the job was slow, said so once, and was waited for
    assert re.search(rf"\| analytics was not ready within {JVM_START_TIMEOUT} s: .*; still waiting for it$", text, re.M)
    assert re.search(r"\| analytics ready in [0-9.]+ s: local\[[0-9,]+\]$", text, re.M)  # and where it runs
    # a readable console: the supervisor's and the demo's lines, no child's own output
    others = [line for line in lines if not line.startswith(("up ", "demo ", "make: "))]
    assert others == [next(line for line in lines if "streamshop up --demo" in line)], others[:5]
    assert len(lines) < 120, len(lines)
    # Ctrl-C: every child stopped on its own, none killed
    stops = [line for line in lines if re.search(r"\| \S+ stopped \(", line)]
    assert len(stops) == len(json.loads((data / "stack.json").read_text())["children"]), stops
    assert [line for line in stops if "(status 0)" not in line] == []
    assert "killing it" not in text
    assert [pid for pid in stack.pids if alive(pid)] == []
    print(f"stack serving after {serving:.1f} s with {BUSY} busy processes beside it")
