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
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from kit.ports import free_port
from streamshop import postgres
from tests.support import processes
from tests.support.doc_commands import check_command, check_loadtest
from tests.support.docblocks import Block, documents, shell_blocks
from tests.support.harness import REPO, ThreadBroker

BLOCKS = [block for document in documents() for block in shell_blocks(document)]
VENV_BIN = str(Path(sys.executable).parent)

COMPOSE_TIER = "needs a Docker engine and images: the compose tier builds and runs them"
JVM = "needs a JVM (Apache Kafka's or Spark's): the kafka and spark tiers run these commands"
STACK = "needs the whole stack on its default ports (long-running until Ctrl-C)"

# Blocks run for real below, each by the test named.
POSTGRES_EXAMPLE = (
    "docs/services.md: streamshop postgres start --databases orders | "
    "ORDERS_DATABASE_URL=postgresql://streamshop:PASSWORD@127.0.0.1:PORT/orders streamshop orders"
)
USERS_EXAMPLE = (
    "docs/broker.md: streamshop broker users --data-dir ./data/broker set admin --password-file admin.password | "
    "streamshop broker users --data-dir ./data/broker list"
)
RUN_HERE = {
    POSTGRES_EXAMPLE: "test_the_postgresql_example_serves_orders_from_its_database",
    USERS_EXAMPLE: "test_the_broker_users_example_creates_and_lists_a_user",
}

# Blocks not run here, and why; their syntax is still checked.
NOT_RUN = {
    "README.md: make demo | make test": "long-running: the whole stack until Ctrl-C, and every test tier",
    "README.md: make docker | docker compose up --build --wait": COMPOSE_TIER + " (test_readme_docker)",
    "README.md: make docker-images | docker compose --env-file .env --env-file compose/local.env up --build --wait": (
        COMPOSE_TIER + " (test_readme_docker)"
    ),
    "README.md: make test-fast | make lint": "test tiers, lint, re-resolving the lock, benchmarks: minutes each",
    "docs/analytics.md: streamshop analytics run [--once] [--bootstrap HOST:PORT] [--registry-url URL] "
    "[--data-dir DIR] [--trigger SECONDS] [--starting-offsets group|earliest|latest] [--jobs orders,otp,logs] "
    "[--group GROUP] [--results-topic TOPIC] [--max-records-per-trigger N] [--lateness SECONDS] "
    "[--spark-master URL] [--python-env PACK] [-X librdkafka.setting=value] | "
    "streamshop analytics replay [--bootstrap ...] [--registry-url ...] [--data-dir DIR] [--jobs ...]": (
        "a synopsis; " + JVM
    ),
    "docs/analytics.md: streamshop spark-cluster start [--workers 2] [--cores 1] [--memory-mb 1024] "
    "[--dir data/spark-cluster] | streamshop analytics run --spark-master spark://127.0.0.1:PORT": JVM,
    "docs/analytics.md: streamshop analytics pack [--output data/analytics-env.tar.gz] | "
    "streamshop analytics run --spark-master spark://HOST:PORT --python-env data/analytics-env.tar.gz": (
        "packs the whole virtualenv (minutes), then " + JVM
    ),
    "docs/broker.md: streamshop broker --data-dir ./data/broker --listen 127.0.0.1:9092 [--advertise HOST:PORT] "
    "[--admin-listen 127.0.0.1:9644|off] [--set key=value ...]": "a synopsis of a long-running server",
    "docs/broker.md: streamshop broker --data-dir ./data/broker --set listeners=PLAINTEXT://127.0.0.1:9092,"
    "SASL_SSL://0.0.0.0:9093 --set ssl.keystore.location=broker.keystore.pem --set ssl.truststore.location=ca.pem "
    "--set authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer --set "
    "'super.users=User:admin'": "a long-running server on fixed ports, with keystores made beforehand",
    "docs/broker.md: .venv/bin/streamshop broker verify --data-dir data/stack/broker [--deep]": (
        "a synopsis, over the data of a stack that ran"
    ),
    "docs/broker.md: streamshop groups --bootstrap 127.0.0.1:9092 list [--json] | "
    "streamshop groups --bootstrap 127.0.0.1:9092 describe sms-sender [email-sender ...] [--json]": (
        "a synopsis, against the stack's broker and groups"
    ),
    "docs/broker.md: streamshop consume --topic orders --group g1 --from-beginning -X group.protocol=consumer | "
    "streamshop groups describe g1": "a consumer that runs until Ctrl-C, against the stack's broker",
    "docs/faults.md: .venv/bin/python -m pytest -m fault | "
    ".venv/bin/python -m pytest -m fault -s tests/integration/test_faults_clients.py": "the fault tier: minutes",
    "docs/operations.md: streamshop up [--data-dir DIR] [--ephemeral-ports] [--listen HOST] [--without CHILD]... "
    "[--secure] [--start-timeout S] [--jvm-start-timeout S] [--stop-timeout S] [--verbose] "
    "[--demo [--demo-orders N] [--demo-otp N] [--demo-rate R]] | "
    "make demo ARGS='--jvm-start-timeout 600 --verbose'": "a synopsis; " + STACK,
    "docs/operations.md: streamshop topics --bootstrap 127.0.0.1:9092 create orders --partitions 6 --config "
    "retention.ms=86400000 [--if-not-exists] | streamshop topics --bootstrap 127.0.0.1:9092 list --json": (
        "against the stack's broker and registry and its topics and transactions"
    ),
    "docs/operations.md: .venv/bin/streamshop kafka-cluster start | .venv/bin/streamshop kafka-cluster status": JVM,
    "docs/operations.md: .venv/bin/streamshop kafka-cluster start | .venv/bin/streamshop scenario leader-kill": JVM,
    "docs/operations.md: .venv/bin/streamshop kafka-cluster start | "
    ".venv/bin/streamshop up --bootstrap 127.0.0.1:PORT1,127.0.0.1:PORT2,127.0.0.1:PORT3": JVM + "; " + STACK,
    "docs/operations.md: .venv/bin/streamshop kafka-tool kafka-topics --bootstrap-server 127.0.0.1:9092 --describe | "
    ".venv/bin/streamshop kafka-tool kafka-consumer-groups --bootstrap-server 127.0.0.1:9092 --describe "
    "--all-groups": JVM,
    "docs/operations.md: make docker | docker compose up --build --wait": COMPOSE_TIER,
    "docs/operations.md: make docker-images | "
    "docker compose --env-file .env --env-file compose/local.env up --build --wait": COMPOSE_TIER,
    "docs/operations.md: make load | python -m locust -f loadtest/locustfile.py": (
        "a load test of 60 s against a stack; Locust's web UI runs until Ctrl-C"
    ),
    "docs/security.md: streamshop up --secure": STACK,
    'docs/security.md: export STREAMSHOP_API_KEY=$(python3 -c "import json;print(json.load(open('
    "'data/stack/secure/credentials.json'))['api_keys']['admin'])\") | streamshop demo --orders 100": (
        "against a running secured stack (its credentials file)"
    ),
    "docs/security.md: docker compose --profile bundled --profile secure up --build | "
    "docker compose exec orders cat /var/lib/streamshop/secure/credentials.json": COMPOSE_TIER,
    "docs/security.md: streamshop kafka-cluster start --secure data/stack | "
    "streamshop up --secure --bootstrap 127.0.0.1:<port>": JVM + "; " + STACK,
}


def key(block: Block) -> str:
    """A block's name in the lists: its file and its first two commands."""
    return f"{block.path}: {' | '.join(block.commands()[:2])}"


def test_every_shell_block_is_run_here_or_says_why_not() -> None:
    keys = Counter(key(block) for block in BLOCKS)
    assert [k for k, n in keys.items() if n > 1] == [], "two blocks with one name: name them apart"
    assert RUN_HERE.keys() & NOT_RUN.keys() == set()
    unclassified = sorted(keys.keys() - RUN_HERE.keys() - NOT_RUN.keys())
    assert unclassified == [], "blocks neither run here nor in NOT_RUN with a reason"
    stale = sorted((RUN_HERE.keys() | NOT_RUN.keys()) - keys.keys())
    assert stale == [], "names of blocks the documents no longer have"
    for test in RUN_HERE.values():
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
    server_dir = tmp_path / "postgres"
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


def test_the_broker_users_example_creates_and_lists_a_user(tmp_path: Path) -> None:
    """docs/broker.md: the first user made offline in a broker's data directory, then listed."""
    make, listing = block_of(USERS_EXAMPLE).commands()
    (tmp_path / "admin.password").write_text("an-admin-password\n")
    made = shell(make, tmp_path)
    assert made.returncode == 0, made.stderr[-2000:]
    listed = shell(listing, tmp_path)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert re.search(r"^admin\s+SCRAM-SHA-256.*SCRAM-SHA-512", listed.stdout, re.MULTILINE), listed.stdout
