"""`streamshop analytics run|replay`: the PySpark jobs (analytics.runner)."""

from __future__ import annotations

import argparse
from pathlib import Path

from streamshop.commands._common import SubParsers, lazy


def register(sub: SubParsers) -> None:
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
        p.set_defaults(func=lazy("analytics.runner", name, "analytics"))
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
