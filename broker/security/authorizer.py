"""The broker's security settings and decisions: listeners' TLS, SASL mechanisms, and the
authorizer (`authorizer.class.name`, `super.users`, `allow.everyone.if.no.acl.found`).

Without an authorizer configured every principal may do everything, as in Kafka, and the ACL
APIs answer SECURITY_DISABLED.  Decisions are cached per principal and host until the ACLs
change, so Produce and Fetch pay a dictionary lookup per topic.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import TYPE_CHECKING

import structlog

from broker.config import BrokerConfig
from broker.listeners import Listener, parse_endpoints, resolve
from broker.security import salt_secret
from broker.security.acls import ANONYMOUS, CLUSTER_NAME, OPERATIONS_OF, AclBinding, AclIndex, Operation, ResourceType
from broker.security.scram import MECHANISMS
from broker.security.session import Session
from broker.security.store import SecurityStore
from broker.security.tls import PrincipalRules, distinguished_name, server_context
from kit.throttle import HashingGate, LoginThrottle

if TYPE_CHECKING:
    from broker.metadata import MetadataStore
    from broker.metrics import BrokerMetrics

log = structlog.get_logger(__name__)

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
AUTHORIZERS = ("", STANDARD_AUTHORIZER, "StandardAuthorizer")
SASL_MECHANISMS = ("PLAIN", *MECHANISMS)
_NOBODY = Session("", "PLAINTEXT", "")


def parse_super_users(raw: str) -> frozenset[str]:
    """Kafka's `super.users`: principals separated by ';'."""
    return frozenset(p.strip() for p in raw.split(";") if p.strip())


class Security:
    def __init__(self, config: BrokerConfig, meta: MetadataStore, metrics: BrokerMetrics) -> None:
        self.config = config
        self.metrics = metrics
        self.store = SecurityStore(meta)
        self.throttle = LoginThrottle(max_s=config.values.authentication_failure_throttle_max_ms / 1000)
        # PLAIN's password checks, one at a time, known devices and clean addresses first
        # (handlers.sasl).
        self.plain_hashing = HashingGate(1)
        self.listeners: list[Listener] = self._listeners()
        self.mechanisms = config.values.sasl_enabled_mechanisms
        self.reauth_ms: int = config.values.connections_max_reauth_ms
        self.max_sasl_bytes: int = config.values.sasl_server_max_receive_size
        self.auth_timeout_s: float = config.values.authentication_timeout_ms / 1000
        self.enabled = config.values.authorizer_class_name != ""
        self.super_users = parse_super_users(config.values.super_users)
        self.allow_if_no_acl: bool = config.values.allow_everyone_if_no_acl_found
        self.principal_rules = PrincipalRules(config.values.ssl_principal_mapping_rules)
        self.client_auth: str = config.values.ssl_client_auth
        # Keys the made-up salts of unknown SCRAM users: random, kept in the data directory,
        # so asking twice for the same unknown user gives the same salt, and nobody can compute it.
        self.secret = salt_secret.load_or_create(config.data_dir)
        self.tls: ssl.SSLContext | None = None
        if any(listener.tls for listener in self.listeners):
            self.tls = server_context(
                config.values.ssl_keystore_location,
                config.values.ssl_key_password,
                config.values.ssl_truststore_location,
                self.client_auth,
            )
        self._index = self._build_index()
        self._cache: dict[tuple[str, str, int, int, str], bool] = {}

    def _listeners(self) -> list[Listener]:
        raw = self.config.values.listeners
        if not raw:
            host, port = self.config.listen
            return [Listener("PLAINTEXT", "PLAINTEXT", host, port)]
        return resolve(raw, self.config.values.listener_security_protocol_map)

    def advertised(self, bound: dict[str, tuple[str, int]]) -> dict[str, tuple[str, int]]:
        """Each listener's advertised address: `advertised.listeners` where it names the
        listener, else the address it is bound to (Kafka's rule)."""
        out = dict(bound)
        raw = self.config.values.advertised_listeners
        if raw:
            for name, host, port in parse_endpoints(raw):
                if name not in bound:
                    raise ValueError(f"advertised.listeners names {name}, which is not in listeners")
                out[name] = (host, port)
        elif self.config.advertise is not None and self.listeners:
            out[self.listeners[0].name] = self.config.advertise
        return out

    # --- authorization ---------------------------------------------------------------

    def _build_index(self) -> AclIndex:
        return AclIndex(self.store.acls, self.super_users, self.allow_if_no_acl)

    def acls_changed(self, added: Iterable[AclBinding] = (), removed: Iterable[AclBinding] = ()) -> None:
        """The store gained `added` and lost `removed`: the index follows, and the decisions
        cached from the old ACLs go."""
        self._index.remove(removed)
        self._index.add(added)
        self._cache.clear()

    def allowed(self, session: Session | None, op: Operation, rtype: ResourceType, name: str) -> bool:
        if not self.enabled:
            return True
        s = session or _NOBODY
        key = (s.principal, s.host, op, rtype, name)
        result = self._cache.get(key)
        if result is None:
            if len(self._cache) > 100_000:
                self._cache.clear()
            result = self._cache[key] = self._index.authorize(s.principal, s.host, op, rtype, name)
        if not result:
            self.metrics.authorization_denied.labels(op.name, rtype.name).inc()
        return result

    def topic(self, session: Session | None, op: Operation, name: str) -> bool:
        return self.allowed(session, op, ResourceType.TOPIC, name)

    def group(self, session: Session | None, op: Operation, name: str) -> bool:
        return self.allowed(session, op, ResourceType.GROUP, name)

    def cluster(self, session: Session | None, op: Operation) -> bool:
        return self.allowed(session, op, ResourceType.CLUSTER, CLUSTER_NAME)

    def allowed_any(self, session: Session | None, op: Operation, rtype: ResourceType) -> bool:
        if not self.enabled:
            return True
        s = session or _NOBODY
        return self._index.authorize_any(s.principal, s.host, op, rtype)

    def operations(self, session: Session | None, rtype: ResourceType, name: str) -> int:
        """Kafka's authorized-operations bit field for one resource."""
        ops = OPERATIONS_OF[rtype]
        if not self.enabled:
            return sum(1 << op for op in ops)
        s = session or _NOBODY
        return sum(1 << op for op in ops if self._index.authorize(s.principal, s.host, op, rtype, name))

    def ssl_principal(self, tls: ssl.SSLObject) -> str:
        """The principal of an SSL connection: from the client certificate when one was
        presented (mTLS), else ANONYMOUS."""
        cert = tls.getpeercert()
        if not cert:
            return ANONYMOUS
        return "User:" + self.principal_rules.apply(distinguished_name(cert))
