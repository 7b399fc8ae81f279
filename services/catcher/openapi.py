"""The catcher's API as OpenAPI 3.1 (served at /openapi.json)."""

from __future__ import annotations

from typing import Any

from kit.openapi import document, json_body, obj, operation, path_parameter
from kit.validation import Object

__all__ = ["catcher_openapi"]

_TIME = {"type": "string", "format": "date-time"}
_COUNT = {"type": "integer", "minimum": 0}

MAIL: dict[str, Any] = obj(
    {
        "id": {"type": "string"},
        "message_id": {"type": ["string", "null"]},
        "from": {"type": "string"},
        "to": {"type": "array", "items": {"type": "string"}},
        "subject": {"type": "string"},
        "text": {"type": "string"},
        "received_at": _TIME,
    }
)
MAIL_DETAIL: dict[str, Any] = obj(
    {
        **MAIL["properties"],
        "envelope_from": {"type": "string"},
        "html": {"type": ["string", "null"]},
        "headers": {
            "type": "array",
            "items": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2},
        },
        "size": _COUNT,
    }
)
SMS: dict[str, Any] = obj(
    {
        "id": {"type": "string"},
        "to": {"type": "string"},
        "body": {"type": "string"},
        "request_id": {"type": ["string", "null"]},
        "idempotency_key": {"type": ["string", "null"]},
        "received_at": _TIME,
    }
)


def _listing(item: dict[str, Any], max_limit: int) -> dict[str, Any]:
    """Schema and parameters of a listing (GET /messages, GET /sms)."""
    return {
        "schema": obj({"items": {"type": "array", "items": item}, "total": _COUNT}),
        "parameters": [
            {
                "name": "to",
                "in": "query",
                "required": False,
                "schema": {"type": "string", "minLength": 1, "maxLength": 320},
            },
            {
                "name": "limit",
                "in": "query",
                "required": False,
                "schema": {"type": "integer", "minimum": 1, "maximum": max_limit, "default": 50},
            },
        ],
    }


def catcher_openapi(sms_body: Object, max_limit: int, *, token: bool) -> dict[str, Any]:
    """`token`: POST /sms needs ``Authorization: Bearer`` (CATCHER_SMS_TOKEN is set)."""
    mails, texts = _listing(MAIL, max_limit), _listing(SMS, max_limit)
    deleted = obj({"deleted": _COUNT})
    sms_parameters: list[dict[str, Any]] = [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": False,
            "schema": {"type": "string", "minLength": 1, "maxLength": 255},
        }
    ]
    post_sms = operation(
        "post_sms",
        "an SMS provider's webhook: store one SMS (a repeated Idempotency-Key answers the first 201 again)",
        {201: SMS},
        body=json_body(sms_body),
        parameters=sms_parameters,
        errors=(401,) if token else (),
        headers={201: {"Idempotent-Replayed": {"const": "true"}}},
    )
    if token:
        post_sms["security"] = [{"bearer": []}]
    doc = document(
        "catcher",
        "The stack's local mail server (SMTP) and SMS webhook sink, in memory: what the senders "
        "delivered, to read in tests and in the dashboard.",
        {
            "/messages": {
                "get": operation(
                    "list_messages",
                    "received mail, newest first",
                    {200: mails["schema"]},
                    parameters=mails["parameters"],
                    errors=(422,),
                ),
                "delete": operation("delete_messages", "empty the mailbox", {200: deleted}),
            },
            "/messages/{id}": {
                "get": operation(
                    "get_message",
                    "one mail with its headers",
                    {200: MAIL_DETAIL},
                    parameters=[path_parameter("id")],
                    errors=(404,),
                )
            },
            "/sms": {
                "post": post_sms,
                "get": operation(
                    "list_sms",
                    "received SMS, newest first",
                    {200: texts["schema"]},
                    parameters=texts["parameters"],
                    errors=(422,),
                ),
                "delete": operation("delete_sms", "empty the SMS box", {200: deleted}),
            },
        },
    )
    if token:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return doc
