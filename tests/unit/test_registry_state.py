"""How records of `_schemas` change the registry's state: last-wins per key, so a compacted log
replays to the same state as the full one; and no record, whoever wrote it, binds one id to two
schemas."""

from __future__ import annotations

import json
import random
from typing import Any

from registry.state import RegistryState


def key(subject: str, version: int) -> bytes:
    return json.dumps({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}).encode()


def value(subject: str, version: int, schema_id: int, name: str, deleted: bool = False) -> bytes:
    schema = {"type": "record", "name": name, "fields": []}
    return json.dumps(
        {"subject": subject, "version": version, "id": schema_id, "schema": json.dumps(schema), "deleted": deleted}
    ).encode()


def view(state: RegistryState) -> dict[str, Any]:
    return {
        "subjects": {
            s: {v: (sv.id, sv.schema.identity, sv.deleted) for v, sv in versions.items()}
            for s, versions in state.subjects.items()
        },
        "schemas": {i: p.identity for i, p in state.schemas.items()},
        "ids": dict(state.ids_by_identity),
        "configs": dict(state.configs),
    }


def replay(records: list[tuple[bytes, bytes | None]]) -> RegistryState:
    state = RegistryState()
    for offset, (k, v) in enumerate(records):
        state.apply(offset, k, v)
    return state


def compacted(records: list[tuple[bytes, bytes | None]]) -> list[tuple[bytes, bytes | None]]:
    """What compaction keeps: the last record of each key, in log order (tombstones too)."""
    last = {k: i for i, (k, _) in enumerate(records)}
    return [r for i, r in enumerate(records) if last[r[0]] == i]


def test_the_latest_record_of_a_key_is_its_value() -> None:
    state = replay([(key("a", 1), value("a", 1, 1, "X")), (key("a", 1), value("a", 1, 1, "X", deleted=True))])
    assert state.subjects["a"][1].deleted
    state = replay([(key("a", 1), value("a", 1, 1, "X")), (key("a", 1), None)])
    assert state.subjects == {}
    assert state.schemas == {}
    assert state.ids_by_identity == {}


def test_a_record_that_would_bind_an_id_to_a_second_schema_is_refused() -> None:
    state = replay([(key("a", 1), value("a", 1, 1, "X")), (key("b", 1), value("b", 1, 1, "Y"))])
    assert "b" not in state.subjects
    assert state.rejected == 1
    assert state.schemas[1].identity == state.subjects["a"][1].schema.identity
    # nor may a schema get a second id
    state = replay([(key("a", 1), value("a", 1, 1, "X")), (key("b", 1), value("b", 1, 2, "X"))])
    assert "b" not in state.subjects
    assert state.rejected == 1


def test_a_key_may_be_rewritten_with_another_schema_when_no_other_key_holds_its_id() -> None:
    state = replay([(key("a", 1), value("a", 1, 1, "X")), (key("a", 1), value("a", 1, 1, "Y"))])
    assert state.rejected == 0
    assert state.schemas[1].identity == state.subjects["a"][1].schema.identity
    assert len(state.ids_by_identity) == 1


def test_a_compacted_log_replays_to_the_same_state_as_the_full_log() -> None:
    """What one writer leaves, in many random orders of registrations, soft and permanent
    deletes and config changes."""
    rng = random.Random(7)
    for _ in range(200):
        state = RegistryState()
        records: list[tuple[bytes, bytes | None]] = []

        def write(k: bytes, v: bytes | None, state: RegistryState = state, records: list[Any] = records) -> None:
            assert state.apply(len(records), k, v)
            records.append((k, v))

        names: dict[str, int] = {}
        for _step in range(30):
            subject = rng.choice("abc")
            versions = state.subjects.get(subject, {})
            action = rng.random()
            if action < 0.5:
                name = rng.choice("PQRSTU")
                if name not in names:
                    names[name] = max(state.max_id, 0) + 1
                if any(sv.schema.identity.find(f'"{name}"') >= 0 for sv in versions.values()):
                    continue
                version = max(versions, default=0) + 1
                write(key(subject, version), value(subject, version, names[name], name))
            elif action < 0.7 and versions:
                version = rng.choice(sorted(versions))
                sv = versions[version]
                if not sv.deleted:
                    write(key(subject, version), value(subject, version, sv.id, _name(sv.schema.text), True))
                else:
                    write(key(subject, version), None)
                    if not state.refs.get(sv.id):
                        names = {n: i for n, i in names.items() if i != sv.id}
            else:
                config = json.dumps({"keytype": "CONFIG", "subject": subject, "magic": 0}).encode()
                level = rng.choice(["NONE", "FULL", None])
                write(config, None if level is None else json.dumps({"compatibilityLevel": level}).encode())
        assert view(replay(compacted(records))) == view(state)
        assert view(replay(records)) == view(state)


def _name(text: str) -> str:
    return str(json.loads(text)["name"])
