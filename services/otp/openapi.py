"""The otp API as OpenAPI 3.1 (served at /openapi.json)."""

from __future__ import annotations

from kit.openapi import document, json_body, obj, operation
from services.otp.domain import REQUEST_OTP, VERIFY_OTP

__all__ = ["OTP_OPENAPI"]

OTP_OPENAPI = document(
    "otp",
    "One-time passwords: POST /otp makes a 6-digit code and publishes it, sealed, as an OtpRequested "
    "event to `otp.requests` (the sms and email senders deliver it); POST /otp/verify checks a code.  "
    "Rate limits per user, per destination and per client address answer 429 with Retry-After.",
    {
        "/otp": {
            "post": operation(
                "request_otp",
                "ask for a code by sms, email or both (the code never appears in the answer)",
                {
                    202: obj(
                        {
                            "request_id": {"type": "string", "format": "uuid"},
                            "user_id": {"type": "string"},
                            "expires_at": {"type": "string", "format": "date-time"},
                            "max_attempts": {"type": "integer", "minimum": 1},
                        }
                    )
                },
                body=json_body(REQUEST_OTP),
                errors=(429,),
                links={
                    202: {
                        "VerifyOtp": {
                            "operationId": "verify_otp",
                            "requestBody": {"request_id": "$response.body#/request_id", "code": "000000"},
                        }
                    }
                },
            )
        },
        "/otp/verify": {
            "post": operation(
                "verify_otp",
                "check a code: once only; wrong codes count down to a lock (429), expired is 410",
                {200: obj({"verified": {"const": True}, "request_id": {"type": "string"}})},
                body=json_body(VERIFY_OTP),
                errors=(404, 409, 410, 429),
            )
        },
    },
)
