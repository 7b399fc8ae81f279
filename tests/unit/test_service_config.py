"""Service settings: env parsing by prefix and type, errors naming the variable, masked secrets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from services.common.config import DEFAULT_PORTS, ConfigError, ServiceConfig, secret


@dataclass(frozen=True)
class OrdersConfig(ServiceConfig):
    # No repr=False here on purpose: the dataclass-generated repr must still hide secrets.
    service_name: ClassVar[str] = "orders"
    port: int = DEFAULT_PORTS["orders"]
    database_path: Path = Path("data/orders.db")
    smtp_password: str | None = secret()
    retries: int = 3
    ratio: float = 0.5
    topics: tuple[str, ...] = ("orders",)


@dataclass(frozen=True)
class SmsSenderConfig(ServiceConfig):
    service_name: ClassVar[str] = "sms-sender"


def test_defaults_follow_the_design_ports() -> None:
    config = OrdersConfig.from_env({})
    assert config.port == 8001
    assert config.bootstrap_servers == "127.0.0.1:9092"
    assert config.registry_url == "http://127.0.0.1:8081"
    assert config.database_path == Path("data/orders.db")
    assert config.kafka_security_protocol == "PLAINTEXT"


def test_every_field_is_read_from_its_prefixed_variable_and_parsed_by_type() -> None:
    config = OrdersConfig.from_env(
        {
            "ORDERS_LISTEN": "0.0.0.0",
            "ORDERS_PORT": "9001",
            "ORDERS_BOOTSTRAP_SERVERS": "kafka-1:9092,kafka-2:9092",
            "ORDERS_DATABASE_PATH": "/var/lib/orders.db",
            "ORDERS_LOG_SHIPPING": "off",
            "ORDERS_RETRIES": "10_000",
            "ORDERS_RATIO": "0.25",
            "ORDERS_TOPICS": "orders, orders.dlq ,",
            "OTP_PORT": "1",  # another service's prefix: ignored
        }
    )
    assert config.listen == "0.0.0.0"
    assert config.port == 9001
    assert config.bootstrap_servers == "kafka-1:9092,kafka-2:9092"
    assert config.database_path == Path("/var/lib/orders.db")
    assert config.log_shipping is False
    assert config.retries == 10_000
    assert config.ratio == 0.25
    assert config.topics == ("orders", "orders.dlq")
    assert config.http_url == "http://127.0.0.1:9001"


def test_prefix_comes_from_the_service_name_or_is_given() -> None:
    assert SmsSenderConfig.from_env({"SMS_SENDER_PORT": "8100"}).port == 8100
    assert OrdersConfig.from_env({"SHOP_PORT": "8200"}, prefix="SHOP").port == 8200


def test_all_invalid_variables_are_reported_at_once_by_name() -> None:
    with pytest.raises(ConfigError) as info:
        OrdersConfig.from_env({"ORDERS_PORT": "eighty", "ORDERS_LOG_SHIPPING": "maybe", "ORDERS_RATIO": "x"})
    message = str(info.value)
    assert "ORDERS_PORT: expected an integer, got 'eighty'" in message
    assert "ORDERS_LOG_SHIPPING: expected a boolean" in message
    assert "ORDERS_RATIO: expected a number" in message
    assert len(info.value.problems) == 3


def test_choices_are_case_insensitive_and_canonicalised_and_others_refused() -> None:
    config = OrdersConfig.from_env({"ORDERS_KAFKA_SECURITY_PROTOCOL": "sasl_ssl", "ORDERS_LOG_LEVEL": "DEBUG"})
    assert config.kafka_security_protocol == "SASL_SSL"
    assert config.log_level == "debug"
    with pytest.raises(ConfigError, match="ORDERS_KAFKA_SECURITY_PROTOCOL: expected one of PLAINTEXT"):
        OrdersConfig.from_env({"ORDERS_KAFKA_SECURITY_PROTOCOL": "TLS"})


def test_an_empty_variable_unsets_an_optional_setting() -> None:
    assert OrdersConfig.from_env({"ORDERS_KAFKA_SASL_USERNAME": ""}).kafka_sasl_username is None


def test_secrets_never_appear_in_repr_str_or_the_log_dict() -> None:
    config = OrdersConfig.from_env(
        {
            "ORDERS_KAFKA_SASL_PASSWORD": "hunter2",
            "ORDERS_SMTP_PASSWORD": "s3cret",
            "ORDERS_REGISTRY_URL": "https://svc:p4ss@registry.example:8081",
        }
    )
    assert config.kafka_sasl_password == "hunter2"  # the value itself is intact
    for text in (repr(config), str(config), str(config.as_log_dict())):
        assert "hunter2" not in text
        assert "s3cret" not in text
        assert "p4ss" not in text
    logged = config.as_log_dict()
    assert logged["kafka_sasl_password"] == "***"
    assert logged["kafka_ssl_key_password"] is None  # unset secrets show as unset
    assert logged["registry_url"] == "https://svc:***@registry.example:8081"


def test_plaintext_kafka_needs_only_bootstrap_servers() -> None:
    kwargs = OrdersConfig.from_env({"ORDERS_BOOTSTRAP_SERVERS": "kafka:9092"}).kafka_client_kwargs()
    assert kwargs == {"bootstrap_servers": "kafka:9092", "security_protocol": "PLAINTEXT"}


def test_sasl_settings_pass_through_to_the_kafka_client() -> None:
    config = OrdersConfig.from_env(
        {
            "ORDERS_BOOTSTRAP_SERVERS": "kafka:9094",
            "ORDERS_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "ORDERS_KAFKA_SASL_MECHANISM": "scram-sha-512",
            "ORDERS_KAFKA_SASL_USERNAME": "orders",
            "ORDERS_KAFKA_SASL_PASSWORD": "pw",
        }
    )
    assert config.kafka_client_kwargs() == {
        "bootstrap_servers": "kafka:9094",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "orders",
        "sasl_plain_password": "pw",
    }


def test_ssl_protocols_get_a_verifying_tls_context() -> None:
    kwargs = OrdersConfig.from_env({"ORDERS_KAFKA_SECURITY_PROTOCOL": "SSL"}).kafka_client_kwargs()
    assert kwargs["ssl_context"].check_hostname is True
