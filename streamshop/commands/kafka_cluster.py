"""`streamshop kafka-cluster fetch|start|stop|status`, `scenario` and `kafka-tool`: Apache Kafka
itself on loopback (streamshop.kafka_cluster, imported when a command runs)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from streamshop.commands._common import SubParsers

__all__ = ["register"]

DEFAULT_DIR = Path("data/kafka-cluster")


def register(sub: SubParsers) -> None:
    p = sub.add_parser(
        "kafka-cluster",
        help="run Apache Kafka itself (KRaft, from Maven Central's jars) on loopback",
        description="A real Apache Kafka cluster of N nodes, each broker and controller (three of them "
        "voters), replication factor 3 and min.insync.replicas 2, for trying the stack and the "
        "replication scenarios on Kafka itself without Docker. Needs Java 17 and Maven.",
    )
    actions = p.add_subparsers(dest="kafka_action", required=True)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        a = actions.add_parser(name, help=help_text)
        if name != "fetch":
            a.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"cluster directory (default {DEFAULT_DIR})")
        a.set_defaults(func=_run)
        return a

    action("fetch", "resolve Apache Kafka's jars with mvn into the project's cache and say where")
    start = action("start", "start the cluster (made and formatted the first time) and wait until it is ready")
    start.add_argument("--nodes", type=int, default=3, help="nodes, 1 to 9 (default 3; the first three vote)")
    start.add_argument("--base-port", type=int, help="node n listens on BASE+2(n-1), its controller on the next port")
    start.add_argument("--heap-mb", type=int, default=384, help="heap of each JVM (default 384)")
    start.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="broker setting, every node")
    start.add_argument(
        "--secure",
        type=Path,
        metavar="STACK_DIR",
        help="secured as `streamshop up --secure --data-dir STACK_DIR` expects: SASL_SSL with its certificates "
        "and its operator as the super user, ACLs enforced (made first when missing)",
    )
    action("stop", "stop every node (SIGTERM, then SIGKILL after a minute)")
    st = action("status", "nodes, brokers, the active controller, under-replicated and offline partitions")
    st.add_argument("--json", action="store_true")

    sc = sub.add_parser(
        "scenario",
        help="break a running kafka-cluster as the replication documents describe, and say what happens",
        description="Runs one scenario against the cluster of `streamshop kafka-cluster` in --dir while "
        "acks=all keyed traffic runs: leader-kill, controller-kill, unclean-election (three nodes or more), "
        "two-down (five nodes: kafka-cluster start --nodes 5). Prints leader, ISR, quorum and producer "
        "outcomes as they happen, puts the nodes back, and counts acknowledged records missing at the end.",
    )
    sc.add_argument("name", choices=["leader-kill", "controller-kill", "unclean-election", "two-down"])
    sc.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"cluster directory (default {DEFAULT_DIR})")
    sc.add_argument("--topic", help="topic to create for it (default scenario.NAME.DATE-TIME; must not exist)")
    sc.set_defaults(func=_run_scenario)

    from streamshop.kafka_tools import TOOLS  # a table: cheap to import at parse time

    tool = sub.add_parser(
        "kafka-tool",
        help="run one of Apache Kafka's own command-line tools (kafka-topics, kafka-consumer-groups, ...)",
        description="Runs Kafka's tool NAME, as bin/NAME.sh would, from the jars of `kafka-cluster fetch` "
        "(resolved on first use): against the bundled broker or any Kafka cluster. Example: streamshop "
        "kafka-tool kafka-topics --bootstrap-server 127.0.0.1:9092 --describe",
    )
    tool.add_argument("tool_name", metavar="NAME", choices=sorted(TOOLS), help=", ".join(sorted(TOOLS)))
    tool.add_argument("tool_args", nargs=argparse.REMAINDER, metavar="ARGS", help="the tool's own arguments")
    tool.set_defaults(func=_run_tool)


def _run_tool(args: argparse.Namespace) -> int:
    from streamshop import kafka_tools
    from streamshop.clients import CommandError, warn

    try:
        return kafka_tools.run(args.tool_name, *args.tool_args, capture=False).returncode
    except CommandError as e:
        warn("kafka-tool", str(e))
        return 2


def _run(args: argparse.Namespace) -> int:
    from streamshop import kafka_cluster as kc
    from streamshop import kafka_jars
    from streamshop.clients import CommandError, warn

    try:
        if args.kafka_action == "fetch":
            print(kafka_jars.resolve(quiet=False))
            return 0
        if args.kafka_action == "start":
            settings = {}
            for item in args.set:
                key, sep, value = item.partition("=")
                if not sep:
                    raise CommandError(f"--set {item!r}: expected KEY=VALUE")
                settings[key.strip()] = value.strip()
            security = None
            if args.secure is not None:
                from streamshop.stack.secure import ADMIN, SecureStack

                material = SecureStack.load_or_create(args.secure.resolve() / "secure")
                security = kc.ClusterSecurity(
                    str(material.keystore("broker")), str(material.ca.cert_path), ADMIN, material.kafka_passwords[ADMIN]
                )
            cluster = kc.start(
                args.dir,
                nodes=args.nodes,
                base_port=args.base_port,
                heap_mb=args.heap_mb,
                settings=settings,
                security=security,
            )
            nodes = len(cluster.nodes)
            print(f"Apache Kafka {kafka_jars.KAFKA_VERSION}: {nodes} nodes ready, bootstrap {cluster.bootstrap}")
            return 0
        if args.kafka_action == "stop":
            cluster = kc.stop(args.dir)
            print(f"stopped {len(cluster.nodes)} nodes in {args.dir}")
            return 0
        report = kc.status(args.dir)
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            _print_status(report)
        return 0 if "error" not in report else 1
    except CommandError as e:
        warn("kafka-cluster", str(e))
        return 1


def _run_scenario(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from streamshop import kafka_cluster as kc
    from streamshop.clients import CommandError, warn
    from streamshop.scenarios import SCENARIOS

    try:
        cluster = kc.Cluster.load(args.dir)
        kc.wait_ready(cluster, 30)
        # A new topic each run, so that a scenario can be run again on the same cluster.
        topic = args.topic or f"scenario.{args.name}.{time.strftime('%Y%m%d-%H%M%S')}"
        result = SCENARIOS[args.name](cluster, print, topic=topic)
    except (CommandError, KafkaException) as e:
        warn("scenario", str(e))
        return 1
    print(json.dumps(result, indent=2, default=repr))
    return 0


def _print_status(report: dict[str, object]) -> None:
    print(f"Apache Kafka {report['version']} in {report['directory']}")
    for node in report["nodes"]:  # type: ignore[attr-defined]
        state = f"running (pid {node['pid']})" if node["running"] else "stopped"
        role = "broker+controller" if node["voter"] else "broker"
        print(f"  node {node['node_id']}  {node['bootstrap']:<21} {role:<18} {state}")
    if "error" in report:
        print(f"  {report['error']}")
    elif "brokers" in report:
        print(
            f"  brokers {report['brokers']}, active controller {report['controller']}, {report['topics']} topics, "
            f"{report['under_replicated_partitions']} under-replicated and {report['offline_partitions']} "
            "offline partitions"
        )
