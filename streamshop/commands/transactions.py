"""`streamshop transactions list|describe|find-hanging`: transactions, like kafka-transactions.sh
(streamshop.transactions)."""

from __future__ import annotations

import argparse

from streamshop.commands._common import SubParsers, client_options, lazy

__all__ = ["register"]


def register(sub: SubParsers) -> None:
    txns = sub.add_parser(
        "transactions",
        help="list, describe and find hanging transactions",
        description="Transactions, like kafka-transactions.sh: describe shows each open transaction's partitions "
        "with the LSO lag it causes (records read_committed consumers wait for).",
    )
    client_options(txns)
    txns.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for the broker (default 15)")
    actions = txns.add_subparsers(dest="action", required=True)

    def action(name: str, help_text: str, function: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(name, help=help_text, description=help_text)
        client_options(parser, suppress=True)
        parser.add_argument("--json", action="store_true", help="JSON output")
        parser.set_defaults(func=lazy("streamshop.transactions", function, "transactions", needs_broker=True))
        return parser

    listing = action("list", "transactional ids with their producer id and state", "list_")
    listing.add_argument("--state", action="append", default=[], help="only this state, e.g. Ongoing (repeatable)")
    listing.add_argument(
        "--producer-id", type=int, action="append", default=[], help="only this producer id (repeatable)"
    )
    described = action("describe", "state, epoch, timeout, duration and per-partition LSO lag", "describe")
    described.add_argument("transactional_ids", nargs="+", metavar="TRANSACTIONAL-ID")
    hanging = action("find-hanging", "open transactions older than --max-timeout-ms (exit 1 when any)", "find_hanging")
    hanging.add_argument("--max-timeout-ms", type=int, default=900_000, help="default 900000, Kafka's maximum")
