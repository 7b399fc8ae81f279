"""A broker with every kind of listener, a local CA, an admin user and an authorizer; and
client settings for each Python client and Kafka's Java tools."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from broker.protocol.errors import ErrorCode
from broker.security.scram import ScramClient
from streamshop.pki import Issued, LocalCA
from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import KafkaConnection

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
LISTENERS = "SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0"


def secure_settings(ca: LocalCA, server: Issued, **extra: str) -> dict[str, str]:
    return {
        "listeners": LISTENERS,
        "ssl.keystore.location": str(server.keystore),
        "ssl.truststore.location": str(ca.cert_path),
        "ssl.client.auth": "requested",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{ADMIN}",
        **extra,
    }


@dataclass
class SecureBroker:
    broker: ThreadBroker
    ca: LocalCA
    directory: Path

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.broker.server.ports[listener]}"

    def confluent(
        self, listener: str, user: str | None = None, password: str | None = None, mechanism: str = "SCRAM-SHA-512"
    ) -> dict[str, Any]:
        conf: dict[str, Any] = {"bootstrap.servers": self.address(listener), "security.protocol": listener}
        if "SSL" in listener:
            conf["ssl.ca.location"] = str(self.ca.cert_path)
        if user is not None:
            conf |= {"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
        return conf

    def admin(self, listener: str = "SASL_SSL") -> dict[str, Any]:
        return self.confluent(listener, ADMIN, ADMIN_PASSWORD)

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca.cert_path))

    def aiokafka(self, listener: str, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap_servers": self.address(listener),
            "security_protocol": listener,
            "sasl_mechanism": mechanism,
            "sasl_plain_username": user,
            "sasl_plain_password": password,
        }
        if "SSL" in listener:
            conf["ssl_context"] = self.ssl_context()
        return conf

    def java_properties(self, name: str, listener: str, user: str, password: str, mechanism: str) -> Path:
        """A client config file for Kafka's tools (`--command-config`, `--producer.config`)."""
        login = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if mechanism == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        lines = [
            f"security.protocol={listener}",
            f"sasl.mechanism={mechanism}",
            f'sasl.jaas.config={login} required username="{user}" password="{password}";',
        ]
        if "SSL" in listener:
            lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={self.ca.cert_path}"]
        path = self.directory / f"{name}.properties"
        path.write_text("\n".join(lines) + "\n")
        return path


def make_admin_user(data_dir: Path) -> None:
    """The first user, written offline as an operator would (`streamshop broker users set`)."""
    from streamshop.cli import main

    password_file = data_dir.parent / "admin.password"
    password_file.write_text(ADMIN_PASSWORD + "\n")
    assert (
        main(["broker", "users", "--data-dir", str(data_dir), "set", ADMIN, "--password-file", str(password_file)]) == 0
    )


def tls_connection(secure: SecureBroker, listener: str = "SASL_SSL") -> KafkaConnection:
    """A raw Kafka connection over TLS to one of the broker's TLS listeners."""
    host, port = secure.address(listener).split(":")
    conn = KafkaConnection(host, int(port))
    conn.sock = secure.ssl_context().wrap_socket(conn.sock, server_hostname=host)
    return conn


def sasl_login(conn: KafkaConnection, mechanism: str, user: str, password: str) -> Any:
    """SaslHandshake v1 and SaslAuthenticate v2 exchanges; the last SaslAuthenticate response."""
    handshake = conn.request(SaslHandshakeRequest(mechanism=mechanism))
    assert handshake.error_code == ErrorCode.none, handshake
    if mechanism == "PLAIN":
        return conn.request(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()))
    client = ScramClient(mechanism, user, password)
    first = conn.request(SaslAuthenticateRequest(auth_bytes=client.first()))
    if first.error_code != ErrorCode.none:
        return first
    return conn.request(SaslAuthenticateRequest(auth_bytes=client.final(first.auth_bytes)))
