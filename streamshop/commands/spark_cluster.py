"""`streamshop spark-cluster start|stop|status`: a Spark standalone cluster on loopback, from the
PySpark wheel (streamshop.spark_cluster, imported when a command runs)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from streamshop.commands._common import SubParsers

__all__ = ["register"]

DEFAULT_DIR = Path("data/spark-cluster")  # as streamshop.spark_cluster's, which this module does not import


def register(sub: SubParsers) -> None:
    p = sub.add_parser(
        "spark-cluster",
        help="run a Spark standalone cluster (master and workers, from the PySpark wheel) on loopback",
        description="A Spark standalone master and N workers on free loopback ports, for running the "
        "analytics job as on a real cluster: `streamshop analytics run --spark-master URL` with the "
        "URL `start` prints, or `streamshop up --spark-cluster DIR`. Needs Java 17.",
    )
    actions = p.add_subparsers(dest="spark_action", required=True)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        a = actions.add_parser(name, help=help_text)
        a.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"cluster directory (default {DEFAULT_DIR})")
        a.set_defaults(func=_run)
        return a

    start = action("start", "start the master and the workers and wait until every worker has registered")
    start.add_argument("--workers", type=int, default=2, help="workers, 1 to 8 (default 2)")
    start.add_argument("--cores", type=int, default=1, help="cores each worker offers executors (default 1)")
    start.add_argument("--memory-mb", type=int, default=1024, help="memory each worker offers executors (default 1024)")
    action("stop", "stop the workers (and their executors), then the master")
    st = action("status", "the master's URL and UI, its workers and running applications")
    st.add_argument("--json", action="store_true")


def _run(args: argparse.Namespace) -> int:
    from streamshop import spark_cluster as sc
    from streamshop.clients import CommandError, warn

    try:
        if args.spark_action == "start":
            cluster = sc.start(args.dir, workers=args.workers, cores=args.cores, memory_mb=args.memory_mb)
            workers = len(cluster.workers)
            print(f"Spark standalone: master {cluster.master_url}, web UI {cluster.web_url}, {workers} workers")
            return 0
        if args.spark_action == "stop":
            cluster = sc.stop(args.dir)
            print(f"stopped the master and {len(cluster.workers)} workers in {args.dir}")
            return 0
        report = sc.status(args.dir)
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            _print_status(report)
        return 0 if "workers" in report else 1
    except CommandError as e:
        warn("spark-cluster", str(e))
        return 1


def _print_status(report: dict[str, object]) -> None:
    print(f"Spark standalone: master {report['master_url']}, web UI {report['web_url']}")
    for member in report["members"]:  # type: ignore[attr-defined]
        state = f"running (pid {member['pid']})" if member["alive"] else "stopped"
        print(f"  {member['name']:<9} {state}")
    if "workers" not in report:
        print(f"  master: {report['master']}")
        return
    for w in report["workers"]:  # type: ignore[attr-defined]
        print(
            f"  {w['id']}: {w['state']}, {w['coresused']}/{w['cores']} cores, {w['memoryused']}/{w['memory']} MB used"
        )
    for a in report["applications"]:  # type: ignore[attr-defined]
        print(f"  application {a['id']} {a['name']}: {a['state']}, {a['cores']} cores")
