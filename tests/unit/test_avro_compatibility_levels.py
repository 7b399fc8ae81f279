"""The schema registry's compatibility levels: NONE, BACKWARD, FORWARD, FULL and their transitive
variants, against one previous version and several, with the reasons naming the direction and
the version that failed.
"""

from __future__ import annotations

from typing import Any

import pytest

from registry.compatibility import check
from registry.levels import Level
from tests.support.avro_schemas import fld, record

V1 = record("User", fld("id", "string"), fld("name", "string"), namespace="acct")
# added an optional field: every level accepts it
V2_ADD_OPTIONAL = record(
    "User", fld("id", "string"), fld("name", "string"), fld("email", ["null", "string"], default=None), namespace="acct"
)
# added a required field: old data lacks it (not BACKWARD); old readers ignore it (FORWARD)
V2_ADD_REQUIRED = record("User", fld("id", "string"), fld("name", "string"), fld("age", "int"), namespace="acct")
# removed a field without default: new readers are fine (BACKWARD); old readers miss it (not FORWARD)
V2_REMOVE_REQUIRED = record("User", fld("id", "string"), namespace="acct")
# changed a type incompatibly both ways
V2_BREAKING = record("User", fld("id", "int"), fld("name", "string"), namespace="acct")

LEVEL_CASES = [
    # level, new schema, accepted?
    (Level.BACKWARD, V2_ADD_OPTIONAL, True),
    (Level.BACKWARD, V2_REMOVE_REQUIRED, True),
    (Level.BACKWARD, V2_ADD_REQUIRED, False),
    (Level.BACKWARD, V2_BREAKING, False),
    (Level.FORWARD, V2_ADD_OPTIONAL, True),
    (Level.FORWARD, V2_ADD_REQUIRED, True),
    (Level.FORWARD, V2_REMOVE_REQUIRED, False),
    (Level.FORWARD, V2_BREAKING, False),
    (Level.FULL, V2_ADD_OPTIONAL, True),
    (Level.FULL, V2_ADD_REQUIRED, False),
    (Level.FULL, V2_REMOVE_REQUIRED, False),
    (Level.FULL, V2_BREAKING, False),
    (Level.NONE, V2_BREAKING, True),
    (Level.NONE, V2_ADD_REQUIRED, True),
]


@pytest.mark.parametrize(("level", "new", "accepted"), LEVEL_CASES)
def test_levels_with_one_previous_version(level: Level, new: dict[str, Any], accepted: bool) -> None:
    assert (check(new, [V1], level) == []) is accepted
    # with a single previous version, the transitive level decides the same
    if level is not Level.NONE:
        transitive = Level(f"{level.value}_TRANSITIVE")
        assert (check(new, [V1], transitive) == []) is accepted


def test_backward_reasons_say_which_direction_and_version_failed() -> None:
    reasons = check(V2_ADD_REQUIRED, [V1], Level.BACKWARD)
    assert reasons == [
        "new schema cannot read data written with existing schema #1: READER_FIELD_MISSING_DEFAULT_VALUE at "
        "/fields/age: reader field 'age' has no default value and is missing from writer record 'acct.User'"
    ]
    forward = check(V2_REMOVE_REQUIRED, [V1], Level.FORWARD)
    assert forward == [
        "existing schema #1 cannot read data written with the new schema: READER_FIELD_MISSING_DEFAULT_VALUE at "
        "/fields/name: reader field 'name' has no default value and is missing from writer record 'acct.User'"
    ]


def test_full_reports_both_directions() -> None:
    reasons = check(V2_BREAKING, [V1], Level.FULL)
    assert len(reasons) == 2
    assert reasons[0].startswith("new schema cannot read data written with existing schema #1: TYPE_MISMATCH")
    assert reasons[1].startswith("existing schema #1 cannot read data written with the new schema: TYPE_MISMATCH")


def test_nothing_to_compare_with_is_always_compatible() -> None:
    for level in Level:
        assert check(V1, [], level) == []


def test_levels_accept_their_string_names() -> None:
    assert check(V2_ADD_REQUIRED, [V1], "BACKWARD") != []  # type: ignore[arg-type]
    assert check(V2_ADD_REQUIRED, [V1], "FORWARD") == []  # type: ignore[arg-type]
    assert Level("FULL_TRANSITIVE") is Level.FULL_TRANSITIVE
    assert str(Level.BACKWARD) == "BACKWARD"
    assert [level.value for level in Level] == [
        "NONE",
        "BACKWARD",
        "BACKWARD_TRANSITIVE",
        "FORWARD",
        "FORWARD_TRANSITIVE",
        "FULL",
        "FULL_TRANSITIVE",
    ]


# Transitive cases: the new schema agrees with the latest version but not with an older one.
# v1 had no "tier"; v2 added it with a default; v3 drops the default: v3 reads v2 data (the field
# is there) but not v1 data (no field, no default).
T1 = record("Account", fld("id", "string"))
T2 = record("Account", fld("id", "string"), fld("tier", "string", default="basic"))
T3 = record("Account", fld("id", "string"), fld("tier", "string"))


def test_backward_checks_only_the_latest_version() -> None:
    assert check(T3, [T1, T2], Level.BACKWARD) == []


def test_backward_transitive_checks_every_version() -> None:
    reasons = check(T3, [T1, T2], Level.BACKWARD_TRANSITIVE)
    assert reasons == [
        "new schema cannot read data written with existing schema #1: READER_FIELD_MISSING_DEFAULT_VALUE at "
        "/fields/tier: reader field 'tier' has no default value and is missing from writer record 'Account'"
    ]
    assert check(T2, [T1], Level.BACKWARD_TRANSITIVE) == []


# F1 required "region"; F2 gave it a default; F3 removes it: F2 reads F3 data (default), F1 cannot.
F1 = record("Shop", fld("id", "string"), fld("region", "string"))
F2 = record("Shop", fld("id", "string"), fld("region", "string", default="eu"))
F3 = record("Shop", fld("id", "string"))


def test_forward_checks_only_the_latest_version() -> None:
    assert check(F3, [F1, F2], Level.FORWARD) == []


def test_forward_transitive_checks_every_version() -> None:
    reasons = check(F3, [F1, F2], Level.FORWARD_TRANSITIVE)
    assert len(reasons) == 1
    assert reasons[0].startswith("existing schema #1 cannot read data written with the new schema: ")
    assert "/fields/region" in reasons[0]


def test_full_transitive_checks_both_directions_against_every_version() -> None:
    # G1 -> G2 -> G3 each FULL compatible with the previous (a defaulted field comes and goes),
    # but G3 changes the type of "x" that G1 had and G2 did not: only G1 sees the conflict.
    g1 = record("G", fld("id", "string"), fld("x", "int", default=0))
    g2 = record("G", fld("id", "string"))
    g3 = record("G", fld("id", "string"), fld("x", "string", default=""))
    assert check(g2, [g1], Level.FULL) == []
    assert check(g3, [g1, g2], Level.FULL) == []
    reasons = check(g3, [g1, g2], Level.FULL_TRANSITIVE)
    assert len(reasons) == 2
    assert all("existing schema #1" in r and "/fields/x/type" in r for r in reasons)


def test_transitive_levels_report_the_latest_incompatible_version_first_and_only() -> None:
    # both v1 and v2 conflict with the new schema; like Confluent, the latest one is reported
    v1 = record("R", fld("a", "int"))
    v2 = record("R", fld("a", "int"), fld("b", "int", default=0))
    new = record("R", fld("a", "string"), fld("b", "int", default=0))
    reasons = check(new, [v1, v2], Level.BACKWARD_TRANSITIVE)
    assert reasons
    assert all("existing schema #2" in r for r in reasons)


def test_none_ignores_even_unrelated_schemas() -> None:
    assert check("string", [V1, T1, "int"], Level.NONE) == []
