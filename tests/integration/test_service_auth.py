"""API keys on the services and the dashboard's sign-in, over real HTTP: without a key (or
with a wrong one) every endpoint but the probes answers 401 with ``WWW-Authenticate: Bearer``;
with a key it works; the dashboard sends its own keys upstream; its page redirects to /login,
a wrong password is refused, a session cookie opens the page and the API; no key or password
is ever logged."""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import pytest
import structlog
from aiohttp import web
from structlog.testing import capture_logs

from kit.api_keys import ApiKeys, ApiKeysError, key_line, new_key
from kit.users import hash_password
from services.catcher.config import CatcherConfig
from services.dashboard import login
from services.dashboard.app import create_app as create_dashboard
from services.dashboard.config import DashboardConfig
from services.dashboard.login import COOKIE, Sessions
from streamshop.pki import LocalCA
from tests.support.notify import serve_catcher
from tests.support.services import serve_app

DASHBOARD_KEY, SENDER_KEY = new_key(), new_key()


def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "catcher.keys"
    path.write_text(f"# callers\n{key_line('dashboard', DASHBOARD_KEY)}\n{key_line('sms-sender', SENDER_KEY)}\n")
    return path


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_every_endpoint_but_the_probes_needs_a_key(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with serve_catcher(api_keys_file=keys_file(tmp_path)) as catcher:
        session, url = catcher.http.session, catcher.http.url
        for method, path in [
            ("GET", "/messages"),
            ("DELETE", "/messages"),
            ("GET", "/sms"),
            ("GET", "/metrics"),
            ("POST", "/sms"),
            ("GET", "/messages/x"),
        ]:
            for headers in ({}, bearer("wrong"), {"Authorization": f"Basic {DASHBOARD_KEY}"}):
                async with session.request(method, url + path, headers=headers) as response:
                    assert response.status == 401, (method, path, headers)
                    assert response.headers["WWW-Authenticate"].startswith("Bearer")
                    assert (await response.json())["error"] == "unauthorized"
        for path in ("/healthz", "/readyz", "/openapi.json"):
            async with session.get(url + path) as response:
                assert response.status == 200, path
        async with session.get(url + "/messages", headers=bearer(DASHBOARD_KEY)) as response:
            assert response.status == 200
            assert (await response.json())["items"] == []
        sms = {"to": "+15550100", "body": "code 123456"}
        async with session.post(url + "/sms", json=sms, headers={**bearer(SENDER_KEY), "Idempotency-Key": "k1"}) as r:
            assert r.status in (200, 201)
        async with session.get(url + "/metrics", headers=bearer(SENDER_KEY)) as response:
            assert response.status == 200
        async with session.get(url + "/openapi.json") as response:
            doc = await response.json()
        assert doc["components"]["securitySchemes"]["apiKey"] == {
            "type": "http",
            "scheme": "bearer",
            "description": "an API key of the service's keys file",
        }
        assert doc["paths"]["/messages"]["get"]["security"] == [{"apiKey": []}]
        assert "401" in doc["paths"]["/sms"]["post"]["responses"]
        assert "security" not in doc["paths"]["/healthz"]["get"]
    for key in (DASHBOARD_KEY, SENDER_KEY):
        assert key not in caplog.text


def test_a_bad_keys_file_is_refused_by_line() -> None:
    with pytest.raises(ApiKeysError, match="line 2"):
        ApiKeys.parse("a: sha256:" + "0" * 64 + "\nb: plain-key\n")
    with pytest.raises(ApiKeysError, match="appears twice"):
        ApiKeys.parse(("a: sha256:" + "0" * 64 + "\n") * 2)
    with pytest.raises(ApiKeysError, match="no caller"):
        ApiKeys.parse("# nobody\n")


def test_sessions_are_signed_and_expire() -> None:
    sessions = Sessions(b"k" * 32, 60)
    token = sessions.issue("ops", now=1000)
    assert sessions.user(token, now=1010) == "ops"
    assert sessions.user(token, now=1061) is None
    assert Sessions(b"x" * 32, 60).user(token, now=1010) is None  # another key
    user, expiry, session, mac = token.split(".")
    assert sessions.user(f"{user}.{int(expiry) + 999}.{session}.{mac}", now=1010) is None  # a longer life is not signed
    for garbage in ("", "a.b", "a.b.c", "a.b.c.d.e", "x" * 5000, "...", "é.1.é.é"):
        assert sessions.user(garbage, now=1010) is None
        assert sessions.revoke(garbage, now=1010) is None


def test_a_revoked_session_is_refused_and_the_revocation_expires_with_it() -> None:
    sessions = Sessions(b"k" * 32, 60)
    gone, kept = sessions.issue("ops", now=1000), sessions.issue("ops", now=1000)
    assert sessions.revoke(gone, now=1010) == "ops"
    assert sessions.user(gone, now=1011) is None
    assert sessions.user(kept, now=1011) == "ops"  # the same user's other session lives on
    assert sessions.revoke(gone, now=1012) is None  # revoking twice is not a second entry
    later = sessions.issue("ops", now=2000)
    assert sessions.revoke(later, now=2001) == "ops"
    assert len(sessions._revoked) == 1  # the first revocation left with its token's expiry


async def test_the_dashboard_needs_a_sign_in_and_sends_its_key_upstream(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    users = tmp_path / "dashboard.users"
    users.write_text(f"ops: {hash_password('ops-secret', iterations=1000)},read\n")
    async with serve_catcher(api_keys_file=keys_file(tmp_path)) as catcher:
        config = DashboardConfig(
            listen="127.0.0.1",
            port=0,
            bootstrap_servers="127.0.0.1:9",  # no broker: snapshots are stale, the page still serves
            catcher_url=catcher.http.url,
            users_file=users,
            catcher_token=DASHBOARD_KEY,
            log_shipping=False,
            refresh_interval=0.5,
        )
        async with (
            serve_app(create_dashboard(config)) as (url, _),
            aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser,
        ):
            async with browser.get(url + "/", allow_redirects=False) as response:
                assert response.status == 303
                assert response.headers["Location"] == "/login"
            for path in ("/api/snapshot", "/api/inbox", "/metrics"):
                async with browser.get(url + path) as response:
                    assert response.status == 401, path
            async with browser.get(url + "/login") as response:
                assert response.status == 200
                assert 'name="password"' in await response.text()
            wrong = {"user": "ops", "password": "nope"}
            async with browser.post(url + "/login", data=wrong, allow_redirects=False) as response:
                assert response.status == 401
                assert "wrong user or password" in await response.text()
            assert not browser.cookie_jar.filter_cookies(url)
            right = {"user": "ops", "password": "ops-secret"}
            async with browser.post(url + "/login", data=right, allow_redirects=False) as response:
                assert response.status == 303
                cookie = response.cookies[COOKIE]
                assert cookie["httponly"]
                assert cookie["samesite"] == "Strict"
            async with browser.get(url + "/", allow_redirects=False) as response:
                assert response.status == 200
                assert "streamshop dashboard" in await response.text()
            async with browser.get(url + "/api/inbox") as response:
                assert response.status == 200  # the catcher admitted the dashboard's key
                assert (await response.json())["items"] == []
            stolen = cookie.value
            assert not cookie["secure"]  # served over plain HTTP
            async with browser.post(url + "/logout", allow_redirects=False) as response:
                assert response.status == 303
            async with browser.get(url + "/api/snapshot") as response:
                assert response.status == 401
            async with (
                aiohttp.ClientSession(cookies={COOKIE: stolen}) as thief,
                thief.get(url + "/api/snapshot") as response,
            ):
                assert response.status == 401  # the copied cookie died with the sign-out
    assert "ops-secret" not in caplog.text
    assert DASHBOARD_KEY not in caplog.text


async def test_the_session_cookie_is_secure_when_the_dashboard_serves_https(tmp_path: Path) -> None:
    users = tmp_path / "dashboard.users"
    users.write_text(f"ops: {hash_password('ops-secret', iterations=1000)},read\n")
    server = LocalCA(tmp_path / "pki").issue("dashboard", hosts=("127.0.0.1",))
    config = DashboardConfig(
        listen="127.0.0.1",
        port=0,
        bootstrap_servers="127.0.0.1:9",
        users_file=users,
        ssl_certfile=server.certificate,
        ssl_keyfile=server.key,
        log_shipping=False,
    )
    assert config.scheme == "https"
    async with serve_app(create_dashboard(config)) as (url, client):  # TLS itself is the server's part
        right = {"user": "ops", "password": "ops-secret"}
        async with client.post(url + "/login", data=right, allow_redirects=False) as response:
            assert response.status == 303
            assert response.cookies[COOKIE]["secure"]


async def test_sign_in_guessing_is_throttled_and_logged_with_the_client_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kit caches a logger's processors on its first use, which an earlier test in this
    # process may have made: a fresh logger takes capture_logs' processors.
    monkeypatch.setattr(login, "log", structlog.get_logger(login.__name__))
    users = tmp_path / "dashboard.users"
    users.write_text(f"ops: {hash_password('ops-secret', iterations=1000)},read\n")
    config = DashboardConfig(
        listen="127.0.0.1", port=0, bootstrap_servers="127.0.0.1:9", users_file=users, log_shipping=False
    )
    with capture_logs() as logged:
        await _guess_then_sign_in(create_dashboard(config))
    failed = [entry for entry in logged if entry["event"] == "dashboard sign-in failed"]
    assert len(failed) == 4
    assert failed[0]["client"] == "127.0.0.1"
    assert "guess" not in str(failed)  # never the password


async def _guess_then_sign_in(app: web.Application) -> None:
    async with serve_app(app) as (url, client):
        statuses = []
        for _ in range(5):
            async with client.post(url + "/login", data={"user": "ops", "password": "guess"}) as response:
                statuses.append(response.status)
                retry_after = response.headers.get("Retry-After")
        assert statuses == [401, 401, 401, 401, 429]  # the fourth failure opened a window
        assert retry_after == "1"
        right = {"user": "ops", "password": "ops-secret"}
        async with client.post(url + "/login", data=right, allow_redirects=False) as response:
            assert response.status == 429  # refused unchecked while the window lasts


def test_catcher_config_reads_the_keys_file_setting(tmp_path: Path) -> None:
    path = keys_file(tmp_path)
    config = CatcherConfig.from_env({"CATCHER_API_KEYS_FILE": str(path)})
    assert config.api_keys_file == path
