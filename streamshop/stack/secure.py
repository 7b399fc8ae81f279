"""The secured stack (``streamshop up --secure``): a local CA and certificates, one SCRAM user
per component with least-privilege ACLs, the registry behind basic auth and HTTPS, the
services behind API keys, the dashboard behind a sign-in, and every Kafka connection over
SASL_SSL with SCRAM-SHA-512.

Everything is made once under ``<data-dir>/secure`` and reused by later starts::

    pki/ca.pem, pki/<name>.pem ...   the CA and the broker's and registry's certificates
    credentials.json (0600)          every password and API key, for the operator
    registry.users                   the registry's users (PBKDF2), by role
    dashboard.users                  who may sign in to the dashboard
    keys/<service>.keys              the callers each service admits (hashes of API keys)
    client.properties (0600)         the operator's Kafka client settings (Kafka's tools, -X)

The ACLs (`ACCESS`) are applied through the Admin API as the operator (a super user), so the
same plan secures the bundled broker and an Apache Kafka cluster alike.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.kafka_security import KafkaSecurity
from kit.api_keys import key_line, new_key
from kit.users import hash_password
from streamshop.pki import LocalCA
from streamshop.stack.state import write_private

__all__ = ["ACCESS", "ADMIN", "LOADTEST", "MECHANISM", "Access", "SecureStack", "acl_bindings"]

ADMIN = "admin"  # the operator: a Kafka super user, the registry's admin, the dashboard's user
LOADTEST = "loadtest"  # Locust's Kafka users
MECHANISM = "SCRAM-SHA-512"
REGISTRY_ITERATIONS = 100_000


@dataclass(frozen=True)
class Access:
    """What one principal may touch.  A topic or group ending in ``*`` is a prefix.  Every topic
    named may be created (the services create theirs when missing); `observe` is the dashboard's
    read-only view of every topic and group and of the cluster."""

    writes: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    transactional_ids: tuple[str, ...] = ()  # the senders' transactional variant: one id per input partition
    observe: bool = False


_LOGS = ("logs.*",)  # every component ships its own log lines
ACCESS: Mapping[str, Access] = {
    # Its group elects the one writer, whose transactional id fences the one before; the
    # highest id handed out is kept apart from `_schemas` (registry.id_mark).
    "registry": Access(
        writes=("_schemas", "_schemas_ids"),
        reads=("_schemas", "_schemas_ids"),
        groups=("schema-registry",),
        transactional_ids=("schema-registry",),
    ),
    "orders": Access(writes=("orders", *_LOGS)),
    "otp": Access(writes=("otp.requests", *_LOGS)),
    "sms-sender": Access(
        writes=("otp.deliveries", "otp.requests.dlq", *_LOGS),
        reads=("otp.requests",),
        groups=("sms-sender",),
        transactional_ids=("sms-sender-*",),
    ),
    "email-sender": Access(
        writes=("otp.deliveries", "otp.requests.dlq", *_LOGS),
        reads=("otp.requests",),
        groups=("email-sender",),
        transactional_ids=("email-sender-*",),
    ),
    "logs": Access(writes=_LOGS, reads=_LOGS, groups=("log-indexer",)),
    "catcher": Access(writes=_LOGS),
    "analytics": Access(writes=("analytics.metrics*",), reads=("orders", "otp.*", "logs.*"), groups=("analytics*",)),
    "dashboard": Access(writes=_LOGS, reads=("analytics.metrics",), observe=True),
    # Its own topics only; its consumer is assigned partitions, but names a group librdkafka looks up.
    LOADTEST: Access(writes=("loadtest.*",), reads=("loadtest.*",), groups=("loadtest-*",)),
}

# Registry roles: the services register their schemas; readers only read.
REGISTRY_ROLES: Mapping[str, str] = {
    **dict.fromkeys(("orders", "otp", "sms-sender", "email-sender", "logs", "catcher"), "write"),
    "analytics": "write",  # registers the schema of its results topic
    "dashboard": "read",
}
# Who may call whom over HTTP (besides the operator, who may call everything).
CALLERS: Mapping[str, tuple[str, ...]] = {
    "catcher": ("sms-sender", "dashboard"),
    "logs": ("dashboard",),
}
HTTP_SERVICES = ("orders", "otp", "logs", "sms-sender", "email-sender", "catcher")


def acl_bindings(access: Mapping[str, Access] = ACCESS) -> list[Any]:
    """`ACCESS` as confluent-kafka AclBindings (ALLOW, any host)."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    def binding(rtype: ResourceType, name: str, principal: str, op: AclOperation) -> AclBinding:
        pattern = ResourcePatternType.PREFIXED if name.endswith("*") and name != "*" else ResourcePatternType.LITERAL
        resource = name.rstrip("*") if pattern == ResourcePatternType.PREFIXED else name
        return AclBinding(rtype, resource, pattern, f"User:{principal}", "*", op, AclPermissionType.ALLOW)

    out: list[AclBinding] = []
    for principal, grant in access.items():
        topics = dict.fromkeys((*grant.writes, *grant.reads))
        # DESCRIBE_CONFIGS: a service checks the topics it created (partitions, cleanup policy).
        for op in (AclOperation.CREATE, AclOperation.DESCRIBE_CONFIGS):
            out += [binding(ResourceType.TOPIC, topic, principal, op) for topic in topics]
        out += [binding(ResourceType.TOPIC, t, principal, AclOperation.WRITE) for t in grant.writes]
        out += [binding(ResourceType.TOPIC, t, principal, AclOperation.READ) for t in grant.reads]
        # DESCRIBE_CONFIGS and ALTER_CONFIGS: a share group's member sets where the group starts.
        for op in (AclOperation.READ, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS):
            out += [binding(ResourceType.GROUP, g, principal, op) for g in grant.groups]
        out += [
            binding(ResourceType.TRANSACTIONAL_ID, t, principal, op)
            for t in grant.transactional_ids
            for op in (AclOperation.WRITE, AclOperation.DESCRIBE)
        ]
        if grant.observe:
            out += [
                binding(ResourceType.TOPIC, "*", principal, AclOperation.DESCRIBE),
                binding(ResourceType.TOPIC, "*", principal, AclOperation.DESCRIBE_CONFIGS),
                binding(ResourceType.GROUP, "*", principal, AclOperation.DESCRIBE),
                binding(ResourceType.TRANSACTIONAL_ID, "*", principal, AclOperation.DESCRIBE),
                binding(ResourceType.BROKER, "kafka-cluster", principal, AclOperation.DESCRIBE),
            ]
    return out


@dataclass
class SecureStack:
    """The secured stack's material under `directory`, made on first use."""

    directory: Path
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost")
    kafka_passwords: dict[str, str] = field(default_factory=dict)
    registry_passwords: dict[str, str] = field(default_factory=dict)
    api_keys: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, directory: Path) -> SecureStack:
        """The material `load_or_create` made, read only (FileNotFoundError when none)."""
        raw = json.loads((directory / "credentials.json").read_text())
        return cls(directory, (), dict(raw["kafka"]), dict(raw["registry"]), dict(raw["api_keys"]))

    @classmethod
    def load_or_create(cls, directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> SecureStack:
        stack = cls.load(directory) if (directory / "credentials.json").exists() else cls(directory)
        stack.hosts = hosts
        names = [ADMIN, *ACCESS]
        for name in names:
            stack.kafka_passwords.setdefault(name, secrets.token_urlsafe(18))
        for name in (ADMIN, *REGISTRY_ROLES):
            stack.registry_passwords.setdefault(name, secrets.token_urlsafe(18))
        for caller in (ADMIN, "dashboard", "sms-sender"):
            stack.api_keys.setdefault(caller, new_key())
        stack._write_files()
        return stack

    # -- files -----------------------------------------------------------------------------------

    @property
    def ca(self) -> LocalCA:
        return LocalCA(self.directory / "pki")

    @property
    def ca_cert(self) -> Path:
        """The CA's certificate, which every client trusts (read without loading the CA's key)."""
        return self.directory / "pki" / "ca.pem"

    def _write_files(self) -> None:
        d = self.directory
        write_private(
            d / "credentials.json",
            json.dumps(
                {"kafka": self.kafka_passwords, "registry": self.registry_passwords, "api_keys": self.api_keys},
                indent=2,
            )
            + "\n",
        )
        ca = self.ca
        for name in ("broker", "registry"):
            if not (d / "pki" / f"{name}.pem").exists():
                ca.issue(name, hosts=self.hosts)
        if not (d / "registry.users").exists():
            roles = {ADMIN: "admin", **REGISTRY_ROLES}
            lines = [
                f"{name}: {hash_password(self.registry_passwords[name], iterations=REGISTRY_ITERATIONS)},{role}"
                for name, role in roles.items()
            ]
            write_private(d / "registry.users", "\n".join(lines) + "\n")
            dashboard = hash_password(self.kafka_passwords[ADMIN], iterations=REGISTRY_ITERATIONS)
            write_private(d / "dashboard.users", f"{ADMIN}: {dashboard},admin\n")
        for service in HTTP_SERVICES:
            callers = (ADMIN, *CALLERS.get(service, ()))
            write_private(
                d / "keys" / f"{service}.keys", "".join(key_line(c, self.api_keys[c]) + "\n" for c in callers)
            )
        operator = self.kafka(ADMIN)
        props = [
            "security.protocol=SASL_SSL",
            f"sasl.mechanism={MECHANISM}",
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{ADMIN}" password="{self.kafka_passwords[ADMIN]}";',
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={operator.cafile}",
        ]
        write_private(d / "client.properties", "\n".join(props) + "\n")

    def certificate(self, name: str) -> tuple[Path, Path]:
        """(certificate chain, key) of a server certificate the CA issued."""
        pki = self.directory / "pki"
        return pki / f"{name}.pem", pki / f"{name}.key"

    def keystore(self, name: str) -> Path:
        return self.directory / "pki" / f"{name}.keystore.pem"

    # -- settings --------------------------------------------------------------------------------

    def kafka(self, name: str) -> KafkaSecurity:
        return KafkaSecurity(
            protocol="SASL_SSL",
            mechanism=MECHANISM,
            username=name,
            password=self.kafka_passwords[name],
            cafile=self.ca_cert,
        )

    def broker_settings(self, listen: str, port: int) -> dict[str, str]:
        return {
            "listeners": f"SASL_SSL://{listen}:{port}",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore("broker")),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN}",
            "allow.everyone.if.no.acl.found": "false",
        }

    def registry_env(self) -> dict[str, str]:
        cert, key = self.certificate("registry")
        return {
            **self.kafka("registry").env("REGISTRY_"),
            "REGISTRY_USERS_FILE": str(self.directory / "registry.users"),
            "REGISTRY_SSL_CERTFILE": str(cert),
            "REGISTRY_SSL_KEYFILE": str(key),
        }

    def service_env(self, name: str, prefix: str) -> dict[str, str]:
        """A service's Kafka login, registry login and CA, and the callers it admits."""
        env = self.kafka(name).env(f"{prefix}_")
        env |= {
            f"{prefix}_REGISTRY_USERNAME": name,
            f"{prefix}_REGISTRY_PASSWORD": self.registry_passwords[name],
            f"{prefix}_REGISTRY_SSL_CAFILE": str(self.ca_cert),
        }
        if name in HTTP_SERVICES:
            env[f"{prefix}_API_KEYS_FILE"] = str(self.directory / "keys" / f"{name}.keys")
        if name == "sms-sender":
            env["SMS_SENDER_WEBHOOK_TOKEN"] = self.api_keys["sms-sender"]
        if name == "dashboard":
            env |= {
                "DASHBOARD_USERS_FILE": str(self.directory / "dashboard.users"),
                "DASHBOARD_CATCHER_TOKEN": self.api_keys["dashboard"],
                "DASHBOARD_LOGS_TOKEN": self.api_keys["dashboard"],
            }
        return env

    def analytics_env(self) -> dict[str, str]:
        conf = self.kafka("analytics").librdkafka_config()
        env = {"ANALYTICS_KAFKA_" + key.upper().replace(".", "_"): value for key, value in conf.items()}
        env["SSL_CERT_FILE"] = str(self.ca_cert)  # the registry's CA, for urllib in every worker
        return env

    def operator_kafka(self) -> dict[str, str]:
        """librdkafka settings of the operator (a super user)."""
        return self.kafka(ADMIN).librdkafka_config()


def apply_access(bootstrap: str, stack: SecureStack, timeout: float = 30.0) -> None:
    """As the operator: every principal's SCRAM credentials (both mechanisms) and `ACCESS` as
    ACLs, through the Admin API.  Idempotent: a restart upserts the same credentials and ACLs."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialAlteration,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap, **stack.operator_kafka()})
    # One request per mechanism: Kafka refuses a user named twice in one request.
    for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        upserts: list[UserScramCredentialAlteration] = [
            UserScramCredentialUpsertion(name, ScramCredentialInfo(mechanism, 8192), password.encode())
            for name, password in stack.kafka_passwords.items()
            if name != ADMIN
        ]
        for future in admin.alter_user_scram_credentials(upserts, request_timeout=timeout).values():
            future.result(timeout)
    for future in admin.create_acls(acl_bindings(), request_timeout=timeout).values():
        future.result(timeout)
