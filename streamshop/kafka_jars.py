"""Apache Kafka's jars from Maven Central, the one release the project pins: `resolve` copies the
broker (`org.apache.kafka:kafka_2.13`), the command-line tools (`kafka-tools`) and their
dependencies, as `apache-kafka/pom.xml` pins them, into a cache directory with Maven, once;
`kafka_java` is the command line of one of Kafka's main classes, as its bin/*.sh scripts run it,
and `run_java` runs one to its end, its classes mapped from a class-data archive (kit.jvm).
The local cluster (streamshop.kafka_cluster) and Kafka's tools (streamshop.kafka_tools) both
start from here."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from kit.jvm import class_data
from streamshop.clients import CommandError
from streamshop.maven_jars import complete, copy_dependencies

__all__ = ["CACHE_ENV", "KAFKA_VERSION", "POM", "cache_dir", "kafka_java", "resolve", "run_java"]

PROJECT = Path(__file__).resolve().parents[1]
POM = PROJECT / "apache-kafka" / "pom.xml"
KAFKA_VERSION = "4.1.0"  # as apache-kafka/pom.xml and docker-compose.yml's kafka profile
DEFAULT_CACHE = PROJECT / ".cache" / "apache-kafka"
CACHE_ENV = "STREAMSHOP_KAFKA_CACHE"

_LOG4J2 = """status = error
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.filePattern = ${sys:kafka.logs.dir}/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 20MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 2
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE) / KAFKA_VERSION


def resolve(cache: Path | None = None, *, quiet: bool = True) -> Path:
    """The directory of Kafka's jars, copied there by Maven the first time."""
    lib = (cache or cache_dir()) / "lib"
    if not complete(POM, lib):
        copy_dependencies(POM, lib, expect="kafka_2.13-*.jar", what=f"Apache Kafka {KAFKA_VERSION}'s jars", quiet=quiet)
        (lib.parent / "log4j2.properties").write_text(_LOG4J2)
    return lib


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise CommandError("Java 17 is needed to run Apache Kafka (apt-get install openjdk-17-jre-headless)")
    return java


def kafka_java(lib: Path, main: str, *args: str, heap_mb: int = 256, options: Sequence[str] = ()) -> list[str]:
    """The command that runs one of Kafka's main classes, as its bin/*.sh scripts do."""
    return [_java(), *options, f"-Xmx{heap_mb}m", f"-Xms{heap_mb}m", "-cp", f"{lib}/*", main, *args]


def run_java(
    lib: Path,
    main: str,
    *args: str,
    family: str,
    heap_mb: int = 256,
    options: Sequence[str] = (),
    stdin: str | None = None,
    timeout: float | None = None,
    capture: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's main classes to its end, as a short-lived JVM: compiled by C1 alone,
    the serial collector, and its classes mapped from the archive of `family` (the tools share
    one, the storage tool has its own), which the first run of the family writes."""
    java = _java()
    archive = class_data(family, java, [lib])
    fast = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", *archive.options, *options]
    command = kafka_java(lib, main, *args, heap_mb=heap_mb, options=fast)
    try:
        done = subprocess.run(command, input=stdin, capture_output=capture, text=True, timeout=timeout, check=False)
    except BaseException:
        archive.settle(None)
        raise
    archive.settle(done.returncode)
    return done
