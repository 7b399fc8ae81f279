"""The registry with basic auth, roles and HTTPS, whose own Kafka clients log in with SCRAM
over TLS to a broker that authorizes them: read, write and admin roles as documented, 401 and
403 with Confluent's bodies, probes open, and confluent-kafka's SchemaRegistryClient and the
services' client working over HTTPS with credentials."""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType
from confluent_kafka.admin import ResourceType as Rt
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from kit.users import Users, UsersFileError, hash_password
from registry.app import RunningRegistry
from schemas.client import RegistryClient
from streamshop.pki import LocalCA
from tests.integration.test_security_clients import add_user, grant
from tests.support.harness import ThreadBroker
from tests.support.registry import V1, registry
from tests.support.secure import SecureBroker, make_admin_user, secure_settings

SCHEMA = '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}'
PASSWORDS = {"reader": "r-pw", "writer": "w-pw", "ops": "o-pw"}


@pytest.fixture
def secure(tmp_path: Path, broker_factory: Callable[..., ThreadBroker]) -> SecureBroker:
    ca = LocalCA(tmp_path / "pki")
    make_admin_user(tmp_path / "broker")
    broker = broker_factory(settings=secure_settings(ca, ca.issue("broker", hosts=("127.0.0.1",))), name="broker")
    sb = SecureBroker(broker, ca, tmp_path)
    admin = AdminClient(sb.admin())
    add_user(admin, "registry", "registry-pw")
    # What a registry needs: its topics, the group that elects the primary, the primary's
    # transactional id.
    for resource, name, operation in (
        (Rt.TOPIC, "_schemas", AclOperation.ALL),
        (Rt.TOPIC, "_schemas_ids", AclOperation.ALL),
        (Rt.GROUP, "schema-registry", AclOperation.READ),
        (Rt.TRANSACTIONAL_ID, "schema-registry", AclOperation.WRITE),
    ):
        grant(
            admin,
            AclBinding(
                resource, name, ResourcePatternType.LITERAL, "User:registry", "*", operation, AclPermissionType.ALLOW
            ),
        )
    return sb


@pytest.fixture
async def running(secure: SecureBroker, tmp_path: Path) -> AsyncIterator[RunningRegistry]:
    users = tmp_path / "registry.users"
    users.write_text(
        "# name: credential,role\n"
        f"reader: {hash_password(PASSWORDS['reader'], iterations=1000)},read\n"
        f"writer: {hash_password(PASSWORDS['writer'], iterations=1000)},write\n"
        f"ops: {PASSWORDS['ops']},read,admin\n"
    )
    cert = secure.ca.issue("registry", hosts=("127.0.0.1",))
    async with registry(
        secure.address("SASL_SSL"),
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username="registry",
        kafka_sasl_password="registry-pw",
        kafka_ssl_cafile=secure.ca.cert_path,
        users_file=users,
        ssl_certfile=cert.certificate,
        ssl_keyfile=cert.key,
    ) as reg:
        yield reg


def basic(user: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


async def call(
    reg: RunningRegistry, ca: LocalCA, method: str, path: str, user: str | None = None, *, body: object = None
) -> tuple[int, dict[str, object], dict[str, str]]:
    context = ssl.create_default_context(cafile=str(ca.cert_path))
    headers = {"Content-Type": V1, **(basic(user) if user else {})}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, reg.url + path, json=body, headers=headers, ssl=context) as response,
    ):
        return response.status, await response.json(content_type=None), dict(response.headers)


async def test_roles_decide_what_each_user_may_do(running: RunningRegistry, secure: SecureBroker) -> None:
    assert running.url.startswith("https://")
    ca = secure.ca
    status, body, headers = await call(running, ca, "GET", "/subjects")
    assert (status, body["error_code"]) == (401, 401)
    assert headers["WWW-Authenticate"].startswith("Basic realm=")
    wrong = {"Authorization": "Basic " + base64.b64encode(b"writer:nope").decode()}
    async with (
        aiohttp.ClientSession() as session,
        session.get(running.url + "/subjects", headers=wrong, ssl=secure.ssl_context()) as response,
    ):
        assert response.status == 401
    assert (await call(running, ca, "GET", "/healthz"))[0] == 200  # probes stay open

    register = ("POST", "/subjects/s-value/versions")
    status, body, _ = await call(running, ca, *register, "reader", body={"schema": SCHEMA})
    assert (status, body["error_code"]) == (403, 40301)
    status, body, _ = await call(running, ca, *register, "writer", body={"schema": SCHEMA})
    assert status == 200
    assert int(str(body["id"])) >= 1
    for user in ("reader", "writer", "ops"):
        assert (await call(running, ca, "GET", "/subjects", user))[1] == ["s-value"]  # type: ignore[comparison-overlap]
        status, _, _ = await call(running, ca, "POST", "/subjects/s-value", user, body={"schema": SCHEMA})
        assert status == 200, user  # a lookup is a read
        status, _, _ = await call(
            running, ca, "POST", "/compatibility/subjects/s-value/versions/latest", user, body={"schema": SCHEMA}
        )
        assert status == 200, user

    admin_only = [
        ("PUT", "/config", {"compatibility": "NONE"}),
        ("DELETE", "/subjects/s-value", None),
        ("PUT", "/mode", {"mode": "READONLY"}),  # last: a read-only registry refuses the delete
    ]
    for method, path, payload in admin_only:
        for user in ("reader", "writer"):
            status, body, _ = await call(running, ca, method, path, user, body=payload)
            assert (status, body["error_code"]) == (403, 40301), (method, path, user)
    assert (await call(running, ca, "GET", "/config", "reader"))[1]["compatibilityLevel"] == "BACKWARD"
    assert (await call(running, ca, "GET", "/subjects", "reader"))[1] == ["s-value"]  # type: ignore[comparison-overlap]
    for method, path, payload in admin_only:
        assert (await call(running, ca, method, path, "ops", body=payload))[0] == 200, (method, path)
    assert (await call(running, ca, "GET", "/subjects", "ops"))[1] == []  # type: ignore[comparison-overlap]


async def test_clients_register_over_https_with_credentials(running: RunningRegistry, secure: SecureBroker) -> None:
    conf = {
        "url": running.url,
        "basic.auth.user.info": f"writer:{PASSWORDS['writer']}",
        "ssl.ca.location": str(secure.ca.cert_path),
    }
    with SchemaRegistryClient(conf) as confluent:
        # A blocking client: in a thread, off the loop the registry serves on.
        schema_id = await asyncio.to_thread(confluent.register_schema, "c-value", Schema(SCHEMA, "AVRO"))
        with pytest.raises(SchemaRegistryError) as denied:
            await asyncio.to_thread(confluent.delete_subject, "c-value")
    assert denied.value.error_code == 40301
    context = ssl.create_default_context(cafile=str(secure.ca.cert_path))
    async with RegistryClient(running.url, auth=("reader", PASSWORDS["reader"]), ssl_context=context) as client:
        assert await client.get_schema(schema_id)
        assert (await client.latest("c-value")).schema_id == schema_id


async def test_password_guessing_is_answered_429_with_retry_after(
    running: RunningRegistry, secure: SecureBroker
) -> None:
    ca = secure.ca
    PASSWORDS["guesser"] = "not-a-password"
    statuses = [(await call(running, ca, "GET", "/subjects", "guesser"))[0] for _ in range(4)]
    assert statuses == [401, 401, 401, 401]
    status, body, headers = await call(running, ca, "GET", "/subjects", "guesser")
    assert status == 429
    assert body["error_code"] == 42901
    assert int(headers["Retry-After"]) >= 1
    assert (await call(running, ca, "GET", "/subjects", "reader"))[0] == 200  # other users of the host are not


def test_a_bad_users_file_is_refused_by_line() -> None:
    with pytest.raises(UsersFileError, match="line 2: unknown role 'root'"):
        Users.parse("a: pw,read\nb: pw,root\n")
    with pytest.raises(UsersFileError, match="line 1: malformed PBKDF2"):
        Users.parse("a: PBKDF2:sha256:0:AAAA:AAAA,read\n")
    with pytest.raises(UsersFileError, match="line 1: expected"):
        Users.parse("a pw read\n")
