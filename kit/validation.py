"""Small declarative validation of JSON input, with one message per offending field.

    ORDER = Object({
        "customer_id": Str(min_len=1, max_len=64),
        "currency": Enum("EUR", "USD"),
        "items": List(Object({"sku": Str(min_len=1), "quantity": Int(minimum=1),
                              "unit_price": DecimalStr(minimum=Decimal(0), places=2)}), min_items=1),
        "note": Str(required=False),
    })
    order = ORDER.validate(await read_json(request))   # raises errors.ValidationError (422)

Every problem is collected (not only the first), keyed by its path (``items[1].quantity``), so
the client can fix all fields at once.  Validators return the cleaned value (decimal strings
become `Decimal`); unknown keys are refused unless ``extra=True``, so a typo in an optional
field name is an error instead of silently ignored.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from kit.errors import ValidationError

__all__ = [
    "NUL_MESSAGE",
    "Bool",
    "DecimalStr",
    "Enum",
    "Field",
    "Int",
    "List",
    "Number",
    "Object",
    "Str",
    "nul_problems",
    "validate",
]

# U+0000 is valid JSON and a valid percent-escape, but PostgreSQL stores it in neither text nor
# jsonb (SQLite does): refused at the edge, 422 on both backends.
NUL_MESSAGE = "must not contain a NUL character (U+0000)"

_Errors = dict[str, str]


class _Invalid(Exception):
    def __init__(self, message: str) -> None:
        self.message = message


class Field:
    """Base validator: `required` (when a key of an Object), `nullable` (accepts JSON null)."""

    def __init__(self, *, required: bool = True, nullable: bool = False, default: Any = None) -> None:
        self.required = required
        self.nullable = nullable
        self.default = default

    def check(self, value: Any, path: str, errors: _Errors) -> Any:
        """The cleaned value; problems go to `errors` under their path."""
        if value is None:
            if not self.nullable:
                errors[path] = "must not be null"
            return None
        try:
            return self.clean(value, path, errors)
        except _Invalid as e:
            errors[path] = e.message
            return None

    def clean(self, value: Any, path: str, errors: _Errors) -> Any:
        return value

    def json_schema(self) -> dict[str, Any]:
        """The JSON Schema (2020-12, as OpenAPI 3.1 uses it) of what this validator accepts."""
        schema = self._schema()
        if self.nullable:
            return {"anyOf": [schema, {"type": "null"}]}
        return schema

    def _schema(self) -> dict[str, Any]:
        return {}

    def validate(self, value: Any) -> Any:
        """Validate a whole document; ValidationError lists every problem by field path."""
        errors: _Errors = {}
        cleaned = self.check(value, "", errors)
        if errors:
            raise ValidationError({k or "(body)": v for k, v in errors.items()})
        return cleaned


_NO_NUL = r"^[^\x00]*$"
_NO_NUL_NOT_BLANK = r"^[^\x00]*[^\s\x00][^\x00]*$"


class Str(Field):
    def __init__(
        self,
        *,
        min_len: int | None = None,
        max_len: int | None = None,
        pattern: str | None = None,
        pattern_message: str | None = None,
        strip: bool = False,
        allowed: Collection[str] | None = None,
        allowed_message: str = "is not an allowed value",
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.min_len, self.max_len, self.strip = min_len, max_len, strip
        self.allowed, self.allowed_message = allowed, allowed_message
        self.pattern = re.compile(pattern) if pattern else None
        self.pattern_message = pattern_message or (f"must match {pattern}" if pattern else "")

    def clean(self, value: Any, path: str, errors: _Errors) -> Any:
        if not isinstance(value, str):
            raise _Invalid("must be a string")
        if self.strip:
            value = value.strip()
        if self.min_len is not None and len(value) < self.min_len:
            raise _Invalid("must not be empty" if self.min_len == 1 else f"must be at least {self.min_len} characters")
        if self.max_len is not None and len(value) > self.max_len:
            raise _Invalid(f"must be at most {self.max_len} characters")
        if self.pattern is not None and not self.pattern.fullmatch(value):
            raise _Invalid(self.pattern_message)
        if self.allowed is not None and value not in self.allowed:
            raise _Invalid(self.allowed_message)
        return value

    def _schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "string"}
        # No U+0000 (`nul_problems` refuses it before any validator runs), said in the pattern
        # unless a pattern of the field's own already says what the string may hold.
        schema["pattern"] = _NO_NUL
        if self.min_len is not None:
            schema["minLength"] = self.min_len
            if self.strip:
                schema["pattern"] = _NO_NUL_NOT_BLANK  # counted after stripping: blanks are not a value
        if self.max_len is not None:
            schema["maxLength"] = self.max_len
        if self.pattern is not None:
            schema["pattern"] = f"^(?:{self.pattern.pattern})$"  # fullmatch, in JSON Schema's search terms
        if self.allowed is not None:
            schema["enum"] = sorted(self.allowed)
        return schema


class Enum(Field):
    def __init__(self, *choices: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.choices = choices

    def clean(self, value: Any, path: str, errors: _Errors) -> Any:
        if value not in self.choices:
            raise _Invalid(f"must be one of {', '.join(self.choices)}")
        return value

    def _schema(self) -> dict[str, Any]:
        return {"type": "string", "enum": list(self.choices)}


def _bounds_schema(kind: str, minimum: Any, maximum: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": kind}
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    return schema


def _bounds(value: Any, minimum: Any, maximum: Any) -> None:
    if minimum is not None and value < minimum:
        raise _Invalid(f"must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise _Invalid(f"must be at most {maximum}")


class Int(Field):
    def __init__(self, *, minimum: int | None = None, maximum: int | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.minimum, self.maximum = minimum, maximum

    def clean(self, value: Any, path: str, errors: _Errors) -> Any:
        # bool is an int in Python but `true` is not a quantity.
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid("must be an integer")
        _bounds(value, self.minimum, self.maximum)
        return value

    def _schema(self) -> dict[str, Any]:
        return _bounds_schema("integer", self.minimum, self.maximum)


class Number(Field):
    def __init__(self, *, minimum: float | None = None, maximum: float | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.minimum, self.maximum = minimum, maximum

    def clean(self, value: Any, path: str, errors: _Errors) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _Invalid("must be a number")
        _bounds(value, self.minimum, self.maximum)
        return float(value)

    def _schema(self) -> dict[str, Any]:
        return _bounds_schema("number", self.minimum, self.maximum)


class Bool(Field):
    def clean(self, value: Any, path: str, errors: _Errors) -> Any:
        if not isinstance(value, bool):
            raise _Invalid("must be true or false")
        return value

    def _schema(self) -> dict[str, Any]:
        return {"type": "boolean"}


class DecimalStr(Field):
    """Money and other exact amounts as a decimal *string* (``"12.50"``): JSON numbers are
    binary floats in most clients, so they are refused rather than silently rounded."""

    _SYNTAX = re.compile(r"-?\d+(\.\d+)?")

    def __init__(
        self, *, minimum: Decimal | None = None, maximum: Decimal | None = None, places: int | None = None, **kw: Any
    ) -> None:
        super().__init__(**kw)
        self.minimum, self.maximum, self.places = minimum, maximum, places

    def clean(self, value: Any, path: str, errors: _Errors) -> Any:
        if not isinstance(value, str) or not self._SYNTAX.fullmatch(value):
            raise _Invalid('must be a decimal string such as "12.50"')
        try:
            number = Decimal(value)
        except InvalidOperation:
            raise _Invalid('must be a decimal string such as "12.50"') from None
        exponent = number.as_tuple().exponent
        if self.places is not None and isinstance(exponent, int) and -exponent > self.places:
            raise _Invalid(f"must have at most {self.places} decimal places")
        _bounds(number, self.minimum, self.maximum)
        return number

    def _schema(self) -> dict[str, Any]:
        limits = [f"at least {self.minimum}"] if self.minimum is not None else []
        limits += [f"at most {self.maximum}"] if self.maximum is not None else []
        limits += [f"at most {self.places} decimal places"] if self.places is not None else []
        schema = {"type": "string", "pattern": f"^(?:{self._SYNTAX.pattern})$", "examples": ["12.50"]}
        if limits:
            schema["description"] = "A decimal string, " + ", ".join(limits) + "."
        return schema


class List(Field):
    def __init__(
        self,
        item: Field,
        *,
        min_items: int | None = None,
        max_items: int | None = None,
        unique: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.item, self.min_items, self.max_items, self.unique = item, min_items, max_items, unique

    def clean(self, value: Any, path: str, errors: _Errors) -> Any:
        if not isinstance(value, list):
            raise _Invalid("must be a list")
        if self.min_items is not None and len(value) < self.min_items:
            raise _Invalid("must not be empty" if self.min_items == 1 else f"must have at least {self.min_items} items")
        if self.max_items is not None and len(value) > self.max_items:
            raise _Invalid(f"must have at most {self.max_items} items")
        if self.unique and len({repr(v) for v in value}) != len(value):
            raise _Invalid("must not contain duplicates")
        return [self.item.check(v, f"{path}[{i}]", errors) for i, v in enumerate(value)]

    def _schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "array", "items": self.item.json_schema()}
        if self.min_items is not None:
            schema["minItems"] = self.min_items
        if self.max_items is not None:
            schema["maxItems"] = self.max_items
        if self.unique:
            schema["uniqueItems"] = True
        return schema


class Object(Field):
    """`rules`: JSON Schema keywords for what the caller checks across fields after this
    validator (e.g. ``allOf`` of if/then), so that the description says it too."""

    def __init__(
        self, fields: Mapping[str, Field], *, extra: bool = False, rules: Mapping[str, Any] | None = None, **kw: Any
    ) -> None:
        super().__init__(**kw)
        self.fields = dict(fields)
        self.extra = extra
        self.rules = dict(rules or {})

    def clean(self, value: Any, path: str, errors: _Errors) -> Any:
        if not isinstance(value, dict):
            raise _Invalid("must be an object")
        out: dict[str, Any] = {}
        for name, spec in self.fields.items():
            sub = f"{path}.{name}" if path else name
            if name not in value:
                if spec.required:
                    errors[sub] = "is required"
                else:
                    out[name] = spec.default
                continue
            out[name] = spec.check(value[name], sub, errors)
        if not self.extra:
            for name in sorted(value.keys() - self.fields.keys()):
                errors[f"{path}.{name}" if path else name] = "is not an allowed field"
        else:
            out.update({k: v for k, v in value.items() if k not in self.fields})
        return out

    def _schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {name: spec.json_schema() for name, spec in self.fields.items()},
            "required": [name for name, spec in self.fields.items() if spec.required],
            "additionalProperties": self.extra,
            **self.rules,
        }

    def parameters(self, where: str = "query") -> list[dict[str, Any]]:
        """The fields as OpenAPI parameters (a query string validated with this Object)."""
        return [
            {"name": name, "in": where, "required": spec.required, "schema": spec.json_schema()}
            for name, spec in self.fields.items()
        ]


def validate(schema: Field, value: Any) -> Any:
    """`schema.validate(value)`: the cleaned value, or ValidationError (422) naming each field."""
    return schema.validate(value)


def nul_problems(value: Any, path: str = "") -> dict[str, str]:
    """Where a decoded input (a JSON document, or a mapping of parameters) holds U+0000, in a
    string or an object key: {field path: message}, empty when there is none.  Iterative: the
    depth is the parser's to bound, not the stack's."""
    problems: dict[str, str] = {}
    todo: list[tuple[str, Any]] = [(path, value)]
    while todo:
        where, item = todo.pop()
        if isinstance(item, str):
            if "\x00" in item:
                problems[where or "(body)"] = NUL_MESSAGE
        elif isinstance(item, Mapping):
            for key, sub in item.items():
                if isinstance(key, str) and "\x00" in key:
                    problems[where or "(body)"] = f"has a field name that {NUL_MESSAGE}"
                    continue
                todo.append((f"{where}.{key}" if where else str(key), sub))
        elif isinstance(item, list):
            todo.extend((f"{where}[{i}]", sub) for i, sub in enumerate(item))
    return problems
