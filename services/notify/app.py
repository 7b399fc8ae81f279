"""`create_app(config)`: an OTP sender (sms-sender or email-sender) as an aiohttp application.

Startup opens the SQLite database (processed event ids, the outbox and the ``deliveries``
table), connects to the schema registry and the broker, creates ``otp.requests``,
``otp.deliveries`` and ``otp.requests.dlq`` when they are missing (6 partitions), starts the
outbox relay and joins its group: a consumer group, or with ``*_SENDER_GROUP_TYPE=share`` a
share group whose instances drain ``otp.requests`` as a queue (services.common.share_runner).
Cleanup leaves the group (finishing the records in flight and committing or acknowledging
them), stops the relay, the producer, the database and the provider.

HTTP:

    GET /deliveries/{request_id} -> 200 {"request_id", "channel", "user_id", "destination" (masked),
        "status": "retrying" | "delivered" | "failed", "attempts", "provider", "provider_message_id",
        "error_type", "error", "latency_ms", "created_at", "updated_at"}
        404 {"error": "unknown_delivery"} when this sender has none (unknown, or another channel)
    GET /healthz, /readyz (broker, registry, database, the consumer; and the SMTP server for email), /metrics
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator

from aiohttp import web
from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kit.app import CHECKS_KEY, METRICS_REGISTRY_KEY
from kit.errors import NotFound
from kit.logging import get_logger
from kit.openapi import serve_openapi
from schemas.catalog import default_catalog
from schemas.serde import AvroDeserializer
from services.common.app import create_service_app, default_checks
from services.common.consumer import ConsumerRunner, consuming, runner_check, runner_for_service
from services.common.log_shipper import LogShipper
from services.common.outbox_service import RELAY_KEY, open_publishing_service
from services.common.share_runner import share_runner_for_service
from services.notify.config import EmailSenderConfig, SenderConfig, SmsSenderConfig
from services.notify.openapi import sender_openapi
from services.notify.providers import FileSinkSmsProvider, Provider, SmtpEmailProvider, WebhookSmsProvider
from services.notify.sender import Sender, SenderPolicy
from services.notify.transactional import TransactionalLoop, TransactionalSender

__all__ = ["PROVIDER_KEY", "RELAY_KEY", "RUNNER_KEY", "SENDER_KEY", "build_provider", "create_app"]

log = get_logger(__name__)

SENDER_KEY = web.AppKey("otp_sender", Sender)
RUNNER_KEY = web.AppKey("otp_sender_runner", ConsumerRunner)
LOOP_KEY = web.AppKey("otp_sender_transactional_loop", TransactionalLoop)
PROVIDER_KEY: web.AppKey[Provider] = web.AppKey("otp_sender_provider")

# Provider calls take milliseconds (a local sink) to seconds (a slow SMTP server, a timeout).
_CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def build_provider(config: SenderConfig) -> Provider:
    """The provider the settings name: SMTP for email; the webhook or the file sink for SMS."""
    if isinstance(config, EmailSenderConfig):
        return SmtpEmailProvider(
            host=config.smtp_host,
            port=config.smtp_port,
            from_address=config.from_address,
            username=config.smtp_username,
            password=config.smtp_password,
            start_tls=config.smtp_starttls,
            use_tls=config.smtp_use_tls,
            validate_certs=config.smtp_validate_certs,
            timeout=config.provider_timeout,
        )
    if isinstance(config, SmsSenderConfig):
        if config.provider == "sink":
            return FileSinkSmsProvider(config.sink_path)
        return WebhookSmsProvider(config.webhook_url, token=config.webhook_token, timeout=config.provider_timeout)
    raise TypeError(f"no provider for {type(config).__name__}")


def policy_of(config: SenderConfig) -> SenderPolicy:
    """The handler's policy; `ConfigError` for invalid settings (the seal key above all)."""
    config.check()
    return SenderPolicy(
        group_id=config.group_id,
        channel=config.channel,
        keys=config.seal_keys(),
        deliveries_topic=config.deliveries_topic,
        max_attempts=config.max_attempts,
        retry_backoff=config.retry_backoff,
        retry_backoff_max=config.retry_backoff_max,
        service=config.service_name,
        instance=config.instance_id,
        brand=config.brand,
        subject=config.subject if isinstance(config, EmailSenderConfig) else "",
    )


class SenderCollector(Collector):
    """Delivery counters and consumer lag for ``/metrics``, read when scraped."""

    def __init__(self, app: web.Application, channel: str) -> None:
        self.app = app
        self.channel = channel

    def collect(self) -> Iterator[Metric]:
        sender = self.app.get(SENDER_KEY)
        runner = self.app.get(RUNNER_KEY)
        loop = self.app.get(LOOP_KEY)
        if sender is None or (runner is None and loop is None):
            return
        channel = self.channel
        delivered = CounterMetricFamily(
            "otp_sender_delivered", "codes the provider accepted", labels=["channel", "provider"]
        )
        for provider, n in sorted(sender.stats.delivered.items()):
            delivered.add_metric([channel, provider], n)
        yield delivered
        failed = CounterMetricFamily(
            "otp_sender_failed_attempts",
            "failed delivery attempts (final: no attempt follows)",
            labels=["channel", "provider", "error_type", "final"],
        )
        for (provider, error_type, final), n in sorted(sender.stats.failed.items()):
            failed.add_metric([channel, provider, error_type, str(final).lower()], n)
        yield failed
        for name, doc, value in (
            ("otp_sender_skipped", "requests that did not ask for this channel", sender.stats.skipped),
            ("otp_sender_duplicates", "redelivered requests skipped (already processed)", sender.duplicates),
            (
                "otp_sender_dead_lettered",
                "poison requests sent to the DLQ",
                runner.stats.dead_lettered if runner is not None else loop.dead_lettered if loop is not None else 0,
            ),
        ):
            family = CounterMetricFamily(name, doc, labels=["channel"])
            family.add_metric([channel], value)
            yield family
        lag = GaugeMetricFamily(
            "otp_sender_consumer_lag", "records behind the log end, per partition", labels=["topic", "partition"]
        )
        for tp, behind in sorted(runner.last_lag.items() if runner is not None else ()):
            lag.add_metric([tp.topic, str(tp.partition)], behind)
        yield lag
        if loop is not None:
            for name, doc, value in (
                ("otp_sender_transactions_committed", "Kafka transactions committed", loop.committed_transactions),
                (
                    "otp_sender_transactions_aborted",
                    "Kafka transactions aborted (runs read again)",
                    loop.aborted_transactions,
                ),
            ):
                family = CounterMetricFamily(name, doc, labels=["channel"])
                family.add_metric([channel], value)
                yield family


async def get_delivery(request: web.Request) -> web.Response:
    request_id = request.match_info["request_id"]
    found = await request.app[SENDER_KEY].delivery(request_id)
    if found is None:
        sender = request.app[SENDER_KEY]
        raise _UnknownDelivery(request_id, sender.policy.channel.value)
    return web.json_response(found)


class _UnknownDelivery(NotFound):
    code = "unknown_delivery"

    def __init__(self, request_id: str, channel: str) -> None:
        super().__init__(
            f"no {channel} delivery of request {request_id}", details={"request_id": request_id, "channel": channel}
        )


def create_app(config: SenderConfig, *, shipper: LogShipper | None = None) -> web.Application:
    """A sender: routes, readiness and its lifecycle (see the module docstring); with a
    `shipper`, the sender's own logs go to the logs.* topics through its producer.
    `ConfigError` at once for invalid settings."""
    policy = policy_of(config)
    provider = build_provider(config)
    checks = default_checks(config)
    if isinstance(config, EmailSenderConfig):
        checks["smtp"] = provider.check
    app = create_service_app(config, checks=checks, shipper=shipper)
    app[PROVIDER_KEY] = provider
    registry = app[METRICS_REGISTRY_KEY]
    registry.register(SenderCollector(app, config.channel.value))
    calls = Histogram(
        "otp_sender_provider_call_seconds",
        "duration of each provider call, by outcome (delivered or the error type)",
        ["channel", "provider", "outcome"],
        buckets=_CALL_BUCKETS,
        registry=registry,
    )

    def observe(provider_name: str, outcome: str, seconds: float) -> None:
        calls.labels(config.channel.value, provider_name, outcome).observe(seconds)

    catalog = default_catalog()
    sender_class = TransactionalSender if config.delivery_mode == "transactional" else Sender

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        log.info("sender starting", channel=config.channel.value, **config.as_log_dict())
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(provider.close)  # last: the runner and relay stop before it
            service = await stack.enter_async_context(
                open_publishing_service(
                    config,
                    catalog,
                    lambda db, outbox: sender_class(db, outbox, provider, policy, on_attempt=observe),
                    topics=config.topics_to_create(),
                    replication_factor=config.topic_replication_factor,
                    relay_poll_interval=config.relay_poll_interval,
                    shipper=shipper,
                )
            )
            deserializer = AvroDeserializer(service.registry, reader_schemas=[catalog.schema("OtpRequested")])
            app[SENDER_KEY] = service.store
            app[RELAY_KEY] = service.relay
            if isinstance(service.store, TransactionalSender):
                loop = TransactionalLoop(
                    service.store,
                    group_id=config.group_id,
                    topic=config.topic,
                    deserializer=deserializer,
                    schema_id=service.producer.serializer.schema_id,
                    kafka=config.kafka_client_kwargs(),
                    transaction_timeout_ms=config.transaction_timeout_ms,
                    consumer_options={
                        "session_timeout_ms": config.session_timeout_ms,
                        "heartbeat_interval_ms": config.heartbeat_interval_ms,
                    },
                )
                await loop.start()
                stack.push_async_callback(loop.stop)
                app[LOOP_KEY] = loop
                log.info("sender started, transactional", group=config.group_id, topic=config.topic)
                yield
                return
            if config.group_type == "share":
                runner: ConsumerRunner = share_runner_for_service(
                    config,
                    config.group_id,
                    [config.topic],
                    service.store,
                    deserializer=deserializer,
                    producer=service.producer,
                )
            else:
                runner = runner_for_service(
                    config,
                    config.group_id,
                    [config.topic],
                    service.store,
                    deserializer=deserializer,
                    producer=service.producer,
                    commit_every=config.commit_every,
                    commit_interval_ms=config.commit_interval_ms,
                    session_timeout_ms=config.session_timeout_ms,
                    heartbeat_interval_ms=config.heartbeat_interval_ms,
                    group_instance_id=config.group_instance_id,
                )
            app[RUNNER_KEY] = runner
            await stack.enter_async_context(
                consuming(runner, prune=service.store.handler, dedupe_window_ms=config.dedupe_window_s * 1000)
            )
            app[CHECKS_KEY]["consumer"] = runner_check(runner)
            log.info(
                "sender started",
                group=config.group_id,
                group_type=config.group_type,
                topic=config.topic,
                provider=provider.name,
            )
            yield

    app.cleanup_ctx.append(lifecycle)
    app.router.add_get("/deliveries/{request_id}", get_delivery)
    serve_openapi(app, sender_openapi(config.service_name, config.channel.value))
    return app
