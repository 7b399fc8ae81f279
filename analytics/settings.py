"""Settings of `streamshop analytics`, from ``ANALYTICS_*`` variables (kit.settings) with the
command's flags over them; ``ANALYTICS_KAFKA_<NAME>`` variables (and ``-X key=value``) pass
librdkafka settings, e.g. ``ANALYTICS_KAFKA_SECURITY_PROTOCOL=SSL`` becomes
``security.protocol=SSL``, to the source, the producer and the admin client.  No Spark here:
the command line reads these without starting a JVM."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Self

from analytics.options import JOB_NAMES, boolean, job_list, non_negative_float, positive_float, positive_int, start
from contracts.ports import DEFAULT_PORTS
from kit.settings import ConfigError, ProcessSettings, parse_bootstrap, setting

__all__ = ["ENV", "AnalyticsConfig", "ConfigError"]

ENV = "ANALYTICS_"
_KAFKA = ENV + "KAFKA_"


@dataclass(frozen=True, repr=False)
class AnalyticsConfig(ProcessSettings):
    """Everything a run needs; `from_args` fills it from flags, then ``ANALYTICS_*``, then defaults."""

    env_prefix: ClassVar[str] = "ANALYTICS"

    bootstrap_servers: str = setting(
        f"127.0.0.1:{DEFAULT_PORTS['broker']}",
        parse=parse_bootstrap,
        fallbacks=("STREAMSHOP_BOOTSTRAP_SERVERS",),
        help="bootstrap servers",
    )
    registry_url: str = setting(f"http://127.0.0.1:{DEFAULT_PORTS['registry']}", help="schema registry")
    data_dir: Path = setting(Path("data/analytics"), help="Parquet, state and checkpoints")
    trigger_seconds: float = setting(2.0, parse=positive_float, help="micro-batch interval, seconds")
    starting_offsets: str = setting("group", parse=start, help="where a job without a checkpoint starts")
    group_id: str = setting("analytics", help="consumer group offsets are committed to")
    results_topic: str = setting("analytics.metrics", help="compacted topic of the metric values")
    jobs: tuple[str, ...] = setting(JOB_NAMES, parse=job_list, help="comma list of orders, otp, logs")
    max_records_per_trigger: int | None = setting(
        None, parse=positive_int, help="at most N records per micro-batch and job"
    )
    lateness_seconds: float = setting(
        120.0,
        parse=non_negative_float,
        help="an event whose window ended this long before the newest event time is late: counted apart",
    )
    # Two cores; a failed task is tried 4 times (local[N] never retries).
    spark_master: str = setting("local[2,4]", help="Spark master (local[2,4]: 2 cores, 4 tries per task)")
    java_options: str = setting(
        "",
        help="extra JVM options of the Spark driver (-XX:TieredStopAtLevel=1: a start with a third less CPU, "
        "for short or small jobs)",
    )
    python_env: Path | None = setting(
        None,
        help="packed Python environment (streamshop analytics pack) for a cluster's executors, shipped as "
        "spark.archives; none: they run the driver's interpreter and checkout, on its host",
    )
    once: bool = setting(False, parse=boolean, help="process what is available, commit, exit")
    kafka: Mapping[str, str] = setting(default_factory=dict, help="librdkafka settings (ANALYTICS_KAFKA_<NAME>, -X)")

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Self:
        """Flags of `args` over ``ANALYTICS_*`` over the defaults; `ConfigError` lists every problem."""
        env = os.environ if environ is None else environ
        kafka = {k[len(_KAFKA) :].lower().replace("_", "."): v for k, v in env.items() if k.startswith(_KAFKA)}
        problems: list[str] = []
        for item in getattr(args, "client_config", None) or ():
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                problems.append(f"-X {item!r}: expected KEY=VALUE")
            kafka[key.strip()] = value
        if problems:
            raise ConfigError(problems)
        overrides: dict[str, Any] = {f.name: getattr(args, f.name, None) for f in cls.setting_fields()}
        overrides["kafka"] = kafka
        return cls.from_env(env, overrides=overrides)

    def check(self) -> None:
        # Spark starts the executors' Python workers in the directory it unpacks the environment
        # into; in local mode the driver's JVM starts them where it runs, with no ./environment.
        if self.python_env is not None and self.spark_master.startswith("local"):
            raise ConfigError(
                f"{self.env_name('python_env')}: a packed environment is for a cluster's executors, "
                f"not for the {self.spark_master} master"
            )

    def replay(self) -> Self:
        """This configuration turned into a replay: from earliest, once, beside the live job."""
        return replace(
            self,
            data_dir=self.data_dir / "replay",
            starting_offsets="earliest",
            group_id=f"{self.group_id}-replay",
            results_topic=f"{self.results_topic}.replay",
            once=True,
        )

    def kafka_conf(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap_servers, **self.kafka}
