"""`create_app(config)`: the catcher as an aiohttp application, with its SMTP server on the same loop.

    GET    /messages?to=&limit=   -> 200 {"items": [mail summary...], "total": n}   newest first
           mail summary: {"id", "message_id", "from", "to": [...], "subject", "text", "received_at"}
    GET    /messages/{id}         -> 200 summary + {"envelope_from", "html", "headers": [[name, value]...], "size"}
                                     404 {"error": "unknown_message"}
    DELETE /messages              -> 200 {"deleted": n}
    POST   /sms  {"to", "body", "request_id"?}  (optional ``Idempotency-Key``; ``Authorization: Bearer``
                                     when CATCHER_SMS_TOKEN is set)
                                  -> 201 {"id", "to", "body", "request_id", "idempotency_key", "received_at"}
                                     a repeated key: the same 201 body again, ``Idempotent-Replayed: true``
                                     400 bad JSON / bad key, 401 token, 413 too large, 415 not JSON,
                                     422 invalid field (one message per field) or key reused with another body
    GET    /sms?to=&limit=        -> 200 {"items": [sms...], "total": n}   newest first
    DELETE /sms                   -> 200 {"deleted": n}
    GET    /healthz, /readyz (the SMTP listener serves), /metrics (received, duplicates collapsed, stored)

The stores are in memory (services.catcher.store): a restart empties them, as with MailHog.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncIterator, Iterator

from aiohttp import web
from multidict import MultiMapping
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from contracts.otp import E164
from kit.app import METRICS_REGISTRY_KEY, read_json
from kit.errors import BadRequest, NotFound, ServiceError, ValidationError
from kit.logging import get_logger
from kit.openapi import serve_openapi
from kit.process import READY_FIELDS_KEY
from kit.validation import Object, Str
from services.catcher.config import CatcherConfig
from services.catcher.openapi import catcher_openapi
from services.catcher.smtp import start_smtp_server, stop_smtp_server
from services.catcher.store import IdempotencyConflict, Mailbox, SmsBox
from services.common.app import create_service_app
from services.common.log_shipper import LogShipper
from services.common.outbox_service import shipping_logs

__all__ = ["MAILBOX_KEY", "SMS_KEY", "SMTP_PORT_KEY", "create_app"]

log = get_logger(__name__)

MAILBOX_KEY = web.AppKey("catcher_mailbox", Mailbox)
SMS_KEY = web.AppKey("catcher_sms", SmsBox)
SMTP_PORT_KEY = web.AppKey("catcher_smtp_port", int)
_SERVER_KEY = web.AppKey("catcher_smtp_server", asyncio.Server)
_TOKEN_KEY: web.AppKey[str | None] = web.AppKey("catcher_sms_token")

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
MAX_KEY_LENGTH = 255

SMS_BODY = Object(
    {
        "to": Str(pattern=E164, pattern_message="must be an E.164 phone number such as +15550100"),
        "body": Str(min_len=1, max_len=1600),  # 10 concatenated SMS segments
        "request_id": Str(required=False, nullable=True, min_len=1, max_len=128),
    }
)


class Unauthorized(ServiceError):
    status = 401
    code = "unauthorized"
    default_message = "POST /sms needs 'Authorization: Bearer <token>'"


class IdempotencyKeyReused(ServiceError):
    """422, as the IETF Idempotency-Key draft has it: one key, one request body."""

    status = 422
    code = "idempotency_key_reused"
    default_message = "this Idempotency-Key was used with another request body"


def parse_listing(params: MultiMapping[str]) -> tuple[str | None, int]:
    """``to`` and ``limit`` of a listing; `ValidationError` (422) naming each bad parameter."""
    errors: dict[str, str] = {}
    for name in sorted(set(params.keys())):
        if name not in ("to", "limit"):
            errors[name] = "is not an allowed parameter (allowed: to, limit)"
        elif len(params.getall(name)) > 1:
            errors[name] = "must be given at most once"
    to = params.get("to")
    if to is not None and not 1 <= len(to) <= 320:
        errors.setdefault("to", "must be 1 to 320 characters")
    limit = DEFAULT_LIMIT
    if params.get("limit") is not None:
        try:
            limit = int(params["limit"])
        except ValueError:
            errors.setdefault("limit", "must be an integer")
        else:
            if not 1 <= limit <= MAX_LIMIT:
                errors.setdefault("limit", f"must be between 1 and {MAX_LIMIT}")
    if errors:
        raise ValidationError(errors, "invalid query parameters")
    return to, limit


async def list_messages(request: web.Request) -> web.Response:
    to, limit = parse_listing(request.query)
    mailbox = request.app[MAILBOX_KEY]
    return web.json_response({"items": [m.summary() for m in mailbox.list(to=to, limit=limit)], "total": len(mailbox)})


async def get_message(request: web.Request) -> web.Response:
    mail_id = request.match_info["id"]
    mail = request.app[MAILBOX_KEY].get(mail_id)
    if mail is None:
        raise _UnknownMessage(mail_id)
    return web.json_response(mail.detail())


class _UnknownMessage(NotFound):
    code = "unknown_message"

    def __init__(self, mail_id: str) -> None:
        super().__init__(f"no message {mail_id}", details={"id": mail_id})


async def delete_messages(request: web.Request) -> web.Response:
    return web.json_response({"deleted": request.app[MAILBOX_KEY].clear()})


def _check_token(request: web.Request) -> None:
    token = request.app[_TOKEN_KEY]
    if token is None:
        return
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise Unauthorized


def _idempotency_key(request: web.Request) -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if not 1 <= len(key) <= MAX_KEY_LENGTH or not key.isprintable():
        raise BadRequest(
            f"Idempotency-Key must be 1 to {MAX_KEY_LENGTH} printable characters", details={"header": "Idempotency-Key"}
        )
    return key


async def post_sms(request: web.Request) -> web.Response:
    _check_token(request)
    key = _idempotency_key(request)
    body = SMS_BODY.validate(await read_json(request))
    try:
        sms, replayed = request.app[SMS_KEY].add(body["to"], body["body"], body["request_id"], key)
    except IdempotencyConflict:
        raise IdempotencyKeyReused(details={"idempotency_key": key}) from None
    headers = {"Idempotent-Replayed": "true"} if replayed else None
    if not replayed:
        log.info("sms received", sms_id=sms.id, request_id=sms.request_id)  # never the body: it holds the code
    return web.json_response(sms.to_json(), status=201, headers=headers)


async def list_sms(request: web.Request) -> web.Response:
    to, limit = parse_listing(request.query)
    box = request.app[SMS_KEY]
    return web.json_response({"items": [s.to_json() for s in box.list(to=to, limit=limit)], "total": len(box)})


async def delete_sms(request: web.Request) -> web.Response:
    return web.json_response({"deleted": request.app[SMS_KEY].clear()})


class CatcherCollector(Collector):
    """What the catcher received, read when scraped."""

    def __init__(self, mailbox: Mailbox, sms: SmsBox) -> None:
        self.mailbox = mailbox
        self.sms = sms

    def collect(self) -> Iterator[Metric]:
        m, s = self.mailbox, self.sms
        yield CounterMetricFamily("catcher_mails_received", "mails stored", value=m.received)
        yield CounterMetricFamily(
            "catcher_mail_duplicates", "mails collapsed: Message-ID already held", value=m.duplicates
        )
        yield CounterMetricFamily("catcher_mails_evicted", "oldest mails dropped beyond max_messages", value=m.evicted)
        yield GaugeMetricFamily("catcher_mails_stored", "mails held now", value=len(m))
        yield CounterMetricFamily("catcher_sms_received", "SMS stored", value=s.received)
        yield CounterMetricFamily("catcher_sms_duplicates", "SMS collapsed: Idempotency-Key replayed", value=s.replayed)
        yield CounterMetricFamily("catcher_sms_evicted", "oldest SMS dropped beyond max_messages", value=s.evicted)
        yield GaugeMetricFamily("catcher_sms_stored", "SMS held now", value=len(s))


def create_app(config: CatcherConfig, *, shipper: LogShipper | None = None) -> web.Application:
    """The catcher; its SMTP server listens on (config.listen, config.smtp_port) while the app runs
    (port 0: any free port, found in ``app[SMTP_PORT_KEY]`` once started, and announced as
    ``smtp=HOST:PORT`` on the ready line `serve_app` prints)."""
    config.check()
    mailbox = Mailbox(config.max_messages)
    sms = SmsBox(config.max_messages)

    async def smtp_serving() -> None:
        server = app.get(_SERVER_KEY)
        if server is None or not server.is_serving():
            raise ConnectionError("the SMTP listener is not serving")

    app = create_service_app(config, checks={"smtp": smtp_serving}, shipper=shipper)
    app[MAILBOX_KEY] = mailbox
    app[SMS_KEY] = sms
    app[_TOKEN_KEY] = config.sms_token or None
    app[METRICS_REGISTRY_KEY].register(CatcherCollector(mailbox, sms))
    # aiosmtpd logs its AUTH mechanisms at info on every connection: keep that out of the way.
    logging.getLogger("mail.log").setLevel(logging.WARNING)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        async with shipping_logs(config, shipper):
            server, sessions = await start_smtp_server(
                mailbox,
                config.listen,
                config.smtp_port,
                hostname=config.smtp_hostname,
                data_size_limit=config.max_message_size,
            )
            app[_SERVER_KEY] = server
            app[SMTP_PORT_KEY] = smtp_port = int(server.sockets[0].getsockname()[1])
            host = "127.0.0.1" if config.listen in ("", "0.0.0.0", "::") else config.listen
            app[READY_FIELDS_KEY] = {"smtp": f"{host}:{smtp_port}"}  # on `serve_app`'s ready line, for supervisors
            log.info("catcher started", smtp_port=smtp_port, listen=config.listen)
            try:
                yield
            finally:
                await stop_smtp_server(server, sessions)

    app.cleanup_ctx.append(lifecycle)
    serve_openapi(app, catcher_openapi(SMS_BODY, MAX_LIMIT, token=bool(config.sms_token)))
    app.router.add_get("/messages", list_messages)
    app.router.add_get("/messages/{id}", get_message)
    app.router.add_delete("/messages", delete_messages)
    app.router.add_post("/sms", post_sms)
    app.router.add_get("/sms", list_sms)
    app.router.add_delete("/sms", delete_sms)
    return app
