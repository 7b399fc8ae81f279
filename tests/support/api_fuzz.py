"""Schemathesis, the property-based API fuzzer, run against a live service's /openapi.json."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path
from typing import Any

from tests.support import runtime_view

# Every answer must be one the description promises: its status, content type, headers and
# body schema, and never a 5xx; a body that breaks the schema must be refused.
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
)
# Every warning fails the run but one: random ids sent to an operation that takes an id are
# 404s in the coverage and fuzzing phases ("missing test data"); the stateful phase then follows
# the description's links with real ids, and every link must be covered.
WARNINGS = (
    "missing_auth",
    "base_url_mismatch",
    "validation_mismatch",
    "missing_deserializer",
    "unused_openapi_auth",
    "unsupported_regex",
    "method_not_allowed",
    "constants_extraction",
    "unmatched_filter",
)
_METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}


def operations(doc: dict[str, Any]) -> int:
    """How many operations an OpenAPI description has."""
    return sum(1 for item in doc["paths"].values() for method in item if method in _METHODS)


async def fuzz(
    base_url: str,
    doc: dict[str, Any],
    workdir: Path,
    *,
    max_examples: int = 50,
    seed: int = 20261125,
    exclude_path: str | None = None,
    allow: tuple[str, ...] = (),
) -> str:
    """Run schemathesis on `base_url`; AssertionError with its report unless it tested every
    operation of `doc` (but those of `exclude_path`) and every check passed, with no warning but
    those `allow`-ed.  Returns the report."""
    extra = ("--exclude-path", exclude_path) if exclude_path else ()
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "run",
        f"{base_url}/openapi.json",
        "--checks",
        ",".join(CHECKS),
        "--max-examples",
        str(max_examples),
        "--seed",
        str(seed),
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--generation-database",
        "none",
        "--no-color",
        "--output-truncate",
        "false",
        "--workers",
        "1",
        "--warnings",
        ",".join(w for w in WARNINGS if w not in allow),
        *extra,
    ]
    proc = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=workdir,
        env={**runtime_view.with_dev_tools(os.environ), "NO_COLOR": "1"},
    )
    out, _ = await proc.communicate()
    report = out.decode(errors="replace")
    assert proc.returncode == 0, report[-12000:]
    assert "No issues found" in report, report[-12000:]
    tested = re.search(r"^\s*Tested: (\d+)$", report, re.MULTILINE)
    assert tested is not None, report[-12000:]
    # Schemathesis leaves out the operation that serves the description it loaded.
    expected = (
        operations(doc) - 1 - (operations({"paths": {exclude_path: doc["paths"][exclude_path]}}) if exclude_path else 0)
    )
    assert int(tested.group(1)) == expected, report[-12000:]
    declared = sum(
        len(r.get("links", {}))
        for item in doc["paths"].values()
        for op in item.values()
        for r in op["responses"].values()
    )
    covered = re.search(r"API Links:\s+(\d+) covered", report)
    assert int(covered.group(1) if covered else 0) >= declared, report[-12000:]
    return report
