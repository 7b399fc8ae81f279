"""The senders' API as OpenAPI 3.1 (served at /openapi.json by sms-sender and email-sender)."""

from __future__ import annotations

from typing import Any

from kit.openapi import document, obj, operation, path_parameter

__all__ = ["sender_openapi"]

_NULLABLE_TEXT = {"type": ["string", "null"]}
_TIME = {"type": "string", "format": "date-time"}

DELIVERY: dict[str, Any] = obj(
    {
        "request_id": {"type": "string"},
        "channel": {"type": "string", "enum": ["sms", "email"]},
        "user_id": {"type": "string"},
        "destination": {"type": "string"},
        "status": {"type": "string"},
        "attempts": {"type": "integer", "minimum": 0},
        "provider": {"type": "string"},
        "provider_message_id": _NULLABLE_TEXT,
        "error_type": _NULLABLE_TEXT,
        "error": _NULLABLE_TEXT,
        "latency_ms": {"type": ["integer", "null"]},
        "created_at": _TIME,
        "updated_at": _TIME,
    }
)


def sender_openapi(service: str, channel: str) -> dict[str, Any]:
    return document(
        service,
        f"The {channel} sender: consumer group {service} on `otp.requests` delivers each OTP code by {channel} "
        "and publishes OtpDelivered / OtpFailed to `otp.deliveries`.  Its HTTP API shows one delivery.",
        {
            "/deliveries/{request_id}": {
                "get": operation(
                    f"{channel}_delivery",
                    f"this sender's delivery of one OTP request (404 when it has none by {channel})",
                    {200: DELIVERY},
                    parameters=[path_parameter("request_id")],
                    errors=(404,),
                )
            }
        },
    )
