"""`streamshop probe URL...`: a container healthcheck that succeeds when any of the URLs answers
2xx.  The registry's lists its https and its http readiness URL: one image serves both the
secured run (https, a certificate of the stack's CA) and the plain one."""

from __future__ import annotations

import argparse
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path

from streamshop.commands._common import SubParsers

__all__ = ["probe", "register"]


def probe(url: str, cafile: Path | None, timeout: float) -> str | None:
    """None when `url` answers 2xx, else why not."""
    context = None
    if url.startswith("https://"):
        if cafile is None or not cafile.exists():
            return f"{url}: no CA file to verify it with"
        context = ssl.create_default_context(cafile=str(cafile))
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            return None if 200 <= response.status < 300 else f"{url}: HTTP {response.status}"
    except (OSError, ValueError) as e:  # URLError, HTTPError, ssl errors and timeouts are OSErrors
        return f"{url}: {e}"


def _run(args: argparse.Namespace) -> int:
    cafile = Path(args.cafile) if args.cafile else None
    errors = []
    for url in args.urls:
        error = probe(url, cafile, args.timeout)
        if error is None:
            return 0
        errors.append(error)
    print("streamshop probe: " + "; ".join(errors), file=sys.stderr)
    return 1


def register(sub: SubParsers) -> None:
    p = sub.add_parser("probe", help="succeed when any URL answers 2xx (a container healthcheck)")
    p.add_argument("urls", nargs="+", metavar="URL")
    p.add_argument("--cafile", help="the CA that signs the https URLs' certificates")
    p.add_argument("--timeout", type=float, default=2.0, help="seconds per URL (default 2)")
    p.set_defaults(func=_run)
