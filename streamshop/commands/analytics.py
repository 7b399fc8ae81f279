"""`streamshop analytics run|replay`: the PySpark jobs (analytics.runner); flags and help from
the job's settings (analytics.settings), so no Spark is loaded to parse them.  `streamshop
analytics pack`: the executors' Python environment for a Spark cluster (streamshop.analytics_pack)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from analytics.settings import AnalyticsConfig
from streamshop.analytics_pack import DEFAULT_OUTPUT
from streamshop.commands._common import SubParsers, lazy, setting_flag

__all__ = ["register"]


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

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = actions.add_parser(name, help=help_text, description=help_text)
        flag = _flags(p)
        flag("bootstrap_servers", "--bootstrap", "--bootstrap-server", metavar="HOST:PORT")
        flag("registry_url", metavar="URL")
        flag("data_dir", metavar="DIR")
        flag("jobs", metavar="LIST")
        flag("group_id", "--group", metavar="GROUP")
        flag("results_topic", metavar="TOPIC")
        flag("max_records_per_trigger", metavar="N")
        flag("spark_master", metavar="URL")
        flag("python_env", metavar="PACK")
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
        "--once",
        action="store_true",
        default=None,
        help=f"{_help('once')} (env {AnalyticsConfig.env_name('once')})",
    )
    flag = _flags(run)
    flag("trigger_seconds", "--trigger", metavar="SECONDS")
    flag("starting_offsets", metavar="START")
    flag("lateness_seconds", "--lateness", metavar="SECONDS")
    action(
        "replay",
        "recompute every metric from the earliest retained offsets into DATA_DIR/replay, once, with group "
        "<group>-replay and topic <results topic>.replay (the running job is left alone)",
    )
    pack_help = (
        "pack the Python environment of a Spark cluster's executors (the project and the job's runtime "
        "requirements from requirements-image.lock, without pyspark, which Spark supplies) with venv-pack, "
        "for `run --spark-master spark://... --python-env PACK`; from a checkout, with uv and venv-pack (dev extra)"
    )
    pack = actions.add_parser(
        "pack", help="pack the Python environment of a Spark cluster's executors (venv-pack)", description=pack_help
    )
    pack.add_argument(
        "--output",
        type=Path,
        default=DEFAULT_OUTPUT,
        metavar="PATH",
        help=f"the .tar.gz written (default {DEFAULT_OUTPUT})",
    )
    pack.set_defaults(func=lazy("streamshop.analytics_pack", "main", "analytics"))


def _flags(parser: argparse.ArgumentParser) -> Any:
    """A flag of `parser` for a setting of the job, its value kept under the setting's name."""

    def flag(field: str, *names: str, metavar: str) -> None:
        setting_flag(parser, AnalyticsConfig, field, *names, metavar=metavar, dest=field)

    return flag


def _help(field: str) -> str:
    return next(info.help for info in AnalyticsConfig.describe() if info.field == field)
