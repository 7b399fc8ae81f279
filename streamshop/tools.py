"""Console tools on the real confluent-kafka client (`streamshop topics`, `groups`, `produce`,
`consume`, `roundtrip`), the services, and the local stack (`up`, `demo`).  This module only
builds the argument parsers; each command imports its implementation (and confluent-kafka) when
it runs, so `streamshop broker` stays lean."""

from __future__ import annotations

import argparse
import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeAlias

from streamshop.kafka_cluster_cli import register as kafka_cluster_parser
from streamshop.probe import register as probe_parser
from streamshop.stack.compose_secure import register as secure_parser

BOOTSTRAP_ENV = "STREAMSHOP_BOOTSTRAP_SERVERS"
REGISTRY_ENV = "STREAMSHOP_REGISTRY_URL"
READ_FORMATS = ("auto", "avro", "json", "string", "bytes")  # streamshop.formats.Renderer
WRITE_FORMATS = ("string", "avro", "json")  # streamshop.formats.RecordEncoder

SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


# Console tools that talk to the cluster: checked for a reachable broker before they start.
_CLIENT_COMMANDS = {"topics", "groups", "produce", "consume", "transactions"}


def _lazy(module: str, function: str, command: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        from streamshop.clients import CommandError, check_reachable, warn

        implementation = getattr(importlib.import_module(module), function)
        try:
            if command in _CLIENT_COMMANDS and isinstance(getattr(args, "bootstrap", None), str):
                check_reachable(args.bootstrap)
            return int(implementation(args))
        except CommandError as e:
            warn(command, str(e))
            return 1
        except KeyboardInterrupt:
            warn(command, "interrupted")
            return 130

    return run


def _client_options(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """--bootstrap and -X; `suppress` for a sub-action that may repeat them after its name."""
    default = os.environ.get(BOOTSTRAP_ENV, "127.0.0.1:9092")
    parser.add_argument(
        "--bootstrap",
        "--bootstrap-server",
        metavar="HOST:PORT",
        default=argparse.SUPPRESS if suppress else default,
        help=f"bootstrap servers (env {BOOTSTRAP_ENV}; default {default})",
    )
    parser.add_argument(
        "-X",
        dest="client_config",
        action="append",
        metavar="KEY=VALUE",
        default=argparse.SUPPRESS if suppress else [],
        help="extra librdkafka setting, e.g. -X security.protocol=SSL (repeatable)",
    )


def _topics_parser(sub: SubParsers) -> None:
    topics = sub.add_parser("topics", help="create, list, describe, delete and alter topics")
    _client_options(topics)
    topics.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for the broker (default 15)")
    actions = topics.add_subparsers(dest="action", required=True)

    def action(name: str, help_text: str, function: str | None = None) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
        _client_options(parser, suppress=True)
        parser.set_defaults(func=_lazy("streamshop.topics", function or name, "topics"))
        return parser

    create = action("create", "create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, help="partition count (default: the broker's num.partitions)")
    create.add_argument("--replication-factor", type=int, help="replicas per partition (default: the broker's)")
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="topic config (repeatable)")
    create.add_argument("--if-not-exists", action="store_true", help="succeed when the topic already exists")

    list_ = action("list", "list topics and their partition counts", "list_")
    list_.add_argument("--json", action="store_true", help="JSON output")

    describe = action("describe", "partitions, log start/end offsets and configs of topics")
    describe.add_argument("names", nargs="+", metavar="NAME")
    describe.add_argument("--json", action="store_true", help="JSON output")

    delete = action("delete", "delete topics")
    delete.add_argument("names", nargs="+", metavar="NAME")
    delete.add_argument("--if-exists", action="store_true", help="succeed for topics that do not exist")

    alter = action("alter", "change topic configs (--set/--delete) or add partitions (--partitions)")
    alter.add_argument("name")
    alter.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="set a config (repeatable)")
    alter.add_argument(
        "--delete",
        action="append",
        default=[],
        metavar="KEY",
        help="remove a config override, back to the default (repeatable)",
    )
    alter.add_argument("--partitions", type=int, help="new, larger partition count")


def _groups_parser(sub: SubParsers) -> None:
    groups = sub.add_parser(
        "groups",
        help="list, describe and delete consumer groups, reset their offsets",
        description="Consumer groups, like kafka-consumer-groups.sh: describe shows per partition the committed "
        "offset, log end offset and lag, and the members with their assignments.",
    )
    _client_options(groups)
    groups.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for the broker (default 15)")
    actions = groups.add_subparsers(dest="action", required=True)

    def action(name: str, help_text: str, function: str, module: str = "streamshop.groups") -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(name, help=help_text, description=help_text)
        _client_options(parser, suppress=True)
        parser.set_defaults(func=_lazy(module, function, "groups"))
        return parser

    list_ = action("list", "list groups with their state and protocol type", "list_")
    list_.add_argument("--json", action="store_true", help="JSON output")

    describe = action(
        "describe", "committed offset, log end offset and lag per partition; members and assignments", "describe"
    )
    describe.add_argument("groups", nargs="+", metavar="GROUP")
    describe.add_argument("--json", action="store_true", help="JSON output")

    delete = action("delete", "delete groups without active members, with their committed offsets", "delete")
    delete.add_argument("groups", nargs="+", metavar="GROUP")

    reset = action(
        "reset-offsets",
        "plan new committed offsets for groups' partitions and, with --execute, commit them (like "
        "kafka-consumer-groups.sh --reset-offsets: without --execute nothing changes); refused while a group has "
        "active members",
        "reset_offsets",
        "streamshop.reset_offsets",
    )
    reset.add_argument("groups", nargs="*", metavar="GROUP", help="group(s) to reset (or --group, --all-groups)")
    reset.add_argument("--group", action="append", default=[], help="group to reset (repeatable)")
    reset.add_argument("--all-groups", action="store_true", help="every group of the cluster")
    reset.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="NAME[:P,P...]",
        help="topic to reset, optionally only some partitions (repeatable)",
    )
    reset.add_argument("--all-topics", action="store_true", help="every topic the group has committed offsets for")
    reset.add_argument(
        "--partition", type=int, action="append", help="only this partition (repeatable; default: all partitions)"
    )
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument("--to-current", action="store_true", help="the committed offset (the log end where none)")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N (moved into the log's range if outside it)")
    to.add_argument(
        "--shift-by", type=int, metavar="N", help="the committed offset plus N (negative: back), kept in the log"
    )
    to.add_argument(
        "--to-datetime",
        metavar="ISO8601",
        help="the first record at or after this time, e.g. 2026-01-31T12:00:00Z (no offset: local time)",
    )
    to.add_argument(
        "--by-duration", metavar="PnDTnHnMnS", help="the first record at or after now minus this duration, e.g. PT15M"
    )
    to.add_argument("--to-timestamp", type=int, metavar="MS", help="the first record at or after this epoch time in ms")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only show the plan (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    reset.add_argument("--export", action="store_true", help="print the plan as CSV (topic,partition,offset)")


def _produce_parser(sub: SubParsers) -> None:
    p = sub.add_parser(
        "produce",
        help="send stdin lines as records",
        description="Send one record per stdin line. Exit status 1 if a line was rejected or a delivery failed.",
    )
    _client_options(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, help="send every record to this partition (default: by key)")
    p.add_argument(
        "--key-separator", metavar="SEP", help="parse lines as KEY<SEP>VALUE (lines without SEP are rejected)"
    )
    p.add_argument("--acks", choices=["all", "1", "0"], default="all", help="default all")
    p.add_argument("--header", action="append", default=[], metavar="KEY=VALUE", help="header on every record")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds a record may take to be delivered (default 30)")
    p.add_argument(
        "--value-format",
        choices=WRITE_FORMATS,
        default="string",
        help="string: send the line as it is (default); json: check it is JSON; avro: encode the JSON line "
        "with the subject's schema, Confluent-framed (decimals as strings or numbers, timestamps ISO 8601 "
        "or epoch ms)",
    )
    p.add_argument("--subject", help="registry subject of --value-format avro (default TOPIC-value)")
    p.add_argument("--schema-id", type=int, help="encode with this schema id instead of the subject's latest")
    _registry_option(p)
    p.set_defaults(func=_lazy("streamshop.console", "produce", "produce"))


def _registry_option(p: argparse.ArgumentParser) -> None:
    default = os.environ.get(REGISTRY_ENV, "http://127.0.0.1:8081")
    p.add_argument(
        "--registry", metavar="URL", default=default, help=f"schema registry (env {REGISTRY_ENV}; default {default})"
    )


def _consume_parser(sub: SubParsers) -> None:
    p = sub.add_parser(
        "consume",
        help="print records of a topic",
        description="Print record values, one per line. Without --group the partitions are "
        "assigned directly and no offsets are committed.",
    )
    _client_options(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--from-beginning", action="store_true", help="start at the log start (default: the end)")
    p.add_argument("--partition", type=int, help="read only this partition")
    p.add_argument("--offset", type=int, help="start at this offset (needs --partition)")
    p.add_argument("--max-messages", type=int, help="stop after this many records")
    p.add_argument("--timeout", type=float, help="stop after this many seconds without a record")
    p.add_argument("--print-key", action="store_true", help="print KEY<TAB>VALUE")
    p.add_argument("--print-offset", action="store_true", help="print PARTITION:OFFSET<TAB> first")
    p.add_argument("--print-headers", action="store_true", help="print headers as K:V,K2:V2 (or NO_HEADERS)")
    p.add_argument("--print-schema-id", action="store_true", help="print the value's schema id (- if not Avro)")
    for part, default_text in (("value", "auto"), ("key", "auto")):
        p.add_argument(
            f"--{part}-format",
            choices=READ_FORMATS,
            default="auto",
            help=f"how to print the {part}: avro decodes Confluent-framed Avro to JSON through the registry, "
            f"json checks and compacts JSON, string decodes UTF-8, bytes prints what is stored; auto "
            f"(default {default_text}) is avro for Confluent-framed {part}s, else bytes",
        )
    _registry_option(p)
    p.add_argument("--group", help="join this consumer group (subscribe; offsets are committed)")
    p.add_argument("--request-timeout", type=float, default=15.0, help=argparse.SUPPRESS)
    p.set_defaults(func=_lazy("streamshop.console", "consume", "consume"))


def _roundtrip_parser(sub: SubParsers) -> None:
    p = sub.add_parser(
        "roundtrip",
        help="start a broker and a schema registry, round-trip 1,000 records and 100 Avro events, report",
    )
    p.add_argument(
        "--data-dir", default="./data/roundtrip", help="default ./data/roundtrip (broker data in DIR/broker)"
    )
    p.add_argument("--listen", default="127.0.0.1:9092", help="broker HOST:PORT (port 0: any free port)")
    p.add_argument(
        "--admin-listen", help="admin HTTP HOST:PORT (default HOST:9644, or HOST:0 when --listen uses port 0)"
    )
    p.add_argument(
        "--registry-listen", help="schema registry HOST:PORT (default HOST:8081, or HOST:0 when --listen uses port 0)"
    )
    p.add_argument(
        "--exit",
        action="store_true",
        help="stop the broker and registry after the report instead of waiting for Ctrl-C",
    )
    p.set_defaults(func=_lazy("streamshop.roundtrip", "roundtrip", "roundtrip"))


def _count(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return number


def _demo_traffic_options(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """--orders/--otp for `demo`, --demo-orders/--demo-otp for `up --demo`."""
    p.add_argument(f"--{prefix}orders", type=_count, default=50, metavar="N", help="orders to walk (default 50)")
    p.add_argument(f"--{prefix}otp", type=_count, default=10, metavar="N", help="OTPs to request (default 10)")


def _up_parser(sub: SubParsers) -> None:
    p = sub.add_parser(
        "up",
        help="run the whole local stack (broker, registry, catcher, services) as supervised child processes",
        description="Start the broker, schema registry, SMTP catcher and every service as child processes, wait "
        "until each is ready, print their URLs, restart a child that exits (with backoff) and stop everything "
        "in reverse order on Ctrl-C or SIGTERM. DIR/stack.json describes the running stack.",
    )
    p.add_argument("--data-dir", default="./data/stack", metavar="DIR", help="default ./data/stack")
    p.add_argument(
        "--ephemeral-ports",
        action="store_true",
        help="let the OS pick every port (read them from the output or DIR/stack.json)",
    )
    p.add_argument("--listen", default="127.0.0.1", metavar="HOST", help="interface every child binds (127.0.0.1)")
    p.add_argument("--no-color", action="store_true", help="no colours (also: the NO_COLOR environment variable)")
    p.add_argument(
        "--without",
        action="append",
        default=[],
        metavar="CHILD",
        help="leave this child (and the children that need it) out, e.g. --without logs (repeatable)",
    )
    p.add_argument(
        "--bootstrap",
        metavar="HOST:PORT[,...]",
        help="use this Kafka cluster (Apache Kafka, or any broker speaking its protocol) instead of starting "
        "the bundled broker; the services create their topics with 3 replicas, or one per broker when fewer",
    )
    p.add_argument(
        "--start-timeout", type=float, default=60.0, metavar="S", help="seconds a child may take to be ready (60)"
    )
    p.add_argument(
        "--stop-timeout", type=float, default=10.0, metavar="S", help="seconds after SIGTERM before SIGKILL (10)"
    )
    p.add_argument(
        "--secure",
        action="store_true",
        help="a local CA and certificates, one SCRAM user per child with least-privilege ACLs, every Kafka "
        "connection over SASL_SSL, the registry on HTTPS with basic auth, API keys on the services and a "
        "sign-in on the dashboard; everything made once under DIR/secure",
    )
    p.add_argument(
        "--demo",
        action="store_true",
        help="once ready, drive one round of demo traffic, then keep a trickle going (see --demo-rate)",
    )
    _demo_traffic_options(p, "demo-")
    p.add_argument(
        "--demo-rate",
        type=float,
        default=2.0,
        metavar="R",
        help="orders per second of the trickle after the first round (default 2; 0: none)",
    )
    p.set_defaults(func=_lazy("streamshop.stack.supervisor", "up", "up"))


def _demo_parser(sub: SubParsers) -> None:
    p = sub.add_parser(
        "demo",
        help="drive realistic traffic (orders through their lifecycle, OTPs) against a running stack",
        description="Create orders and walk them through their lifecycle, request OTPs and verify them with the "
        "code the SMS sink received. Targets: --stack DIR (its stack.json), or the three URLs, or else "
        "./data/stack/stack.json when `streamshop up` runs there, or else the default ports. Exit status 1 on "
        "any unexpected response.",
    )
    _demo_traffic_options(p)
    p.add_argument("--concurrency", type=int, default=8, metavar="C", help="flows in flight at once (default 8)")
    p.add_argument("--stack", metavar="DIR", help="the data directory of a running `streamshop up`")
    p.add_argument("--orders-url", metavar="URL", help="orders service base URL")
    p.add_argument("--otp-url", metavar="URL", help="otp service base URL")
    p.add_argument("--catcher-url", metavar="URL", help="SMTP catcher / SMS sink base URL")
    p.add_argument(
        "--otp-timeout", type=float, default=30.0, metavar="S", help="seconds to wait for an SMS or e-mail (30)"
    )
    p.add_argument("--seed", type=int, help="random seed (reproducible baskets and lifecycles)")
    p.set_defaults(func=_lazy("streamshop.demo", "demo", "demo"))


def _registry_parser(sub: SubParsers) -> None:
    bootstrap = os.environ.get("STREAMSHOP_REGISTRY_BOOTSTRAP") or os.environ.get(BOOTSTRAP_ENV, "127.0.0.1:9092")
    listen = os.environ.get("STREAMSHOP_REGISTRY_LISTEN", "127.0.0.1:8081")
    p = sub.add_parser(
        "registry",
        help="run the schema registry (Confluent's REST API; schemas kept in the broker's _schemas topic)",
    )
    p.add_argument(
        "--bootstrap",
        "--bootstrap-server",
        metavar="HOST:PORT",
        default=bootstrap,
        help=f"the broker (env STREAMSHOP_REGISTRY_BOOTSTRAP; default {bootstrap})",
    )
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default=listen,
        help=f"HTTP address (env STREAMSHOP_REGISTRY_LISTEN; default {listen})",
    )
    p.set_defaults(func=_lazy("schemas.registry.app", "main", "registry"))


def _orders_parser(sub: SubParsers) -> None:
    p = sub.add_parser("orders", help="run the orders service (settings from ORDERS_* env vars)")
    p.add_argument("--port", type=int, default=None, help="HTTP port (env ORDERS_PORT; default 8001)")
    p.add_argument("--database", default=None, help="SQLite file (env ORDERS_DATABASE_PATH; default data/orders.db)")
    p.set_defaults(func=_lazy("services.orders.main", "run", "orders"))


def _otp_parser(sub: SubParsers) -> None:
    p = sub.add_parser("otp", help="run the otp service (settings from OTP_* env vars)")
    p.add_argument("--port", type=int, default=None, help="HTTP port (env OTP_PORT; default 8002)")
    p.add_argument("--database", default=None, help="SQLite file (env OTP_DATABASE_PATH; default data/otp.db)")
    p.set_defaults(func=_lazy("services.otp.main", "run", "otp"))


def _logs_parser(sub: SubParsers) -> None:
    p = sub.add_parser("logs", help="run the logs service (indexes the logs.* topics; GET /logs, /logs/stats)")
    p.add_argument("--listen", metavar="HOST", help="HTTP interface (env LOGS_LISTEN; default 127.0.0.1)")
    p.add_argument("--port", type=int, help="HTTP port (env LOGS_PORT; default 8003)")
    p.add_argument("--bootstrap", "--bootstrap-server", metavar="HOST:PORT", help="env LOGS_BOOTSTRAP_SERVERS")
    p.add_argument("--registry-url", metavar="URL", help="schema registry (env LOGS_REGISTRY_URL)")
    p.add_argument("--database", metavar="PATH", help="SQLite file (env LOGS_DATABASE_PATH; default data/logs.db)")
    p.add_argument("--max-records", type=int, help="retention: records kept (env LOGS_MAX_RECORDS)")
    p.set_defaults(func=_lazy("services.logs.main", "run", "logs"))


def _notify_parsers(sub: SubParsers) -> None:
    for name, function, channel in (("sms-sender", "run_sms", "SMS"), ("email-sender", "run_email", "email")):
        env = name.upper().replace("-", "_")
        p = sub.add_parser(
            name,
            help=f"run the {name} consumer group: deliver OTP codes by {channel} (settings from {env}_* env vars)",
        )
        p.add_argument(
            "--port", type=int, default=None, help=f"HTTP port of /healthz, /readyz, /metrics (env {env}_PORT)"
        )
        p.add_argument("--database", default=None, help=f"SQLite file (env {env}_DATABASE_PATH)")
        p.set_defaults(func=_lazy("services.notify.main", function, name))


def _catcher_parser(sub: SubParsers) -> None:
    p = sub.add_parser(
        "catcher",
        help="run the local SMTP catcher and SMS sink; received messages listed over HTTP (settings from CATCHER_*)",
    )
    p.add_argument("--port", type=int, default=None, help="HTTP port (env CATCHER_PORT; default 8025)")
    p.add_argument("--smtp-port", type=int, default=None, help="SMTP port (env CATCHER_SMTP_PORT; default 1025)")
    p.set_defaults(func=_lazy("services.catcher.main", "run", "catcher"))


def _dashboard_parser(sub: SubParsers) -> None:
    p = sub.add_parser(
        "dashboard",
        help="run the dashboard: topics, consumer groups and lag, analytics, inbox and live logs on one page "
        "(settings from DASHBOARD_*)",
    )
    p.add_argument("--port", type=int, default=None, help="HTTP port (env DASHBOARD_PORT; default 8080)")
    p.set_defaults(func=_lazy("services.dashboard.main", "run", "dashboard"))


def _analytics_parser(sub: SubParsers) -> None:
    analytics = sub.add_parser(
        "analytics",
        help="run the PySpark analytics jobs (windowed metrics of orders, OTP deliveries and logs)",
        description="Windowed metrics of the orders, otp.deliveries and logs.* topics, computed by PySpark "
        "streaming queries (consumer group analytics), written as Parquet under the data directory and "
        "published to the compacted topic analytics.metrics. Every option can also be set by the ANALYTICS_* "
        "environment variable named in its help; ANALYTICS_KAFKA_<NAME> passes a librdkafka setting.",
    )
    actions = analytics.add_subparsers(dest="action", required=True)

    from analytics.options import argument, job_list, non_negative_float, positive_float, positive_int

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = actions.add_parser(name, help=help_text, description=help_text)
        p.add_argument(
            "--bootstrap",
            "--bootstrap-server",
            dest="bootstrap_servers",
            metavar="HOST:PORT",
            help="bootstrap servers (env ANALYTICS_BOOTSTRAP_SERVERS, then STREAMSHOP_BOOTSTRAP_SERVERS; "
            "default 127.0.0.1:9092)",
        )
        p.add_argument(
            "--registry-url",
            metavar="URL",
            help="schema registry (env ANALYTICS_REGISTRY_URL; default http://127.0.0.1:8081)",
        )
        p.add_argument(
            "--data-dir",
            type=Path,
            metavar="DIR",
            help="Parquet, state and checkpoints (env ANALYTICS_DATA_DIR; default data/analytics)",
        )
        p.add_argument(
            "--jobs",
            type=argument(job_list),
            metavar="LIST",
            help="comma list of orders, otp, logs (env ANALYTICS_JOBS; default all)",
        )
        p.add_argument(
            "--group",
            dest="group_id",
            metavar="GROUP",
            help="consumer group offsets are committed to (env ANALYTICS_GROUP_ID; default analytics)",
        )
        p.add_argument(
            "--results-topic",
            metavar="TOPIC",
            help="compacted topic of the metric values (env ANALYTICS_RESULTS_TOPIC; default analytics.metrics)",
        )
        p.add_argument(
            "--max-records-per-trigger",
            type=argument(positive_int),
            metavar="N",
            help="at most N records per micro-batch and job (env ANALYTICS_MAX_RECORDS_PER_TRIGGER; default no limit)",
        )
        p.add_argument(
            "--spark-master",
            metavar="URL",
            help="Spark master (env ANALYTICS_SPARK_MASTER; default local[2,4]: 2 cores, 4 tries per task)",
        )
        p.add_argument(
            "-X",
            dest="client_config",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="librdkafka setting (repeatable)",
        )
        p.set_defaults(func=_lazy("analytics.runner", name, "analytics"))
        return p

    run = action("run", "run the jobs: a micro-batch every --trigger seconds until SIGTERM or Ctrl-C, or --once")
    run.add_argument(
        "--once", action="store_true", default=None, help="process what is available, commit, exit (env ANALYTICS_ONCE)"
    )
    run.add_argument(
        "--trigger",
        dest="trigger_seconds",
        type=argument(positive_float),
        metavar="SECONDS",
        help="micro-batch interval (env ANALYTICS_TRIGGER_SECONDS; default 2)",
    )
    run.add_argument(
        "--starting-offsets",
        choices=["group", "earliest", "latest"],
        help="where a job without a checkpoint starts (env ANALYTICS_STARTING_OFFSETS; default group)",
    )
    run.add_argument(
        "--lateness",
        dest="lateness_seconds",
        type=argument(non_negative_float),
        metavar="SECONDS",
        help="an event whose window ended this long before the newest event time is late: counted apart "
        "(env ANALYTICS_LATENESS_SECONDS; default 120)",
    )
    action(
        "replay",
        "recompute every metric from the earliest retained offsets into DATA_DIR/replay, once, with group "
        "<group>-replay and topic <results topic>.replay (the running job is left alone)",
    )


def _transactions_parser(sub: SubParsers) -> None:
    from streamshop import transactions

    transactions.register(sub, _client_options, _lazy)


def register_tools(sub: SubParsers) -> None:
    for register in (
        _topics_parser,
        _groups_parser,
        _transactions_parser,
        _produce_parser,
        _consume_parser,
        _roundtrip_parser,
        _up_parser,
        _demo_parser,
        _registry_parser,
        _orders_parser,
        _otp_parser,
        _logs_parser,
        _notify_parsers,
        _catcher_parser,
        _dashboard_parser,
        _analytics_parser,
        kafka_cluster_parser,
        secure_parser,
        probe_parser,
    ):
        register(sub)
