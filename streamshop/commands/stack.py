"""`streamshop up` (the local stack, supervised: streamshop.stack) and `streamshop demo` (traffic against it)."""

from __future__ import annotations

import argparse

from broker.config import DURABILITY_MODES
from streamshop.commands._common import SubParsers, lazy


def _count(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return number


def _demo_traffic_options(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """--orders/--otp for `demo`, --demo-orders/--demo-otp for `up --demo`."""
    p.add_argument(f"--{prefix}orders", type=_count, default=50, metavar="N", help="orders to walk (default 50)")
    p.add_argument(f"--{prefix}otp", type=_count, default=10, metavar="N", help="OTPs to request (default 10)")


def _up(sub: SubParsers) -> None:
    p = sub.add_parser(
        "up",
        help="run the whole local stack (broker, registry, catcher, services) as supervised child processes",
        description="Start the broker, schema registry, SMTP catcher and every service as child processes, wait "
        "until each is ready, print their URLs, restart a child that exits (with backoff) and stop everything "
        "in reverse order on Ctrl-C or SIGTERM. DIR/stack.json describes the running stack.",
    )
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="default ./data/stack; with --bootstrap, ./data/stack-HOST-PORT of its first server, so that the "
        "bundled broker's runs (their offsets and Spark checkpoints) and each cluster's stay apart",
    )
    p.add_argument(
        "--ephemeral-ports",
        action="store_true",
        help="free ports instead of the fixed ones, below the kernel's ephemeral range (read them from the output "
        "or DIR/stack.json)",
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
        "--postgres",
        nargs="?",
        const="",
        metavar="URL",
        help="run the services on PostgreSQL, a database each: a server of the stack's own (DIR/postgres, from "
        "Debian's package), or the server of URL (postgresql://USER:PASSWORD@HOST:PORT/NAME; databases made "
        "when missing, which needs CREATEDB)",
    )
    p.add_argument(
        "--durability",
        choices=DURABILITY_MODES,
        help="when the bundled broker answers acks=all produce, commits and transactions: after fsync (its "
        "default), or once written to the page cache, as Kafka on one replica (docs/broker.md, Durability)",
    )
    p.add_argument(
        "--spark-cluster",
        nargs="?",
        const="",
        metavar="DIR|URL",
        help="run the analytics job on a Spark standalone cluster: the one `streamshop spark-cluster start` runs "
        "from DIR (default ./data/spark-cluster), or the master spark://HOST:PORT",
    )
    p.add_argument(
        "--scale",
        metavar="SERVICE=N[,...]",
        help="run N instances of orders, otp, logs, sms-sender or email-sender (needs --postgres), e.g. "
        "orders=3,otp=2: the HTTP ones share their port (SO_REUSEPORT), the consumers share their groups",
    )
    p.add_argument(
        "--start-timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds the broker, the registry or a service may take to be ready (60)",
    )
    p.add_argument(
        "--jvm-start-timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds a child that starts a JVM (the analytics job, Zipkin) may take to be ready before it is "
        "reported as slow (300); the stack serves without it meanwhile and waits on for it unless it exits",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="stream every child's output to the console too (it always goes to DIR/output/CHILD.log)",
    )
    p.add_argument(
        "--stop-timeout",
        type=float,
        metavar="S",
        help="seconds every child has after SIGTERM before SIGKILL (default: each its own, 5 for a service and "
        "the registry, 10 for the broker, which closes its logs, 15 for the analytics job, which finishes its batch)",
    )
    p.add_argument(
        "--secure",
        action="store_true",
        help="a local CA and certificates, one SCRAM user per child with least-privilege ACLs, every Kafka "
        "connection over SASL_SSL, the registry on HTTPS with basic auth, API keys on the services and a "
        "sign-in on the dashboard; everything made once under DIR/secure",
    )
    p.add_argument(
        "--observability",
        action="store_true",
        help="two more children, started first: Zipkin (traces; every other child exports its spans there) and "
        "Prometheus (scraping every child's metrics every 2 s, its data in DIR/prometheus), both on 127.0.0.1",
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
    p.set_defaults(func=lazy("streamshop.stack.supervisor", "up", "up"))


def _demo(sub: SubParsers) -> None:
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
    p.set_defaults(func=lazy("streamshop.stack.demo", "demo", "demo"))


def register(sub: SubParsers) -> None:
    _up(sub)
    _demo(sub)
