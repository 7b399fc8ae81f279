"""`row_chunks`: the multi-row VALUES lists of batch INSERTs, in power-of-two chunks (few distinct
statement texts, each kept prepared) with their parameters flat and in order."""

from __future__ import annotations

from services.common.db import in_chunks, row_chunks


def test_rows_are_chunked_by_powers_of_two_in_order() -> None:
    rows = [(n, f"r{n}") for n in range(150)]
    chunks = list(row_chunks(rows))
    assert [len(params) // 2 for _, params in chunks] == [64, 64, 16, 4, 2]
    assert [value for _, params in chunks for value in params] == [value for row in rows for value in row]
    for values, params in chunks:
        assert values.count("?") == len(params)
        assert values.count("(") == len(params) // 2


def test_a_single_row_and_no_rows() -> None:
    assert list(row_chunks([(1, 2, 3)])) == [("(?, ?, ?)", [1, 2, 3])]
    assert list(row_chunks([])) == []
    assert [len(p) for _, p in row_chunks([(0,)] * 7, largest=4)] == [4, 2, 1]


def test_values_are_chunked_into_in_lists() -> None:
    ids = list(range(100))
    chunks = list(in_chunks(ids))
    assert [len(values) for _, values in chunks] == [64, 32, 4]
    assert [v for _, values in chunks for v in values] == ids
    assert all(marks.count("?") == len(values) for marks, values in chunks)
