"""OpenAPI 3.1 descriptions of the services, served at ``GET /openapi.json``.

Request bodies and query strings are described from the very validators the handlers use
(kit.validation), so the description cannot drift from what is accepted; responses
are described here, and a property-based API fuzzer (schemathesis) checks every answer of a
running service against them.

    doc = document("orders", "...", {"/orders": {"post": operation(...)}})
    serve_openapi(app, doc)
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from kit.api_keys import PUBLIC_PATHS
from kit.app import API_KEYS_KEY
from kit.validation import Field

__all__ = [
    "ERROR",
    "JSON",
    "OPENAPI_KEY",
    "document",
    "error_responses",
    "json_body",
    "obj",
    "operation",
    "path_parameter",
    "serve_openapi",
]

JSON = "application/json"
OPENAPI_VERSION = "3.1.0"

# The body of every error (kit.errors.ServiceError.body, the error middleware).
ERROR: dict[str, Any] = {
    "type": "object",
    "required": ["error", "message", "details"],
    "properties": {
        "error": {"type": "string", "description": "stable machine-readable code, e.g. validation_failed"},
        "message": {"type": "string"},
        "details": {"type": ["object", "null"]},
    },
}

_ERROR_TEXT = {
    400: "the body is not JSON",
    404: "not found",
    405: "method not allowed",
    409: "conflict with the current state",
    410: "gone",
    401: "no valid API key (Authorization: Bearer <key>)",
    413: "the body is larger than the service accepts",
    415: "the body is not declared JSON",
    422: "a field is invalid (details.fields names each)",
    429: "rate limited (Retry-After says when to retry)",
    502: "an upstream service is unavailable",
    503: "unavailable",
}
_BODY_ERRORS = (400, 413, 415, 422)


def obj(properties: Mapping[str, Any], required: Sequence[str] | None = None, **extra: Any) -> dict[str, Any]:
    """A JSON object schema; every property required unless `required` says otherwise."""
    return {
        "type": "object",
        "properties": dict(properties),
        "required": list(properties if required is None else required),
        **extra,
    }


def error_responses(*statuses: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for status in statuses:
        response: dict[str, Any] = {
            "description": _ERROR_TEXT.get(status, "error"),
            "content": {JSON: {"schema": {"$ref": "#/components/schemas/Error"}}},
        }
        if status == 429:
            response["headers"] = {"Retry-After": {"schema": {"type": "string", "pattern": "^[0-9]+$"}}}
        out[str(status)] = response
    return out


def json_body(schema: Field | Mapping[str, Any], description: str = "") -> dict[str, Any]:
    resolved = schema.json_schema() if isinstance(schema, Field) else dict(schema)
    body: dict[str, Any] = {"required": True, "content": {JSON: {"schema": resolved}}}
    if description:
        body["description"] = description
    return body


def path_parameter(name: str, schema: Mapping[str, Any] | None = None, description: str = "") -> dict[str, Any]:
    resolved = dict(schema or {"type": "string"})
    parameter: dict[str, Any] = {"name": name, "in": "path", "required": True, "schema": resolved}
    if description:
        parameter["description"] = description
    return parameter


def operation(
    operation_id: str,
    summary: str,
    ok: Mapping[int, Mapping[str, Any] | None],
    *,
    errors: Sequence[int] = (),
    body: Mapping[str, Any] | None = None,
    parameters: Sequence[Mapping[str, Any]] = (),
    content_type: str = JSON,
    headers: Mapping[int, Mapping[str, Any]] | None = None,
    links: Mapping[int, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """One operation: `ok` maps each success status to its body schema (None: no body); a body
    adds the errors of reading one (400, 413, 415, 422)."""
    responses: dict[str, Any] = {}
    for status, schema in ok.items():
        response: dict[str, Any] = {"description": summary}
        if schema is not None:
            response["content"] = {content_type: {"schema": dict(schema)}}
        if headers and status in headers:
            response["headers"] = {name: {"schema": s} for name, s in headers[status].items()}
        if links and status in links:
            response["links"] = dict(links[status])
        responses[str(status)] = response
    all_errors = sorted(set(errors) | (set(_BODY_ERRORS) if body is not None else set()))
    responses.update(error_responses(*all_errors))
    op: dict[str, Any] = {"operationId": operation_id, "summary": summary, "responses": responses}
    if parameters:
        op["parameters"] = [dict(p) for p in parameters]
    if body is not None:
        op["requestBody"] = dict(body)
    return op


_CHECK = obj({"ok": {"type": "boolean"}}, additionalProperties=True)


def _common_paths(service: str) -> dict[str, Any]:
    """/healthz, /readyz, /metrics: what kit.app.create_base_app serves."""
    return {
        "/healthz": {
            "get": operation(
                f"{service}_healthz",
                "the process is alive",
                {200: obj({"status": {"const": "ok"}, "service": {"type": "string"}, "instance": {"type": "string"}})},
            )
        },
        "/readyz": {
            "get": operation(
                f"{service}_readyz",
                "every readiness check passes (else 503 with each check's result)",
                {
                    200: obj(
                        {
                            "status": {"const": "ready"},
                            "checks": {"type": "object", "additionalProperties": _CHECK},
                        }
                    )
                },
                errors=(503,),
            )
        },
        "/metrics": {
            "get": operation(
                f"{service}_metrics",
                "Prometheus metrics (text exposition format)",
                {200: {"type": "string"}},
                content_type="text/plain",
            )
        },
    }


def document(
    service: str,
    description: str,
    paths: Mapping[str, Mapping[str, Any]],
    *,
    version: str = "1",
    common: bool = True,
) -> dict[str, Any]:
    """The whole description of `service`: its `paths`, plus the probes and metrics every
    service has (`common`) and ``/openapi.json`` itself."""
    all_paths: dict[str, Any] = dict(_common_paths(service)) if common else {}
    all_paths.update(copy.deepcopy(dict(paths)))
    all_paths["/openapi.json"] = {"get": operation(f"{service}_openapi", "this description", {200: {"type": "object"}})}
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": f"streamshop {service}", "version": version, "description": description},
        "paths": all_paths,
        "components": {"schemas": {"Error": ERROR}},
    }


OPENAPI_KEY: web.AppKey[dict[str, Any]] = web.AppKey("openapi")


def with_bearer_auth(doc: Mapping[str, Any], public: frozenset[str] = PUBLIC_PATHS) -> dict[str, Any]:
    """`doc` for a service that admits callers by API key: the bearer scheme, required by every
    operation but the public ones, each of which may then answer 401."""
    out = copy.deepcopy(dict(doc))
    out["components"]["securitySchemes"] = {
        "apiKey": {"type": "http", "scheme": "bearer", "description": "an API key of the service's keys file"}
    }
    for path, item in out["paths"].items():
        if path in public:
            continue
        for method, op in item.items():
            if method in {"get", "put", "post", "delete", "patch"}:
                op["security"] = [{"apiKey": []}]
                unauthorized = error_responses(401)["401"]
                unauthorized["headers"] = {"WWW-Authenticate": {"schema": {"type": "string"}}}
                op["responses"].setdefault("401", unauthorized)
    return out


def serve_openapi(app: web.Application, doc: dict[str, Any]) -> None:
    if app.get(API_KEYS_KEY) is not None:
        doc = with_bearer_auth(doc)
    app[OPENAPI_KEY] = doc

    async def openapi(request: web.Request) -> web.Response:
        return web.json_response(request.app[OPENAPI_KEY])

    app.router.add_get("/openapi.json", openapi)
