"""Declarative input validation: cleaned values, and every problem named by its field path."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from kit.errors import ValidationError
from kit.validation import NUL_MESSAGE, Bool, DecimalStr, Enum, Int, List, Object, Str, nul_problems

ORDER = Object(
    {
        "customer_id": Str(min_len=1, max_len=10),
        "currency": Enum("EUR", "USD"),
        "items": List(
            Object(
                {
                    "sku": Str(pattern=r"[A-Z0-9-]+"),
                    "quantity": Int(minimum=1, maximum=100),
                    "unit_price": DecimalStr(minimum=Decimal(0), places=2),
                }
            ),
            min_items=1,
        ),
        "gift": Bool(required=False, default=False),
        "note": Str(required=False, nullable=True),
    }
)


def problems(value: Any) -> dict[str, str]:
    with pytest.raises(ValidationError) as info:
        ORDER.validate(value)
    return info.value.fields


def test_valid_input_is_cleaned_with_decimals_and_defaults() -> None:
    order = ORDER.validate(
        {"customer_id": "c1", "currency": "EUR", "items": [{"sku": "A-1", "quantity": 2, "unit_price": "12.50"}]}
    )
    assert order["items"][0]["unit_price"] == Decimal("12.50")
    assert order["gift"] is False
    assert order["note"] is None


def test_every_problem_is_reported_with_its_field_path() -> None:
    got = problems(
        {
            "currency": "GBP",
            "items": [{"sku": "a b", "quantity": 0, "unit_price": 12.5}, {"sku": "B", "quantity": True}],
            "colour": "red",
        }
    )
    assert got == {
        "customer_id": "is required",
        "currency": "must be one of EUR, USD",
        "items[0].sku": "must match [A-Z0-9-]+",
        "items[0].quantity": "must be at least 1",
        "items[0].unit_price": 'must be a decimal string such as "12.50"',
        "items[1].quantity": "must be an integer",
        "items[1].unit_price": "is required",
        "colour": "is not an allowed field",
    }


def test_types_lengths_nulls_and_decimal_places_are_checked() -> None:
    got = problems({"customer_id": "x" * 11, "currency": None, "items": [], "note": None, "gift": "yes"})
    assert got == {
        "customer_id": "must be at most 10 characters",
        "currency": "must not be null",
        "items": "must not be empty",
        "gift": "must be true or false",
    }
    got = problems(
        {"customer_id": "c", "currency": "EUR", "items": [{"sku": "A", "quantity": 1, "unit_price": "1.005"}]}
    )
    assert got == {"items[0].unit_price": "must have at most 2 decimal places"}


def test_a_body_that_is_not_an_object_is_a_body_level_problem() -> None:
    assert problems([1, 2]) == {"(body)": "must be an object"}


def test_the_error_is_a_422_with_fields_in_details() -> None:
    with pytest.raises(ValidationError) as info:
        ORDER.validate({})
    assert info.value.status == 422
    assert info.value.body()["error"] == "validation_failed"
    assert info.value.body()["details"]["fields"]["items"] == "is required"


def test_nul_problems_names_each_string_and_key_holding_u0000_at_any_depth() -> None:
    document = {
        "ok": "fine",
        "name": "a\x00b",
        "items": [{"sku": "x"}, {"sku": "\x00"}],
        "nested": {"bad\x00key": 1},
        "n": 3,
    }
    assert nul_problems(document) == {
        "name": NUL_MESSAGE,
        "items[1].sku": NUL_MESSAGE,
        "nested": f"has a field name that {NUL_MESSAGE}",
    }
    assert nul_problems("\x00") == {"(body)": NUL_MESSAGE}
    assert nul_problems({"clean": ["a", {"b": None}]}) == {}
