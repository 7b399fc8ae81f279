"""`streamshop roundtrip`: a broker and a registry, records and Avro events round-tripped (streamshop.roundtrip)."""

from __future__ import annotations

from streamshop.commands._common import SubParsers, lazy


def register(sub: SubParsers) -> None:
    p = sub.add_parser(
        "roundtrip",
        help="start a broker and a schema registry, round-trip 1,000 records and 100 Avro events, report",
    )
    p.add_argument(
        "--data-dir", default="./data/roundtrip", help="default ./data/roundtrip (broker data in DIR/broker)"
    )
    p.add_argument("--listen", default="127.0.0.1:9092", help="broker HOST:PORT (port 0: any free port)")
    p.add_argument(
        "--admin-listen", help="admin HTTP HOST:PORT (default HOST:9644, or HOST:0 when --listen uses port 0)"
    )
    p.add_argument(
        "--registry-listen", help="schema registry HOST:PORT (default HOST:8081, or HOST:0 when --listen uses port 0)"
    )
    p.add_argument(
        "--exit",
        action="store_true",
        help="stop the broker and registry after the report instead of waiting for Ctrl-C",
    )
    p.set_defaults(func=lazy("streamshop.roundtrip", "roundtrip", "roundtrip"))
