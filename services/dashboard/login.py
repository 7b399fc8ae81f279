"""The dashboard behind a login, when ``DASHBOARD_USERS_FILE`` names its users.

    GET  /login      the sign-in form
    POST /login      user and password (a form); 303 to / with a session cookie, or 401
    POST /logout     ends the session (its token is refused from then on); 303 to /login

The users file has the registry's format (registry.auth: ``name: credential,role``,
PBKDF2 credentials); any role may sign in.  The session is a cookie holding the user, an expiry
and a session id, signed with HMAC-SHA256 under a key of the process (``DASHBOARD_SESSION_KEY``
to share one across instances or restarts), HttpOnly and SameSite=Strict, so another site can
neither read it nor make the browser send it, and Secure when the dashboard serves HTTPS.
Signing out revokes the session id until the token would have expired anyway, so a copied
cookie dies with the sign-out; the list is the process's own (instances sharing a key do not
see each other's sign-outs, and a restart forgets it).  Without a session the page redirects
to /login and every other path (``/api/*``, ``/metrics``) answers 401; the probes stay open.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import math
import secrets
import time
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware

from kit.middleware import json_error
from kit.users import LoginThrottled, Users

__all__ = ["COOKIE", "Sessions", "add_login_routes", "login_middleware"]

log = structlog.get_logger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

COOKIE = "streamshop_session"
OPEN_PATHS = frozenset({"/login", "/healthz", "/readyz", "/static/dashboard.css"})
MAX_FORM_BYTES = 4096


class Sessions:
    """Signed, expiring, revocable session tokens: ``<user b64>.<expiry s>.<id>.<hmac b64>``."""

    def __init__(self, key: bytes | None, lifetime_s: float) -> None:
        self._key = key or secrets.token_bytes(32)
        self.lifetime_s = lifetime_s
        # Revoked session ids and when their tokens expire.  Only a valid session can be
        # revoked, so the list grows no faster than sign-ins succeed, and expired ids leave it.
        self._revoked: dict[str, int] = {}

    def _sign(self, payload: str) -> str:
        mac = hmac.new(self._key, payload.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def issue(self, user: str, now: float | None = None) -> str:
        expiry = int((time.time() if now is None else now) + self.lifetime_s)
        encoded = base64.urlsafe_b64encode(user.encode()).decode().rstrip("=")
        payload = f"{encoded}.{expiry}.{secrets.token_urlsafe(12)}"
        return f"{payload}.{self._sign(payload)}"

    def _valid(self, token: str | None, now: float | None) -> tuple[str, str, int] | None:
        """(user, session id, expiry) of a signed, unexpired, unrevoked token."""
        if not token or len(token) > 1024 or token.count(".") != 3:
            return None
        payload, _, mac = token.rpartition(".")
        if not hmac.compare_digest(mac.encode(), self._sign(payload).encode()):
            return None
        encoded, expiry, session = payload.split(".")
        if not expiry.isdigit() or int(expiry) < (time.time() if now is None else now) or session in self._revoked:
            return None
        try:
            return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode(), session, int(expiry)
        except (ValueError, UnicodeDecodeError):
            return None

    def user(self, token: str | None, now: float | None = None) -> str | None:
        """The signed-in user of a valid, unexpired, unrevoked token; None for anything else."""
        valid = self._valid(token, now)
        return valid[0] if valid is not None else None

    def revoke(self, token: str | None, now: float | None = None) -> str | None:
        """End the token's session (its user, or None when it was not a valid session)."""
        valid = self._valid(token, now)
        if valid is None:
            return None
        clock = time.time() if now is None else now
        for session, expiry in list(self._revoked.items()):
            if expiry < clock:
                del self._revoked[session]
        user, session, expiry = valid
        self._revoked[session] = expiry
        return user


def login_middleware(sessions: Sessions) -> Middleware:
    @web.middleware
    async def require_login(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS or sessions.user(request.cookies.get(COOKIE)) is not None:
            return await handler(request)
        if request.path == "/" and request.method in ("GET", "HEAD"):
            raise web.HTTPSeeOther("/login")
        return json_error(401, "unauthorized", "sign in at /login first")

    return require_login


_FORM = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>streamshop dashboard: sign in</title>
<link rel="icon" href="data:,"><link rel="stylesheet" href="/static/dashboard.css"></head>
<body><main class="login"><h1>streamshop</h1>
<form method="post" action="/login">
<label>user <input name="user" autocomplete="username" required autofocus></label>
<label>password <input name="password" type="password" autocomplete="current-password" required></label>
<button type="submit">sign in</button></form>{message}</main></body></html>
"""


def _form(message: str = "", status: int = 200) -> web.Response:
    shown = f'<p class="error" role="alert">{html.escape(message)}</p>' if message else ""
    return web.Response(text=_FORM.format(message=shown), status=status, content_type="text/html")


def add_login_routes(app: web.Application, users: Users, sessions: Sessions, *, secure_cookie: bool) -> None:
    async def form(request: web.Request) -> web.Response:
        return _form()

    async def sign_in(request: web.Request) -> web.Response:
        if request.content_length is not None and request.content_length > MAX_FORM_BYTES:
            return _form("the form is too large", 413)
        fields = await request.post()
        user, password = fields.get("user"), fields.get("password")
        if not isinstance(user, str) or not isinstance(password, str) or not user:
            return _form("user and password are required", 400)
        client = request.remote or ""
        try:
            role = await users.authenticate(user, password, source=client)
        except LoginThrottled as e:
            log.warning("dashboard sign-in refused: too many failures", user=user[:128], client=client)
            refused = _form(str(e), 429)
            refused.headers["Retry-After"] = str(math.ceil(e.retry_after_s))
            return refused
        if role is None:
            log.warning("dashboard sign-in failed", user=user[:128], client=client)
            return _form("wrong user or password", 401)
        log.info("dashboard sign-in", user=user)
        response = web.HTTPSeeOther("/")
        response.set_cookie(
            COOKIE,
            sessions.issue(user),
            max_age=int(sessions.lifetime_s),
            httponly=True,
            samesite="Strict",
            secure=secure_cookie,
            path="/",
        )
        raise response

    async def sign_out(request: web.Request) -> web.Response:
        user = sessions.revoke(request.cookies.get(COOKIE))
        if user is not None:
            log.info("dashboard sign-out", user=user)
        response = web.HTTPSeeOther("/login")
        response.del_cookie(COOKIE, path="/")
        raise response

    app.router.add_get("/login", form)
    app.router.add_post("/login", sign_in)
    app.router.add_post("/logout", sign_out)
