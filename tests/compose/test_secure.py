"""The `secure` profile (`--profile bundled --profile secure`): the set-up writes certificates,
logins and keys into the `secure` volume and every process applies its settings file.  Through
the published ports: 401 without credentials (orders, registry, catcher, dashboard); the
operator's key and logins from credentials.json work; an order is a keyed Avro event read over
SASL_SSL inside the network and decoded through the registry's https port with its login."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from tests.compose.conftest import running
from tests.compose.stackcheck import CATCHER, DASHBOARD, ORDERS, REGISTRY, http, otp_delivered, post_order, read_orders
from tests.support.docker import Compose

pytestmark = pytest.mark.compose

SECURE = "/var/lib/streamshop/secure"
REGISTRY_TLS = REGISTRY.replace("http://", "https://")


@pytest.fixture(scope="module")
def stack(docker_host: str, images: None) -> Iterator[Compose]:
    project = Compose(docker_host, "streamshop-test", profiles=("bundled", "secure"))
    with running(project, "up --wait, secure profile") as up:
        yield up


@pytest.fixture(scope="module")
def credentials(stack: Compose) -> dict[str, Any]:
    """The operator's logins and keys, read as docs/security.md tells the operator to."""
    return dict(json.loads(stack.exec("orders", "cat", f"{SECURE}/credentials.json")))


@pytest.fixture(scope="module")
def ca(stack: Compose, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secure") / "ca.pem"
    path.write_text(stack.exec("orders", "cat", f"{SECURE}/pki/ca.pem"))
    return path


def test_every_published_api_refuses_a_request_without_credentials(stack: Compose, ca: Path) -> None:
    assert http("POST", f"{ORDERS}/orders", {"customer_id": "x"})[0] == 401
    assert http("GET", f"{CATCHER}/sms")[0] == 401
    assert http("GET", f"{DASHBOARD}/api/snapshot")[0] == 401
    context = ssl.create_default_context(cafile=str(ca))
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{REGISTRY_TLS}/subjects", context=context, timeout=10)
    with refused.value as answer:  # closes the connection it holds
        assert answer.code == 401


def test_the_operators_key_and_logins_work(stack: Compose, credentials: dict[str, Any], ca: Path) -> None:
    key = {"Authorization": f"Bearer {credentials['api_keys']['admin']}"}
    order_id = post_order(1, key)
    otp_delivered(key)
    registry = SchemaRegistryClient(
        {
            "url": REGISTRY_TLS,
            "ssl.ca.location": str(ca),
            "basic.auth.user.info": f"admin:{credentials['registry']['admin']}",
        }
    )
    security = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "admin",
        "sasl.password": credentials["kafka"]["admin"],
        "ssl.ca.location": f"{SECURE}/pki/ca.pem",
    }
    try:
        assert any(subject.startswith("orders-") for subject in registry.get_subjects())  # record-name strategy
        found = read_orders(stack, {order_id}, registry=registry, security=security)
    finally:
        registry.close()
    assert found.keys() == {order_id}
