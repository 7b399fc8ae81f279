"""The registry's REST API as OpenAPI 3.1 (served at /openapi.json): Confluent Schema Registry's
API for Avro schemas, its media types and its error body ``{"error_code", "message"}``."""

from __future__ import annotations

from typing import Any

from registry.levels import Level
from registry.state import Mode

__all__ = ["registry_openapi"]

_ERROR = {
    "type": "object",
    "required": ["error_code", "message"],
    "properties": {
        "error_code": {"type": "integer", "description": "the HTTP status, or it refined by two digits (40401)"},
        "message": {"type": "string"},
    },
}
_ERROR_TEXT = {
    400: "the body is not a JSON object",
    404: "subject, version or schema not found (error_code says which)",
    406: "no acceptable response type",
    409: "the schema is incompatible with the subject's versions",
    415: "unsupported request media type",
    422: "invalid schema, version, level or mode, or the registry is read-only (error_code says which)",
}
_SUBJECT = {"name": "subject", "in": "path", "required": True, "schema": {"type": "string"}}
_VERSION = {
    "name": "version",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "examples": ["1", "latest"]},
    "description": "1 to 2147483647, or latest (also -1)",
}
_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}}
_VERSION_DESCRIPTION = {
    "type": "object",
    "required": ["subject", "version", "id", "schema"],
    "properties": {
        "subject": {"type": "string"},
        "version": {"type": "integer", "minimum": 1},
        "id": {"type": "integer", "minimum": 1},
        "schema": {"type": "string"},
    },
}
_LEVEL = {"type": "string", "enum": [level.value for level in Level]}
_MODE = {"type": "string", "enum": [mode.value for mode in Mode]}
_SCHEMA_BODY = {
    "type": "object",
    "required": ["schema"],
    "properties": {
        "schema": {"type": "string", "description": "the Avro schema as JSON text", "examples": ['"string"']},
        "schemaType": {
            "anyOf": [{"type": "string", "pattern": "^[Aa][Vv][Rr][Oo]$"}, {"type": "null"}],
            "description": "AVRO (any case; null or absent: AVRO)",
        },
        "references": {"type": ["array", "null"], "maxItems": 0, "description": "not supported: must be empty"},
    },
}
_REGISTER_BODY = {
    **_SCHEMA_BODY,
    "properties": {
        **_SCHEMA_BODY["properties"],  # type: ignore[dict-item]
        "id": {
            "type": ["integer", "null"],
            "description": "register under this id (IMPORT mode; 0 or null: not given)",
        },
        "version": {"type": ["integer", "null"], "description": "register as this version (IMPORT mode)"},
    },
}
_SUBJECT_QUERY = {"name": "subject", "in": "query", "required": False, "schema": {"type": "string"}}
_PREFIX_QUERY = {"name": "subjectPrefix", "in": "query", "required": False, "schema": {"type": "string"}}


def _flag(name: str, description: str) -> dict[str, Any]:
    # Confluent's boolean query parameters: "true" (any case) turns them on, anything else is false.
    return {"name": name, "in": "query", "required": False, "schema": {"type": "string"}, "description": description}


def _op(
    operation_id: str,
    summary: str,
    ok: dict[str, Any],
    *,
    errors: tuple[int, ...] = (),
    parameters: tuple[dict[str, Any], ...] = (),
    body: dict[str, Any] | None = None,
    media: tuple[str, ...],
) -> dict[str, Any]:
    def content(schema: dict[str, Any]) -> dict[str, Any]:
        return {m: {"schema": schema} for m in media}

    responses: dict[str, Any] = {"200": {"description": summary, "content": content(ok)}}
    for status in sorted({406, *errors, *((400, 415, 422) if body is not None else ())}):
        responses[str(status)] = {"description": _ERROR_TEXT[status], "content": content(_ERROR)}
    op: dict[str, Any] = {"operationId": operation_id, "summary": summary, "responses": responses}
    if parameters:
        op["parameters"] = list(parameters)
    if body is not None:
        op["requestBody"] = {"required": True, "content": content(body)}
    return op


def registry_openapi(media: tuple[str, ...]) -> dict[str, Any]:
    """The description, answering in `media` (the negotiated response types)."""

    def op(*args: Any, **kw: Any) -> dict[str, Any]:
        return _op(*args, media=media, **kw)

    deleted = _flag("deleted", "include soft-deleted versions")
    strings = {"type": "array", "items": {"type": "string"}}
    integers = {"type": "array", "items": {"type": "integer"}}
    level_body = {
        "type": "object",
        "properties": {"compatibility": _LEVEL, "compatibilityLevel": _LEVEL},
        "anyOf": [{"required": ["compatibility"]}, {"required": ["compatibilityLevel"]}],
    }
    mode_body = {"type": "object", "required": ["mode"], "properties": {"mode": _MODE}}
    paths: dict[str, Any] = {
        "/": {"get": op("root", "an empty object (Confluent's root resource)", {"type": "object"})},
        "/healthz": {"get": op("registry_healthz", "the process serves HTTP", {"type": "object"})},
        "/readyz": {
            "get": op(
                "registry_readyz",
                "the broker answers and _schemas is read to its end (else 503)",
                {"type": "object", "required": ["status"], "properties": {"status": {"type": "string"}}},
            )
        },
        "/subjects": {
            "get": op(
                "list_subjects",
                "subject names",
                strings,
                parameters=(
                    deleted,
                    _flag("deletedOnly", "only soft-deleted subjects"),
                    _PREFIX_QUERY,
                ),
            )
        },
        "/subjects/{subject}": {
            "post": op(
                "lookup_schema",
                "the version of the subject that has this schema",
                _VERSION_DESCRIPTION,
                parameters=(_SUBJECT, deleted),
                body=_SCHEMA_BODY,
                errors=(404,),
            ),
            "delete": op(
                "delete_subject",
                "soft-delete a subject (permanent=true after a soft delete removes it)",
                integers,
                parameters=(_SUBJECT, _flag("permanent", "delete for good")),
                errors=(404, 422),
            ),
        },
        "/subjects/{subject}/versions": {
            "get": op(
                "list_versions",
                "a subject's version numbers",
                integers,
                parameters=(_SUBJECT, deleted, _flag("deletedOnly", "only soft-deleted versions")),
                errors=(404,),
            ),
            "post": op(
                "register",
                "register a schema under a subject (the existing id when it is already there)",
                {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer", "minimum": 1}}},
                parameters=(_SUBJECT,),
                body=_REGISTER_BODY,
                errors=(409,),
            ),
        },
        "/subjects/{subject}/versions/{version}": {
            "get": op(
                "get_version",
                "one version",
                _VERSION_DESCRIPTION,
                parameters=(_SUBJECT, _VERSION, deleted),
                errors=(404, 422),
            ),
            "delete": op(
                "delete_version",
                "soft-delete a version (permanent=true after a soft delete removes it)",
                {"type": "integer"},
                parameters=(_SUBJECT, _VERSION, _flag("permanent", "delete for good")),
                errors=(404, 422),
            ),
        },
        "/subjects/{subject}/versions/{version}/schema": {
            "get": op(
                "get_version_schema",
                "one version's schema text itself",
                {},
                parameters=(_SUBJECT, _VERSION, deleted),
                errors=(404, 422),
            )
        },
        "/subjects/{subject}/versions/{version}/referencedby": {
            "get": op(
                "referenced_by",
                "ids of schemas that reference this version (none: references are not supported)",
                integers,
                parameters=(_SUBJECT, _VERSION),
                errors=(404, 422),
            )
        },
        "/schemas": {
            "get": op(
                "list_schemas",
                "every version of every subject",
                {"type": "array", "items": _VERSION_DESCRIPTION},
                parameters=(
                    deleted,
                    _flag("latestOnly", "only each subject's latest version"),
                    _PREFIX_QUERY,
                ),
            )
        },
        "/schemas/types": {"get": op("schema_types", "the schema types supported", strings)},
        "/schemas/ids/{id}": {
            "get": op(
                "get_schema",
                "a schema by id",
                {"type": "object", "required": ["schema"], "properties": {"schema": {"type": "string"}}},
                parameters=(_ID,),
                errors=(404,),
            )
        },
        "/schemas/ids/{id}/schema": {
            "get": op("get_schema_text", "a schema's text itself, by id", {}, parameters=(_ID,), errors=(404,))
        },
        "/schemas/ids/{id}/versions": {
            "get": op(
                "schema_versions",
                "the subject-versions that use a schema id",
                {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["subject", "version"],
                        "properties": {"subject": {"type": "string"}, "version": {"type": "integer"}},
                    },
                },
                parameters=(_ID, deleted, _SUBJECT_QUERY),
                errors=(404,),
            )
        },
        "/schemas/ids/{id}/subjects": {
            "get": op(
                "schema_subjects",
                "the subjects that use a schema id",
                strings,
                parameters=(_ID, deleted, _SUBJECT_QUERY),
                errors=(404,),
            )
        },
        "/mode": {
            "get": op("get_mode", "the global mode", mode_body),
            "put": op(
                "put_mode",
                "set the global mode",
                mode_body,
                body=mode_body,
                parameters=(_flag("force", "also when schemas exist (IMPORT)"),),
            ),
        },
        "/mode/{subject}": {
            "get": op(
                "get_subject_mode",
                "a subject's own mode (defaultToGlobal=true: the mode in force)",
                mode_body,
                parameters=(_SUBJECT, _flag("defaultToGlobal", "fall back to the global mode")),
                errors=(404,),
            ),
            "put": op(
                "put_subject_mode",
                "set a subject's mode",
                mode_body,
                body=mode_body,
                parameters=(_SUBJECT, _flag("force", "also when schemas exist (IMPORT)")),
            ),
            "delete": op(
                "delete_subject_mode", "remove a subject's mode", mode_body, parameters=(_SUBJECT,), errors=(404,)
            ),
        },
    }
    verbose = _flag("verbose", "include the reasons")
    compatibility_result = {
        "type": "object",
        "required": ["is_compatible"],
        "properties": {"is_compatible": {"type": "boolean"}, "messages": strings},
    }
    paths["/compatibility/subjects/{subject}/versions"] = {
        "post": op(
            "test_compatibility",
            "would this schema be accepted as the subject's next version",
            compatibility_result,
            parameters=(_SUBJECT, verbose),
            body=_SCHEMA_BODY,
            errors=(404,),
        )
    }
    paths["/compatibility/subjects/{subject}/versions/{version}"] = {
        "post": op(
            "test_compatibility_with_version",
            "is this schema compatible with one version",
            compatibility_result,
            parameters=(_SUBJECT, _VERSION, verbose),
            body=_SCHEMA_BODY,
            errors=(404, 422),
        )
    }
    level_out = {"type": "object", "properties": {"compatibilityLevel": _LEVEL, "compatibility": _LEVEL}}
    for path, name, params, get_errors in (
        ("/config", "config", (), ()),
        ("/config/{subject}", "subject_config", (_SUBJECT,), (404,)),
    ):
        get_params = (*params, _flag("defaultToGlobal", "fall back to the global level")) if params else params
        paths[path] = {
            "get": op(f"get_{name}", "the compatibility level", level_out, parameters=get_params, errors=get_errors),
            "put": op(f"put_{name}", "set the compatibility level", level_out, parameters=params, body=level_body),
            "delete": op(
                f"delete_{name}", "remove the compatibility level", level_out, parameters=params, errors=(404,)
            ),
        }
    paths["/openapi.json"] = {"get": op("registry_openapi", "this description", {"type": "object"})}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "streamshop schema registry",
            "version": "1",
            "description": "Confluent Schema Registry's REST API for Avro schemas, kept in the compacted topic "
            "_schemas.",
        },
        "paths": paths,
    }
