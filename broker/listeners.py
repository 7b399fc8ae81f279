"""Listeners as Kafka configures them: `listeners`, `advertised.listeners` and
`listener.security.protocol.map`.

`listeners=PLAINTEXT://127.0.0.1:9092,SECURE://0.0.0.0:9093` with
`listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL` gives two sockets; a
client is told the advertised address of the listener it connected to.
"""

from __future__ import annotations

from dataclasses import dataclass

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in PROTOCOLS)


class ListenerError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def parse_protocol_map(raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (p.strip() for p in raw.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in PROTOCOLS:
            raise ListenerError(f"{item!r} is not LISTENER_NAME:{'|'.join(PROTOCOLS)}")
        if name in out:
            raise ListenerError(f"listener {name} is mapped twice")
        out[name] = protocol
    return out


def parse_endpoints(raw: str) -> list[tuple[str, str, int]]:
    """`NAME://host:port,…` as (NAME, host, port); an empty host means all interfaces."""
    out: list[tuple[str, str, int]] = []
    for item in (p.strip() for p in raw.split(",")):
        if not item:
            continue
        name, sep, address = item.partition("://")
        host, colon, port = address.rpartition(":")
        if not sep or not name or not colon:
            raise ListenerError(f"{item!r} is not NAME://host:port")
        try:
            number = int(port)
        except ValueError:
            raise ListenerError(f"{item!r}: port {port!r} is not a number") from None
        if not 0 <= number <= 65535:
            raise ListenerError(f"{item!r}: port {number} is outside [0, 65535]")
        host = host.strip("[]") or "0.0.0.0"
        if any(n == name.upper() for n, _, _ in out):
            raise ListenerError(f"listener {name} is named twice")
        out.append((name.upper(), host, number))
    return out


def resolve(listeners: str, protocol_map: str) -> list[Listener]:
    mapping = parse_protocol_map(protocol_map)
    out = []
    for name, host, port in parse_endpoints(listeners):
        if name not in mapping:
            raise ListenerError(f"listener {name} has no security protocol in listener.security.protocol.map")
        out.append(Listener(name, mapping[name], host, port))
    if not out:
        raise ListenerError("listeners is empty")
    return out
