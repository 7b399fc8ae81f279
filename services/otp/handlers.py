"""HTTP handlers of the otp API (routes are added by services.otp.app)."""

from __future__ import annotations

from aiohttp import web

from kit.app import read_json
from services.otp.domain import VERIFY_OTP, NewOtpRequest
from services.otp.store import OtpStore

__all__ = ["STORE_KEY", "request_otp", "verify_otp"]

STORE_KEY = web.AppKey("otp_store", OtpStore)


async def request_otp(request: web.Request) -> web.Response:
    """`POST /otp` ``{"user_id", "channels", "phone", "email"}``: 202 with the request id and
    expiry; the code goes to the senders through the OtpRequested event, never in the response.
    The client address of the per-client limit is the peer's: behind a proxy, every request
    comes from the proxy, so limit there or exempt it."""
    new = NewOtpRequest.from_body(await read_json(request))
    created = await request.app[STORE_KEY].request(new, client=request.remote)
    return web.json_response(created.to_json(), status=202)


async def verify_otp(request: web.Request) -> web.Response:
    """`POST /otp/verify` ``{"request_id", "code"}``: 200 ``{"verified": true}``, or a JSON error:
    404 unknown, 409 already verified, 410 expired, 422 wrong code, 429 locked."""
    body = VERIFY_OTP.validate(await read_json(request))
    await request.app[STORE_KEY].verify(body["request_id"], body["code"])
    return web.json_response({"verified": True, "request_id": body["request_id"]})
