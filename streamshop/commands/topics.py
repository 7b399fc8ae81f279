"""`streamshop topics`: create, list, describe, delete and alter topics (streamshop.topics)."""

from __future__ import annotations

import argparse

from streamshop.commands._common import SubParsers, client_options, lazy


def register(sub: SubParsers) -> None:
    topics = sub.add_parser("topics", help="create, list, describe, delete and alter topics")
    client_options(topics)
    topics.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for the broker (default 15)")
    actions = topics.add_subparsers(dest="action", required=True)

    def action(name: str, help_text: str, function: str | None = None) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
        client_options(parser, suppress=True)
        parser.set_defaults(func=lazy("streamshop.topics", function or name, "topics", needs_broker=True))
        return parser

    create = action("create", "create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, help="partition count (default: the broker's num.partitions)")
    create.add_argument("--replication-factor", type=int, help="replicas per partition (default: the broker's)")
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="topic config (repeatable)")
    create.add_argument("--if-not-exists", action="store_true", help="succeed when the topic already exists")

    list_ = action("list", "list topics and their partition counts", "list_")
    list_.add_argument("--json", action="store_true", help="JSON output")

    describe = action("describe", "partitions, log start/end offsets and configs of topics")
    describe.add_argument("names", nargs="+", metavar="NAME")
    describe.add_argument("--json", action="store_true", help="JSON output")

    delete = action("delete", "delete topics")
    delete.add_argument("names", nargs="+", metavar="NAME")
    delete.add_argument("--if-exists", action="store_true", help="succeed for topics that do not exist")

    alter = action("alter", "change topic configs (--set/--delete) or add partitions (--partitions)")
    alter.add_argument("name")
    alter.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="set a config (repeatable)")
    alter.add_argument(
        "--delete",
        action="append",
        default=[],
        metavar="KEY",
        help="remove a config override, back to the default (repeatable)",
    )
    alter.add_argument("--partitions", type=int, help="new, larger partition count")
