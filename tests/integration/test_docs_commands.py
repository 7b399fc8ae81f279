"""Every shell block of README.md and docs/ (```sh, ```bash, ```shell, ```console fences and
indented blocks): each command line checked against the real parsers (the `streamshop` CLI's,
the Makefile's targets, a loadtest module's own, pytest's markers, the compose file's profiles;
tests/support/doc_commands.py), and a chosen few run for real here, on ephemeral ports.

Each block is named in RUN_HERE or in NOT_RUN with why; a block of the documents named in
neither, or a name that matches no block any more, fails, so a new or changed example is seen.
The README's Docker commands run in the compose tier (tests/compose/test_readme_docker.py)."""

from __future__ import annotations

import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from kit.ports import free_port
from streamshop import postgres
from tests.support import processes
from tests.support.doc_commands import check_command, check_loadtest, command_name
from tests.support.docblocks import Block, documents, shell_blocks
from tests.support.harness import REPO, ThreadBroker
from tests.support.kafka_clients import confluent_produce, create_topic

BLOCKS = [block for document in documents() for block in shell_blocks(document)]
VENV_BIN = str(Path(sys.executable).parent)

COMPOSE_TIER = "needs a Docker engine and images: the compose tier builds and runs them"
JVM = "needs a JVM (Apache Kafka's or Spark's): the kafka and spark tiers run these commands"
STACK = "needs the whole stack on its default ports (long-running until Ctrl-C)"

# Blocks run for real below, each by the test named.  A block is named by its file and what its
# first two command lines run (`command_name`: options and values left out, so that an option
# added to an example does not rename it); blocks of one name share their entry.
POSTGRES_EXAMPLE = "docs/services.md: streamshop postgres start | streamshop orders"
USERS_EXAMPLE = "docs/broker.md: streamshop broker users | streamshop broker users"
CONSUMER_PROTOCOL_EXAMPLE = "docs/broker.md: streamshop consume | streamshop groups describe"
RUN_HERE = {
    POSTGRES_EXAMPLE: "test_the_postgresql_example_serves_orders_from_its_database",
    USERS_EXAMPLE: "test_the_broker_users_example_creates_and_lists_a_user",
    CONSUMER_PROTOCOL_EXAMPLE: "test_the_consumer_protocol_example_joins_with_kip_848",
}

# Blocks not run here, and why; their syntax is still checked.
NOT_RUN = {
    "README.md: make demo | make test": "long-running: the whole stack until Ctrl-C, and every test tier",
    "README.md: make docker | docker compose up": COMPOSE_TIER + " (test_readme_docker)",
    "README.md: make docker-images | docker compose": COMPOSE_TIER + " (test_readme_docker)",
    "README.md: make test-fast | make lint": "test tiers, lint, re-resolving the lock, benchmarks: minutes each",
    "docs/analytics.md: streamshop analytics run | streamshop analytics replay": "a synopsis; " + JVM,
    "docs/analytics.md: streamshop spark-cluster start | streamshop analytics run": JVM,
    "docs/analytics.md: streamshop analytics pack | streamshop analytics run": (
        "packs the whole virtualenv (minutes), then " + JVM
    ),
    "docs/broker.md: streamshop broker": "a long-running server on fixed ports (the TLS one with keystores made first)",
    "docs/broker.md: .venv/bin/streamshop broker verify": "a synopsis, over the data of a stack that ran",
    "docs/broker.md: streamshop groups | streamshop groups": "a synopsis, against the stack's broker and groups",
    "docs/faults.md: .venv/bin/python -m pytest | .venv/bin/python -m pytest": "the fault tier: minutes",
    "docs/operations.md: streamshop up | make demo": "a synopsis; " + STACK,
    "docs/operations.md: streamshop topics | streamshop topics": (
        "against the stack's broker and registry, its topics and transactions"
    ),
    "docs/operations.md: .venv/bin/streamshop kafka-cluster start | .venv/bin/streamshop kafka-cluster status": JVM,
    "docs/operations.md: .venv/bin/streamshop kafka-cluster start | .venv/bin/streamshop scenario leader-kill": JVM,
    "docs/operations.md: .venv/bin/streamshop kafka-cluster start | .venv/bin/streamshop up": JVM + "; " + STACK,
    "docs/operations.md: .venv/bin/streamshop kafka-tool kafka-topics | "
    ".venv/bin/streamshop kafka-tool kafka-consumer-groups": JVM,
    "docs/operations.md: make docker | docker compose up": COMPOSE_TIER,
    "docs/operations.md: make docker-images | docker compose": COMPOSE_TIER,
    "docs/operations.md: make load | python -m locust": "a load test of 60 s against a stack; Locust's UI until Ctrl-C",
    "docs/security.md: streamshop up": STACK,
    "docs/security.md: export | streamshop demo": "against a running secured stack (its credentials file)",
    "docs/security.md: docker compose | docker compose exec": COMPOSE_TIER,
    "docs/security.md: streamshop kafka-cluster start | streamshop up": JVM + "; " + STACK,
}


def key(block: Block) -> str:
    return f"{block.path}: {' | '.join(command_name(c) for c in block.commands()[:2])}"


def test_every_shell_block_is_run_here_or_says_why_not() -> None:
    keys = Counter(key(block) for block in BLOCKS)
    assert RUN_HERE.keys() & NOT_RUN.keys() == set()
    unclassified = sorted(keys.keys() - RUN_HERE.keys() - NOT_RUN.keys())
    assert unclassified == [], "blocks neither run here nor in NOT_RUN with a reason"
    stale = sorted((RUN_HERE.keys() | NOT_RUN.keys()) - keys.keys())
    assert stale == [], "names of blocks the documents no longer have"
    for name, test in RUN_HERE.items():
        assert keys[name] == 1, f"{name}: one block of that name is run by {test}"
        assert callable(globals().get(test)), test


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.path}:{b.line}" for b in BLOCKS])
def test_every_documented_command_parses(block: Block) -> None:
    commands = block.commands()
    assert commands, f"{block.path}:{block.line}: a shell block without a command"
    for command in commands:
        check_command(command, f"{block.path}:{block.line}: {command}")


# `python -m loadtest.X ...` in the text as well as in blocks (the benchmarks' commands).
LOADTEST = re.compile(r"`(?:\.venv/bin/)?python -m (loadtest\.\w+)([^`]*)`")


def test_every_documented_loadtest_command_parses() -> None:
    found = [
        (document.relative_to(REPO), match.group(1), match.group(2))
        for document in documents()
        for match in LOADTEST.finditer(document.read_text())
    ]
    assert len({module for _, module, _ in found}) >= 10, found
    for document, module, rest in found:
        check_loadtest(module, shlex.split(rest), f"{document}: python -m {module}{rest}")


def block_of(name: str) -> Block:
    (block,) = [b for b in BLOCKS if key(b) == name]
    return block


def shell(command: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`command` as typed in a shell whose PATH starts with the project's virtualenv."""
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env={**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", **(env or {})},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except OSError:
        return None


def test_the_postgresql_example_serves_orders_from_its_database(tmp_path: Path, broker: ThreadBroker) -> None:
    """docs/services.md: `streamshop postgres start --databases orders` prints the URL of the
    database orders, in the form the next line shows; `streamshop orders` with that URL serves."""
    start, serve = block_of(POSTGRES_EXAMPLE).commands()
    # Not under pytest's base directory: a pytest session starting meanwhile (another checkout's)
    # takes back its search bit, which the server's own user needs when the run is root's.
    server_dir = Path(tempfile.mkdtemp(prefix="streamshop-docs-pg-")) / "postgres"
    started = shell(f"{start} --dir {server_dir}", tmp_path)
    try:
        assert started.returncode == 0, started.stderr[-2000:]
        urls = re.findall(r"postgresql://\S+", started.stdout)
        variable, template = serve.split()[0].split("=", 1)
        assert variable == "ORDERS_DATABASE_URL", serve
        pattern = re.escape(template).replace("PASSWORD", "[^@:/]+").replace("PORT", r"\d+")
        url = next((u for u in urls if re.fullmatch(pattern, u)), None)
        assert url is not None, f"`{start}` printed no URL of the form {template}:\n{started.stdout}"

        # The example's command with the URL it printed, on this test's ports and broker.
        port = free_port()
        env = {"ORDERS_PORT": str(port), "ORDERS_BOOTSTRAP_SERVERS": broker.bootstrap, "PYTHONUNBUFFERED": "1"}
        tokens = shlex.split(serve.replace(template, shlex.quote(url)))
        leading = list(itertools.takewhile(lambda t: re.match(r"^[A-Z_]+=", t) is not None, tokens))
        assignments = dict(t.split("=", 1) for t in leading)
        argv = tokens[len(leading) :]
        log = (tmp_path / "orders.log").open("w")
        path = f"{VENV_BIN}:{os.environ['PATH']}"
        proc = subprocess.Popen(
            [shutil.which(argv[0], path=path) or argv[0], *argv[1:]],
            cwd=tmp_path,
            env={**os.environ, "PATH": path, **assignments, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            while http_status(f"http://127.0.0.1:{port}/healthz") != 200:
                assert proc.poll() is None, (tmp_path / "orders.log").read_text()[-3000:]
                time.sleep(0.2)
            # Its tables are in the database the URL names.
            opened = (tmp_path / "orders.log").read_text()
            assert re.search(r'"target":"127\.0\.0\.1:\d+/orders".*"event":"database migrated"', opened), opened
        finally:
            processes.stop(proc)
            log.close()
    finally:
        # A shutdown checkpoint on a busy disk may take more than pg_ctl's usual minute.
        postgres.stop(server_dir, timeout=300)
        shutil.rmtree(server_dir.parent)


def test_the_broker_users_example_creates_and_lists_a_user(tmp_path: Path) -> None:
    """docs/broker.md: the first user made offline in a broker's data directory, then listed."""
    make, listing = block_of(USERS_EXAMPLE).commands()
    (tmp_path / "admin.password").write_text("an-admin-password\n")
    made = shell(make, tmp_path)
    assert made.returncode == 0, made.stderr[-2000:]
    listed = shell(listing, tmp_path)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert re.search(r"^admin\s+SCRAM-SHA-256.*SCRAM-SHA-512", listed.stdout, re.MULTILINE), listed.stdout


def test_the_consumer_protocol_example_joins_with_kip_848(tmp_path: Path, broker: ThreadBroker) -> None:
    """docs/broker.md: `streamshop consume ... -X group.protocol=consumer` joins group g1 with the
    consumer group protocol (KIP-848), as `streamshop groups describe g1` shows while it runs."""
    consume, describe = block_of(CONSUMER_PROTOCOL_EXAMPLE).commands()
    create_topic(broker.bootstrap, "orders", 2)
    confluent_produce(broker.bootstrap, "orders", [{"value": b"an order"}])
    # The example's commands as typed, against this test's broker (the CLI's bootstrap variable).
    env = {"STREAMSHOP_BOOTSTRAP_SERVERS": broker.bootstrap}
    output = tmp_path / "consume.out"
    with output.open("w") as out:
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {consume}"],
            cwd=tmp_path,
            env={**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            # The record read back: the member joined and was given the partitions.
            while "an order" not in output.read_text():
                assert proc.poll() is None, output.read_text()[-3000:]
                time.sleep(0.2)
            described = shell(describe, tmp_path, env)
            assert described.returncode == 0, described.stderr[-2000:]
            head = described.stdout.splitlines()[0]
            assert re.search(r"^Group: g1 .*protocol: consumer/uniform .*members: 1 ", head), described.stdout
        finally:
            processes.stop(proc, grace=30)
