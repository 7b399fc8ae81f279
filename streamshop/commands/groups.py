"""`streamshop groups`: consumer and share groups, like kafka-consumer-groups.sh and
kafka-share-groups.sh (streamshop.groups)."""

from __future__ import annotations

import argparse

from streamshop.commands._common import SubParsers, client_options, lazy


def register(sub: SubParsers) -> None:
    groups = sub.add_parser(
        "groups",
        help="list, describe and delete consumer groups, reset their offsets",
        description="Consumer groups, like kafka-consumer-groups.sh: describe shows per partition the committed "
        "offset, log end offset and lag, and the members with their assignments; for a share group (type share) "
        "the start offset, log end offset, lag and records in flight.",
    )
    client_options(groups)
    groups.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for the broker (default 15)")
    actions = groups.add_subparsers(dest="action", required=True)

    def action(name: str, help_text: str, function: str, module: str = "streamshop.groups") -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(name, help=help_text, description=help_text)
        client_options(parser, suppress=True)
        parser.set_defaults(func=lazy(module, function, "groups", needs_broker=True))
        return parser

    list_ = action("list", "list groups with their state and protocol type", "list_")
    list_.add_argument("--json", action="store_true", help="JSON output")

    describe = action(
        "describe", "committed offset, log end offset and lag per partition; members and assignments", "describe"
    )
    describe.add_argument("groups", nargs="+", metavar="GROUP")
    describe.add_argument("--json", action="store_true", help="JSON output")
    describe.add_argument(
        "--admin-url",
        metavar="URL",
        help="the bundled broker's admin API (its http://HOST:PORT): share groups are read from it, with their exact "
        "lag and records in flight, which Kafka's protocol does not carry",
    )

    delete = action("delete", "delete groups without active members, with their committed offsets", "delete")
    delete.add_argument("groups", nargs="+", metavar="GROUP")

    reset = action(
        "reset-offsets",
        "plan new committed offsets for groups' partitions and, with --execute, commit them (like "
        "kafka-consumer-groups.sh --reset-offsets: without --execute nothing changes); refused while a group has "
        "active members",
        "reset_offsets",
        "streamshop.reset_offsets",
    )
    reset.add_argument("groups", nargs="*", metavar="GROUP", help="group(s) to reset (or --group, --all-groups)")
    reset.add_argument("--group", action="append", default=[], help="group to reset (repeatable)")
    reset.add_argument("--all-groups", action="store_true", help="every group of the cluster")
    reset.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="NAME[:P,P...]",
        help="topic to reset, optionally only some partitions (repeatable)",
    )
    reset.add_argument("--all-topics", action="store_true", help="every topic the group has committed offsets for")
    reset.add_argument(
        "--partition", type=int, action="append", help="only this partition (repeatable; default: all partitions)"
    )
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument("--to-current", action="store_true", help="the committed offset (the log end where none)")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N (moved into the log's range if outside it)")
    to.add_argument(
        "--shift-by", type=int, metavar="N", help="the committed offset plus N (negative: back), kept in the log"
    )
    to.add_argument(
        "--to-datetime",
        metavar="ISO8601",
        help="the first record at or after this time, e.g. 2026-01-31T12:00:00Z (no offset: local time)",
    )
    to.add_argument(
        "--by-duration", metavar="PnDTnHnMnS", help="the first record at or after now minus this duration, e.g. PT15M"
    )
    to.add_argument("--to-timestamp", type=int, metavar="MS", help="the first record at or after this epoch time in ms")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only show the plan (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    reset.add_argument("--export", action="store_true", help="print the plan as CSV (topic,partition,offset)")
