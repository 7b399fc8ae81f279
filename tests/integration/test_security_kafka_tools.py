"""Apache Kafka's own tools against the secured broker: users with kafka-configs, ACLs with
kafka-acls, and the console producer and consumer authenticating with SCRAM over TLS and with
PLAIN, exactly as they would against a Kafka cluster."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from streamshop.pki import LocalCA
from tests.support import kafka_tools as kt
from tests.support.harness import ThreadBroker
from tests.support.secure import ADMIN, ADMIN_PASSWORD, SecureBroker, make_admin_user, secure_settings

pytestmark = pytest.mark.kafka


@pytest.fixture
def secure(tmp_path: Path, broker_factory: Callable[..., ThreadBroker]) -> SecureBroker:
    ca = LocalCA(tmp_path / "pki")
    server = ca.issue("broker", hosts=("127.0.0.1", "localhost"))
    make_admin_user(tmp_path / "broker")
    return SecureBroker(broker_factory(settings=secure_settings(ca, server), name="broker"), ca, tmp_path)


def test_users_acls_and_console_clients_with_kafkas_tools(secure: SecureBroker) -> None:
    ssl_address = secure.address("SASL_SSL")
    admin = secure.java_properties("admin", "SASL_SSL", ADMIN, ADMIN_PASSWORD, "SCRAM-SHA-512")
    # One mechanism per command: Kafka refuses a user named twice in one request, and so does the broker.
    both = "SCRAM-SHA-256=[iterations=8192,password=carol-pw],SCRAM-SHA-512=[password=carol-pw]"
    refused = kt.fails(
        "kafka-configs", "--bootstrap-server", ssl_address, "--command-config", str(admin),
        "--alter", "--entity-type", "users", "--entity-name", "carol", "--add-config", both,
    )  # fmt: skip
    assert "A user credential cannot be altered twice in the same request" in refused
    for config in both.split("],"):
        kt.run(
            "kafka-configs", "--bootstrap-server", ssl_address, "--command-config", str(admin),
            "--alter", "--entity-type", "users", "--entity-name", "carol",
            "--add-config", config if config.endswith("]") else config + "]",
        )  # fmt: skip
    described = kt.run(
        "kafka-configs", "--bootstrap-server", ssl_address, "--command-config", str(admin),
        "--describe", "--entity-type", "users", "--entity-name", "carol",
    )  # fmt: skip
    assert "SCRAM-SHA-256=iterations=8192" in described
    assert "SCRAM-SHA-512=iterations=4096" in described
    kt.run(
        "kafka-acls", "--bootstrap-server", ssl_address, "--command-config", str(admin),
        "--add", "--allow-principal", "User:carol", "--producer", "--consumer",
        "--topic", "tools.", "--resource-pattern-type", "prefixed", "--group", "tools.carol",
    )  # fmt: skip
    listed = kt.run(
        "kafka-acls", "--bootstrap-server", ssl_address, "--command-config", str(admin),
        "--list", "--principal", "User:carol",
    )  # fmt: skip
    for operation in ("WRITE", "CREATE", "DESCRIBE", "READ"):
        assert f"operation={operation}" in listed
    assert "patternType=PREFIXED" in listed

    lines = [f"k{i}:v{i}" for i in range(20)]
    scram = secure.java_properties("carol-scram", "SASL_SSL", "carol", "carol-pw", "SCRAM-SHA-256")
    kt.run(
        "kafka-console-producer", "--bootstrap-server", ssl_address, "--topic", "tools.secure",
        "--producer.config", str(scram), "--property", "parse.key=true", "--property", "key.separator=:",
        stdin="\n".join(lines) + "\n",
    )  # fmt: skip
    plain = secure.java_properties("carol-plain", "SASL_PLAINTEXT", "carol", "carol-pw", "PLAIN")
    out = kt.run(
        "kafka-console-consumer", "--bootstrap-server", secure.address("SASL_PLAINTEXT"), "--topic", "tools.secure",
        "--consumer.config", str(plain), "--from-beginning", "--max-messages", "20", "--group", "tools.carol",
        "--property", "print.key=true", "--property", "key.separator=:",
    )  # fmt: skip
    assert sorted(out.splitlines()) == sorted(lines)

    # a principal without ACLs: the console producer reports the authorization failure
    kt.run(
        "kafka-configs", "--bootstrap-server", ssl_address, "--command-config", str(admin),
        "--alter", "--entity-type", "users", "--entity-name", "dave",
        "--add-config", "SCRAM-SHA-512=[password=dave-pw]",
    )  # fmt: skip
    dave = secure.java_properties("dave", "SASL_SSL", "dave", "dave-pw", "SCRAM-SHA-512")
    denied = kt.fails(
        "kafka-topics", "--bootstrap-server", ssl_address, "--command-config", str(dave),
        "--create", "--topic", "tools.dave", "--partitions", "1",
    )  # fmt: skip
    assert "TopicAuthorizationException" in denied or "not authorized" in denied.lower()
    wrong = secure.java_properties("wrong", "SASL_SSL", "dave", "not-dave", "SCRAM-SHA-512")
    refused = kt.fails(
        "kafka-topics", "--bootstrap-server", ssl_address, "--command-config", str(wrong), "--list", timeout=60,
    )  # fmt: skip
    assert "SaslAuthenticationException" in refused or "Authentication failed" in refused
