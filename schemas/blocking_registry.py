"""Writer schemas by id and a subject's latest schema, synchronously (stdlib HTTP, cached).

`schemas.client.RegistryClient` is asyncio; Spark's Python workers and the console tools are
plain blocking code, and they need only two calls of the Confluent REST API:
`GET /schemas/ids/{id}` and `GET /subjects/{subject}/versions/latest`.

An id names the same schema forever, so found schemas are cached per process for its lifetime
(Spark reuses its Python workers across batches).  An unknown id (404) is not cached across
calls: it may be registered a moment later.  Anything but an answer (connection refused,
timeout, 5xx) is retried with backoff for about 15 s (a registry being restarted), then raises
`RegistryUnavailableError`: the task fails, Spark retries it (3 more times under the job's
default master ``local[2,4]``), and a longer outage fails the query -- the job exits and its
supervisor restarts it.  A registry outage never turns good records into quarantined ones.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from schemas.serde import AvroSchema, InvalidSchemaError

__all__ = ["Missing", "RegistryUnavailableError", "fetch_schema", "latest_registered", "latest_schema", "subjects"]

_ACCEPT = "application/vnd.schemaregistry.v1+json, application/json"
_TIMEOUT_S = 10.0
_CACHE: dict[tuple[str, int], AvroSchema] = {}


class RegistryUnavailableError(RuntimeError):
    """The registry gave no usable answer; transient, retry."""


@dataclass(frozen=True, slots=True)
class Missing:
    """Why a schema id cannot be used: unknown, not Avro, or not a valid schema."""

    reason: str


def fetch_schema(url: str, schema_id: int, *, wait: bool = True) -> AvroSchema | Missing:
    """The writer schema with that id, or `Missing(reason)` when the registry has no usable one.

    `wait=False` asks once instead of retrying an unreachable registry for about 15 s."""
    key = (url, schema_id)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    body = _get(f"{url.rstrip('/')}/schemas/ids/{schema_id}", wait)
    if body is None:
        return Missing(f"schema id {schema_id} not found in the schema registry")
    schema_type = body.get("schemaType", "AVRO")
    if schema_type != "AVRO":
        return Missing(f"schema id {schema_id} is a {schema_type} schema, not Avro")
    if body.get("references"):
        return Missing(f"schema id {schema_id} uses schema references, which this source does not resolve")
    try:
        schema = AvroSchema.parse(str(body["schema"]))
    except (KeyError, InvalidSchemaError) as e:
        return Missing(f"schema id {schema_id} is not a usable Avro schema: {e}")
    _CACHE[key] = schema
    return schema


def latest_schema(url: str, subject: str) -> str:
    """The text of the latest schema registered under `subject`."""
    return latest_registered(url, subject)[1]


def latest_registered(url: str, subject: str, *, wait: bool = True) -> tuple[int, str]:
    """(id, text) of the latest schema registered under `subject`; ValueError when there is none."""
    body = _get(f"{url.rstrip('/')}/subjects/{quote(subject, safe='')}/versions/latest", wait)
    if body is None or not isinstance(body.get("schema"), str) or not isinstance(body.get("id"), int):
        raise ValueError(f"subject {subject!r} has no schema in the registry at {url}")
    return int(body["id"]), str(body["schema"])


_BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0)  # waits between attempts while the registry does not answer


def subjects(url: str) -> list[str]:
    """Every subject of the registry (asked once)."""
    body = _get_once(f"{url.rstrip('/')}/subjects", list)
    return [s for s in body or () if isinstance(s, str)]


def _get(url: str, patient: bool = True) -> dict[str, Any] | None:
    for wait in _BACKOFF_S if patient else ():
        try:
            return _get_once(url)  # type: ignore[no-any-return]
        except RegistryUnavailableError:
            time.sleep(wait)
    return _get_once(url)  # type: ignore[no-any-return]


def registry_request(
    url: str, data: bytes | None = None, headers: dict[str, str] | None = None
) -> urllib.request.Request:
    """A request to a registry URL, whose ``user:password@`` (if any) becomes basic auth: the
    one string carries the login to every process, Spark's workers included.  An https
    registry with a private CA is trusted through SSL_CERT_FILE, as by every Python client."""
    parts = urllib.parse.urlsplit(url)
    all_headers = dict(headers or {})
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        all_headers["Authorization"] = f"Basic {token}"
        host = parts.hostname or ""
        netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
        url = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return urllib.request.Request(url, data=data, headers=all_headers)


def shown(url: str) -> str:
    """`url` with its password masked, for messages."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)


def _get_once(url: str, kind: type = dict) -> Any:
    request = registry_request(url, headers={"Accept": _ACCEPT})
    url = shown(url)
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise RegistryUnavailableError(f"GET {url}: HTTP {e.code}") from e
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as e:
        raise RegistryUnavailableError(f"GET {url}: {e}") from e
    if not isinstance(body, kind):
        raise RegistryUnavailableError(f"GET {url}: expected a JSON {'object' if kind is dict else 'array'}")
    return body
