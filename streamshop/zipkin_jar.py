"""Zipkin's server from Maven Central, the release the project pins: `resolve` copies its
runnable jar (``io.zipkin:zipkin-server``, classifier ``exec``: the server, its web UI and its
in-memory storage in one file), as `zipkin/pom.xml` pins it, into a cache directory with Maven,
once; `zipkin_command` is the command line `streamshop up --observability` runs it with.
``python -m streamshop.zipkin_jar`` fetches it (`make zipkin`)."""

from __future__ import annotations

import os
from pathlib import Path

from streamshop.maven_jars import copy_dependencies

__all__ = ["CACHE_ENV", "POM", "ZIPKIN_VERSION", "cache_dir", "resolve", "zipkin_command"]

PROJECT = Path(__file__).resolve().parents[1]
POM = PROJECT / "zipkin" / "pom.xml"
ZIPKIN_VERSION = "3.6.1"  # as zipkin/pom.xml
DEFAULT_CACHE = PROJECT / ".cache" / "zipkin"
CACHE_ENV = "STREAMSHOP_ZIPKIN_CACHE"
JAR = f"zipkin-server-{ZIPKIN_VERSION}-exec.jar"


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE) / ZIPKIN_VERSION


def resolve(cache: Path | None = None, *, quiet: bool = True) -> Path:
    """The server's jar, copied there by Maven the first time."""
    lib = copy_dependencies(
        POM, (cache or cache_dir()) / "lib", expect=JAR, what=f"Zipkin {ZIPKIN_VERSION}", quiet=quiet
    )
    return lib / JAR


def zipkin_command(java: str, jar: Path, host: str, port: int, *, heap_mb: int, max_spans: int) -> list[str]:
    """The server on `host`:`port` alone (Armeria's port list replaced whole: Spring Boot merges
    no list), in memory holding at most `max_spans` spans: the oldest traces go first.  C1 alone
    and the serial collector: it starts with less CPU and a small heap needs no more."""
    return [
        *(java, f"-Xmx{heap_mb}m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-jar", str(jar)),
        *(f"--armeria.ports[0].ip={host}", f"--armeria.ports[0].port={port}", "--armeria.ports[0].protocols[0]=http"),
        *("--zipkin.storage.type=mem", f"--zipkin.storage.mem.max-spans={max_spans}"),
    ]


if __name__ == "__main__":
    print(resolve(quiet=False))
