"""The catalog's bounds on column names and type texts, at their edges."""

from __future__ import annotations

import pytest

from lsmlake.catalog.column_limits import (
    MAX_COLUMN_NAME_CHARS,
    MAX_COLUMNS,
    MAX_TYPE_CHARS,
    MAX_TYPE_NESTING,
    check_column,
    check_columns,
)
from lsmlake.errors import InvalidInputError


def nested(depth: int) -> str:
    return "ARRAY<" * depth + "INT" + ">" * depth


def test_the_largest_allowed_name_and_type_pass() -> None:
    check_column("c", "n" * MAX_COLUMN_NAME_CHARS, nested(MAX_TYPE_NESTING))
    check_column("c", "x", "DECIMAL(10, 2)" + " " * (MAX_TYPE_CHARS - len("DECIMAL(10, 2)")))
    check_columns([("id", "INT"), ("v", "MAP<STRING, ROW<a INT, b ARRAY<STRING>>>")])


@pytest.mark.parametrize(("name", "type_text", "message"), [
    ("", "INT", "columns[3]: column name '' is invalid: 1 to 255 characters, no backtick or NUL"),
    ("n" * 256, "INT", "columns[3]: column name 'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn... (256 chars)' is invalid"),
    ("a`b", "INT", "column name 'a`b' is invalid"),
    ("a\x00b", "INT", "column name 'a\\x00b' is invalid"),
    ("x", "INT" + " " * (MAX_TYPE_CHARS - 2),
     "columns[3]: the type of column 'x' is 4097 characters long; at most 4096"),
    ("x", nested(MAX_TYPE_NESTING + 1), "columns[3]: the type of column 'x' is nested 33 levels deep; at most 32"),
    ("x", "ROW<a " * 33 + "INT" + ">" * 33, "is nested 33 levels deep"),
], ids=["empty", "long", "backtick", "nul", "long-type", "deep-array", "deep-row"])
def test_a_bad_column_is_named_with_its_place(name: str, type_text: str, message: str) -> None:
    with pytest.raises(InvalidInputError) as e:
        check_columns([("a", "INT"), ("b", "INT"), ("c", "INT"), (name, type_text)])
    assert message in str(e.value)


def test_no_columns_or_too_many_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="columns must not be empty"):
        check_columns([])
    with pytest.raises(InvalidInputError, match=f"columns has {MAX_COLUMNS + 1} entries; at most {MAX_COLUMNS}"):
        check_columns([(f"c{i}", "INT") for i in range(MAX_COLUMNS + 1)])
