"""Properties of the Avro schema compatibility checker over generated schemas: every schema reads
itself, adding an optional field is FULL compatible, widening int to long is BACKWARD but not
FORWARD compatible, and whenever the checker says a reader can read a writer, fastavro really
decodes random data written with the writer using the reader.
"""

from __future__ import annotations

import copy
import io
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import fastavro
from fastavro.utils import generate_many
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from registry.compatibility import InvalidSchemaError, can_read, check
from registry.levels import Level
from tests.support.avro_schemas import PRIMITIVES, PROMOTIONS, decimal
from tests.support.examples import examples

PROPERTY_SETTINGS = settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)

NAMESPACES = ["a", "b.c", "", None]  # "": the null namespace; None: inherit the enclosing one
SIMPLE_LOGICAL = [
    {"type": "long", "logicalType": "timestamp-millis"},
    {"type": "long", "logicalType": "timestamp-micros"},
    {"type": "int", "logicalType": "date"},
    {"type": "string", "logicalType": "uuid"},
]


@dataclass
class SchemaGen:
    """Draws a random valid Avro schema (as JSON) with nested named types, references to earlier
    named types (full or short name, as the namespace requires) and optional self-references."""

    draw: st.DrawFn
    logical: bool
    counter: itertools.count[int] = field(default_factory=itertools.count)
    # full name -> namespace, for named types whose definition is complete
    defined: dict[str, str] = field(default_factory=dict)

    def schema(self, depth: int, namespace: str) -> Any:
        kinds = ["primitive"] * 3
        if self.logical:
            kinds.append("logical")
        if depth < 3:
            kinds += ["record", "record", "enum", "fixed", "array", "map", "union"]
        if self.referable(namespace):
            kinds.append("reference")
        return self.of_kind(self.draw(st.sampled_from(kinds)), depth, namespace)

    def referable(self, namespace: str) -> list[str]:
        """Named types a reference can reach from `namespace` (a null-namespace type cannot be
        named from inside a namespace: its name has no dot, so it would be qualified)."""
        return sorted(name for name, own in self.defined.items() if own or not namespace)

    def of_kind(self, kind: str, depth: int, namespace: str) -> Any:
        draw = self.draw
        if kind == "primitive":
            return draw(st.sampled_from(PRIMITIVES))
        if kind == "logical":
            return draw(
                st.sampled_from(SIMPLE_LOGICAL)
                | st.integers(1, 20).flatmap(lambda p: st.integers(0, p).map(lambda s: decimal(p, s)))
            )
        if kind == "array":
            return {"type": "array", "items": self.schema(depth + 1, namespace)}
        if kind == "map":
            return {"type": "map", "values": self.schema(depth + 1, namespace)}
        if kind == "reference":
            fullname = draw(st.sampled_from(self.referable(namespace)))
            own = self.defined[fullname]
            return fullname.rsplit(".", 1)[-1] if own == namespace and draw(st.booleans()) else fullname
        if kind == "union":
            return self.union(depth, namespace)
        name = f"N{next(self.counter)}"
        declared = draw(st.sampled_from(NAMESPACES))
        own = namespace if declared is None else declared
        node: dict[str, Any] = {"type": kind, "name": name}
        if declared is not None:
            node["namespace"] = declared
        if kind == "enum":
            node["symbols"] = draw(st.lists(st.sampled_from("ABCDEF"), min_size=1, max_size=4, unique=True))
            if draw(st.booleans()):
                node["default"] = node["symbols"][0]
        elif kind == "fixed":
            node["size"] = draw(st.integers(1, 4))
        else:
            names = draw(st.lists(st.sampled_from(["f0", "f1", "f2", "f3", "f4"]), max_size=4, unique=True))
            node["fields"] = []
            for field_name in names:
                field_type = self.schema(depth + 1, own)
                entry: dict[str, Any] = {"name": field_name, "type": field_type}
                default = default_for(field_type)
                if default is not NO_DEFAULT and draw(st.booleans()):
                    entry["default"] = default
                node["fields"].append(entry)
            if draw(st.integers(0, 3)) == 0:  # a linked list / tree: optional self-reference
                node["fields"].append({"name": "self_ref", "type": ["null", name], "default": None})
        self.defined[f"{own}.{name}" if own else name] = own
        return node

    def union(self, depth: int, namespace: str) -> list[Any]:
        # at most one branch per unnamed type, no nested unions, each named type once
        picked = self.draw(
            st.lists(
                st.sampled_from([*PRIMITIVES, "array", "map", "record", "enum", "fixed", "reference"]),
                min_size=1,
                max_size=4,
                unique=True,
            )
        )
        branches: list[Any] = []
        # the reference first: it must not name a type this union defines itself
        for kind in sorted(picked, key=lambda k: k != "reference"):
            if kind in PRIMITIVES:
                branches.append(kind)
            elif kind != "reference" or self.referable(namespace):
                branches.append(self.of_kind(kind, depth + 1, namespace))
        return branches or ["null"]


NO_DEFAULT = object()


def default_for(schema: Any) -> Any:
    """A valid default value for simple schemas, else NO_DEFAULT."""
    if isinstance(schema, list):
        return default_for(schema[0])
    kind = schema.get("type") if isinstance(schema, dict) else schema
    if isinstance(schema, dict) and schema.get("logicalType") in ("uuid", "decimal"):
        return NO_DEFAULT
    defaults: dict[str, Any] = {
        "null": None,
        "boolean": False,
        "int": 0,
        "long": 0,
        "float": 0.0,
        "double": 0.0,
        "string": "",
        "bytes": "",
        "array": [],
        "map": {},
    }
    if kind in defaults:
        return defaults[kind]
    if kind == "enum":
        return schema["symbols"][0]
    return NO_DEFAULT


@st.composite
def avro_schemas(draw: st.DrawFn, logical: bool = True, top: str | None = None) -> Any:
    gen = SchemaGen(draw, logical)
    return gen.schema(0, "") if top is None else gen.of_kind(top, 0, "")


@PROPERTY_SETTINGS
@given(avro_schemas())
def test_property_every_schema_reads_itself(schema: Any) -> None:
    fastavro.parse_schema(schema)  # the generator makes valid schemas
    assert can_read(schema, schema) == []
    for level in Level:
        assert check(schema, [schema, schema], level) == []


@PROPERTY_SETTINGS
@given(avro_schemas(top="record"), st.sampled_from(PRIMITIVES), st.booleans())
def test_property_adding_an_optional_field_is_backward_compatible(old: Any, kind: str, null_first: bool) -> None:
    added: dict[str, Any]
    if kind == "null":
        added = {"name": "added", "type": "null", "default": None}
    elif null_first:
        added = {"name": "added", "type": ["null", kind], "default": None}
    else:  # the default belongs to the first branch
        added = {"name": "added", "type": [kind, "null"], "default": default_for(kind)}
    new = copy.deepcopy(old)
    new["fields"].append(added)
    assert check(new, [old], Level.BACKWARD) == []
    assert check(new, [old], Level.BACKWARD_TRANSITIVE) == []
    # and, the old readers ignoring the new field, FORWARD and FULL compatible too
    assert check(new, [old], Level.FULL_TRANSITIVE) == []


def widen(schema: Any) -> tuple[Any, bool]:
    """Every plain "int" replaced by "long" (a copy), and whether any was."""
    if schema in ("int", {"type": "int"}):
        return "long", True
    if isinstance(schema, list):
        pairs = [widen(s) for s in schema]
        return [p[0] for p in pairs], any(p[1] for p in pairs)
    if isinstance(schema, dict):
        out, changed = {}, False
        for key, value in schema.items():
            if key in ("type", "items", "values") and not (key == "type" and isinstance(value, str)):
                out[key], c = widen(value)
                changed |= c
            elif key == "fields":
                out[key] = []
                for f in value:
                    new_type, c = widen(f["type"])
                    out[key].append({**f, "type": new_type})
                    changed |= c
            else:
                out[key] = value
        return out, changed
    return schema, False


@PROPERTY_SETTINGS
@given(avro_schemas(logical=False))
def test_property_widening_int_to_long_is_backward_but_not_forward(schema: Any) -> None:
    wide, changed = widen(schema)
    try:
        can_read(wide, wide)
    except InvalidSchemaError:  # a union that now holds "long" twice
        assume(False)
    assert can_read(wide, schema) == []
    event(f"int widened: {changed}")
    if changed and not has_union_reading_long(schema):
        # the old schema reads "long" nowhere: every field and branch of the writer is checked
        assert check(wide, [schema], Level.FORWARD) != []


def has_union_reading_long(schema: Any) -> bool:
    """Whether a union holds "int" next to a branch that could read it once widened."""
    text = json.dumps(schema)
    return '"float"' in text or '"double"' in text


@dataclass
class Mutator:
    """Derives a reader schema from a writer schema by random evolutions, compatible or not
    (names are kept, so references stay valid)."""

    draw: Callable[[st.SearchStrategy[Any]], Any]

    def mutate(self, schema: Any) -> Any:
        draw = self.draw
        if isinstance(schema, str) and schema in PRIMITIVES:
            choice = draw(st.sampled_from(["keep", "keep", "promote", "other", "optional"]))
            promotions = sorted(r for r, w in PROMOTIONS if w == schema)
            if choice == "promote" and promotions:
                return draw(st.sampled_from(promotions))
            if choice == "other":
                return draw(st.sampled_from(PRIMITIVES))
            if choice == "optional" and schema != "null":
                return ["null", schema]
            return schema
        if isinstance(schema, list):
            branches = [self.mutate(b) for b in schema]
            if draw(st.booleans()) and len(branches) > 1:
                del branches[draw(st.integers(0, len(branches) - 1))]
            if "null" not in branches and draw(st.booleans()):
                branches.append("null")
            return branches
        if not isinstance(schema, dict):
            return schema  # a reference
        out = dict(schema)
        kind = schema["type"]
        if kind == "array":
            out["items"] = self.mutate(schema["items"])
        elif kind == "map":
            out["values"] = self.mutate(schema["values"])
        elif kind == "enum":
            symbols = list(schema["symbols"])
            if draw(st.booleans()):
                symbols.append("Z")
            if len(symbols) > 1 and draw(st.booleans()):
                symbols.pop(0)
            out["symbols"] = symbols
            if "default" in out and out["default"] not in symbols:
                del out["default"]
        elif kind == "fixed" and draw(st.integers(0, 4)) == 0:
            out["size"] = schema["size"] + 1
        elif kind == "record":
            fields = []
            for f in schema["fields"]:
                if draw(st.integers(0, 4)) == 0:
                    continue  # drop the field
                new_type = self.mutate(f["type"])
                entry = {k: v for k, v in f.items() if k != "default"}
                entry["type"] = new_type
                kept = default_for(new_type)
                if "default" in f and type(kept) is type(f["default"]) and kept == f["default"]:
                    entry["default"] = f["default"]
                fields.append(entry)
            if draw(st.booleans()):
                added: dict[str, Any] = {"name": "added", "type": draw(st.sampled_from(["int", "string"]))}
                if draw(st.booleans()):
                    added["default"] = default_for(added["type"])
                fields.append(added)
            out["fields"] = fields
        return out


@settings(
    max_examples=examples(200),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
@given(st.data())
def test_property_whatever_the_checker_accepts_fastavro_can_decode(data: st.DataObject) -> None:
    """Soundness against a real implementation: when can_read says yes, fastavro decodes random
    data written with the writer schema using the reader schema."""
    writer = data.draw(avro_schemas(logical=False))
    reader = Mutator(data.draw).mutate(writer)
    try:
        parsed_reader = fastavro.parse_schema(reader)
        can_read(reader, reader)
    except (InvalidSchemaError, ValueError, fastavro.schema.SchemaParseException):
        # a dropped field held a definition a later reference needs, or "null" was added
        # to a union already holding it
        assume(False)
    parsed_writer = fastavro.parse_schema(writer)
    reasons = can_read(reader, writer)
    event("compatible" if not reasons else "incompatible")
    if reasons:
        return
    for datum in generate_many(parsed_writer, 3):
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed_writer, datum)
        buffer.seek(0)
        try:
            fastavro.schemaless_reader(buffer, parsed_writer, parsed_reader)
        except UnicodeDecodeError:
            # bytes read as string: the specification's promotion, so the schemas match, but
            # random bytes are not UTF-8 (fastavro writes every string as UTF-8, so nothing
            # else can raise this): a failure of the data, not of the schemas
            event("random bytes read as string")
