"""`streamshop produce` and `streamshop consume`: records from stdin and to stdout (streamshop.console)."""

from __future__ import annotations

import argparse

from streamshop.commands._common import SubParsers, client_options, lazy, registry_option

READ_FORMATS = ("auto", "avro", "json", "string", "bytes")  # streamshop.formats.Renderer
WRITE_FORMATS = ("string", "avro", "json")  # streamshop.formats.RecordEncoder


def _produce(sub: SubParsers) -> None:
    p = sub.add_parser(
        "produce",
        help="send stdin lines as records",
        description="Send one record per stdin line. Exit status 1 if a line was rejected or a delivery failed.",
    )
    client_options(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, help="send every record to this partition (default: by key)")
    p.add_argument(
        "--key-separator", metavar="SEP", help="parse lines as KEY<SEP>VALUE (lines without SEP are rejected)"
    )
    p.add_argument("--acks", choices=["all", "1", "0"], default="all", help="default all")
    p.add_argument("--header", action="append", default=[], metavar="KEY=VALUE", help="header on every record")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds a record may take to be delivered (default 30)")
    p.add_argument(
        "--value-format",
        choices=WRITE_FORMATS,
        default="string",
        help="string: send the line as it is (default); json: check it is JSON; avro: encode the JSON line "
        "with the subject's schema, Confluent-framed (decimals as strings or numbers, timestamps ISO 8601 "
        "or epoch ms)",
    )
    p.add_argument("--subject", help="registry subject of --value-format avro (default TOPIC-value)")
    p.add_argument("--schema-id", type=int, help="encode with this schema id instead of the subject's latest")
    registry_option(p)
    p.set_defaults(func=lazy("streamshop.console", "produce", "produce", needs_broker=True))


def _consume(sub: SubParsers) -> None:
    p = sub.add_parser(
        "consume",
        help="print records of a topic",
        description="Print record values, one per line. Without --group the partitions are "
        "assigned directly and no offsets are committed.",
    )
    client_options(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--from-beginning", action="store_true", help="start at the log start (default: the end)")
    p.add_argument("--partition", type=int, help="read only this partition")
    p.add_argument("--offset", type=int, help="start at this offset (needs --partition)")
    p.add_argument("--max-messages", type=int, help="stop after this many records")
    p.add_argument("--timeout", type=float, help="stop after this many seconds without a record")
    p.add_argument("--print-key", action="store_true", help="print KEY<TAB>VALUE")
    p.add_argument("--print-offset", action="store_true", help="print PARTITION:OFFSET<TAB> first")
    p.add_argument("--print-headers", action="store_true", help="print headers as K:V,K2:V2 (or NO_HEADERS)")
    p.add_argument("--print-schema-id", action="store_true", help="print the value's schema id (- if not Avro)")
    for part, default_text in (("value", "auto"), ("key", "auto")):
        p.add_argument(
            f"--{part}-format",
            choices=READ_FORMATS,
            default="auto",
            help=f"how to print the {part}: avro decodes Confluent-framed Avro to JSON through the registry, "
            f"json checks and compacts JSON, string decodes UTF-8, bytes prints what is stored; auto "
            f"(default {default_text}) is avro for Confluent-framed {part}s, else bytes",
        )
    registry_option(p)
    p.add_argument("--group", help="join this consumer group (subscribe; offsets are committed)")
    p.add_argument("--request-timeout", type=float, default=15.0, help=argparse.SUPPRESS)
    p.set_defaults(func=lazy("streamshop.console", "consume", "consume", needs_broker=True))


def register(sub: SubParsers) -> None:
    _produce(sub)
    _consume(sub)
