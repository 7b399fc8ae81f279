"""What the registry knows (`RegistryState`) and the rules by which records of the `_schemas`
topic change it.

The state is built only by applying records in log order, with deterministic rules, so every
registry instance that read the same records holds the same state. One primary writes
(`registry.store`), so records apply **last-wins**, as Confluent's do: a key's latest record is
its value, a tombstone removes it, and a compacted log (which keeps only the latest record of each
key) replays to the same state as the full one. One rule guards what a registry must never
do whoever wrote the topic: a `SCHEMA` record that would bind an id already bound, by another
key, to a different schema (or give a schema a second id) is refused, counted and logged. `apply`
says whether a record was applied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import structlog

from registry import log_records
from registry.errors import RegistryError
from registry.levels import Level
from registry.schema_text import ParsedSchema, parse_avro

log = structlog.get_logger(__name__)


class Mode(StrEnum):
    READWRITE = "READWRITE"
    READONLY = "READONLY"
    IMPORT = "IMPORT"


@dataclass(frozen=True)
class SchemaVersion:
    """One version of a subject: a `SCHEMA` record that the log accepted."""

    subject: str
    version: int
    id: int
    schema: ParsedSchema
    deleted: bool = False

    def value(self) -> bytes:
        """This version as the value of its `SCHEMA` record."""
        return log_records.schema_value(self.subject, self.version, self.id, self.schema.text, self.deleted)

    def describe(self) -> dict[str, Any]:
        """The REST API's view of this version."""
        return {"subject": self.subject, "version": self.version, "id": self.id, "schema": self.schema.text}


class RegistryState:
    """Everything the registry knows, built only by `apply`-ing records in log order: two
    instances that applied the same records hold the same state."""

    def __init__(self, default_compatibility: Level = Level.BACKWARD) -> None:
        self.default_compatibility = default_compatibility
        self.subjects: dict[str, dict[int, SchemaVersion]] = {}
        self.schemas: dict[int, ParsedSchema] = {}  # ids bound by at least one (soft-deleted or not) version
        self.ids_by_identity: dict[str, int] = {}
        self.refs: dict[int, set[tuple[str, int]]] = {}
        self.max_id = 0
        self.configs: dict[str | None, Level] = {}
        self.modes: dict[str | None, Mode] = {}
        self.rejected = 0  # SCHEMA records refused: they would bind one id to two schemas
        self.unreadable = 0  # records of the topic that did not decode (skipped)

    # -- reading ---------------------------------------------------------------------------

    def versions(self, subject: str, include_deleted: bool = False) -> list[SchemaVersion]:
        found = self.subjects.get(subject, {})
        return [found[v] for v in sorted(found) if include_deleted or not found[v].deleted]

    def subject_names(self, include_deleted: bool = False) -> list[str]:
        return sorted(s for s in self.subjects if self.versions(s, include_deleted))

    def compatibility(self, subject: str | None) -> Level:
        if subject is not None and subject in self.configs:
            return self.configs[subject]
        return self.configs.get(None, self.default_compatibility)

    def mode(self, subject: str | None) -> Mode:
        if subject is not None and subject in self.modes:
            return self.modes[subject]
        return self.modes.get(None, Mode.READWRITE)

    def versions_of_id(self, schema_id: int, include_deleted: bool = False) -> list[SchemaVersion]:
        found = [self.subjects[s][v] for s, v in self.refs.get(schema_id, ())]
        return sorted(
            (sv for sv in found if include_deleted or not sv.deleted), key=lambda sv: (sv.subject, sv.version)
        )

    # -- applying records ----------------------------------------------------------------------

    def apply(self, offset: int, key: bytes | None, value: bytes | None) -> bool:
        """Apply one record of the log; False when it is rejected (or unreadable) and ignored."""
        try:
            k, v = log_records.decode(key, value)
        except ValueError as e:  # not JSON, or beyond its bounds (depth, numbers, surrogates)
            self.unreadable += 1
            log.warning("unreadable record ignored", offset=offset, error=str(e))
            return False
        if not isinstance(k, dict):
            return False
        keytype = k.get("keytype")
        subject = k.get("subject")
        if subject is not None and not isinstance(subject, str):
            return False
        if keytype == "SCHEMA":
            version = k.get("version")
            if not isinstance(subject, str) or not isinstance(version, int) or isinstance(version, bool):
                return False
            accepted = self._apply_schema(subject, version, v)
            if not accepted:
                self.rejected += 1
                log.warning("record refused", offset=offset, subject=subject, version=version)
            return accepted
        if keytype == "CONFIG":
            return self._apply_setting(self.configs, subject, v, "compatibilityLevel", Level)
        if keytype == "MODE":
            return self._apply_setting(self.modes, subject, v, "mode", Mode)
        if keytype == "DELETE_SUBJECT":
            if isinstance(subject, str) and isinstance(v, dict) and isinstance(v.get("version"), int):
                for number, sv in list(self.subjects.get(subject, {}).items()):
                    if number <= v["version"] and not sv.deleted:
                        self.subjects[subject][number] = replace(sv, deleted=True)
            return True
        return True  # NOOP, CLEAR_SUBJECT and keys of newer registries: nothing to do

    @staticmethod
    def _apply_setting(table: dict[str | None, Any], subject: str | None, v: Any, field: str, kind: type) -> bool:
        if v is None:
            table.pop(subject, None)
            return True
        raw = v.get(field) if isinstance(v, dict) else None
        if not isinstance(raw, str):
            return False
        try:
            table[subject] = kind(raw.upper())
        except ValueError:
            return False
        return True

    def _apply_schema(self, subject: str, version: int, v: Any) -> bool:
        key = (subject, version)
        current = self.subjects.get(subject, {}).get(version)
        if v is None:  # tombstone: the version is gone
            if current is not None:
                self._remove(current)
            return True
        if not isinstance(v, dict):
            return False
        schema_id, text, deleted = v.get("id"), v.get("schema"), v.get("deleted", False)
        if not isinstance(schema_id, int) or isinstance(schema_id, bool) or not isinstance(text, str):
            return False
        if not isinstance(deleted, bool) or str(v.get("schemaType") or "AVRO").upper() != "AVRO":
            return False
        try:
            parsed = parse_avro(text)
        except RegistryError:
            return False

        def bound_elsewhere(bound_id: int) -> bool:
            return bool(self.refs.get(bound_id, set()) - {key})

        bound = self.schemas.get(schema_id)
        if bound is not None and bound.identity != parsed.identity and bound_elsewhere(schema_id):
            return False  # the id belongs to another schema
        other = self.ids_by_identity.get(parsed.identity)
        if other is not None and other != schema_id and bound_elsewhere(other):
            return False  # the schema already has another id
        if current is not None:
            self._remove(current)
        bound = self.schemas.get(schema_id)
        schema = bound if bound is not None else parsed
        self.subjects.setdefault(subject, {})[version] = SchemaVersion(subject, version, schema_id, schema, deleted)
        self.schemas[schema_id] = schema
        self.ids_by_identity[parsed.identity] = schema_id
        self.refs.setdefault(schema_id, set()).add(key)
        self.max_id = max(self.max_id, schema_id)
        return True

    def _remove(self, sv: SchemaVersion) -> None:
        versions = self.subjects[sv.subject]
        del versions[sv.version]
        if not versions:
            del self.subjects[sv.subject]
        refs = self.refs[sv.id]
        refs.discard((sv.subject, sv.version))
        if not refs:
            del self.refs[sv.id]
            del self.schemas[sv.id]
            del self.ids_by_identity[sv.schema.identity]
