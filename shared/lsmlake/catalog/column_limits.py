"""The bounds a catalog puts on a table's column names and type texts.

Column names are quoted in `...` for the schema parser and its type parser recurses per nesting level, so both
are bounded before either sees them. The catalog service checks every request with these; a client checks a
definition with them before it creates anything, so a definition the catalog would refuse leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Sequence

from lsmlake.errors import InvalidInputError

MAX_COLUMNS = 10_000
MAX_COLUMN_NAME_CHARS = 255
MAX_TYPE_CHARS = 4_096
MAX_TYPE_NESTING = 32


def check_column(where: str, name: str, type_text: str) -> None:
    """InvalidInputError naming `where` for a column name or type text the schema parser must not see."""
    if not name or len(name) > MAX_COLUMN_NAME_CHARS or "`" in name or "\x00" in name:
        shown = name if len(name) <= 60 else f"{name[:40]}... ({len(name)} chars)"
        raise InvalidInputError(f"{where}: column name {shown!r} is invalid: 1 to {MAX_COLUMN_NAME_CHARS} characters, "
                                "no backtick or NUL")
    if len(type_text) > MAX_TYPE_CHARS:
        raise InvalidInputError(f"{where}: the type of column {name!r} is {len(type_text)} characters long; "
                                f"at most {MAX_TYPE_CHARS}")
    depth = deepest = 0
    for ch in type_text:
        depth += (ch in "<(") - (ch in ">)")
        deepest = max(deepest, depth)
    if deepest > MAX_TYPE_NESTING:
        raise InvalidInputError(f"{where}: the type of column {name!r} is nested {deepest} levels deep; "
                                f"at most {MAX_TYPE_NESTING}")


def check_columns(columns: Sequence[tuple[str, str]]) -> None:
    """InvalidInputError naming the first bad (name, type text) of a new table's columns, or when there are none
    or too many."""
    if not columns:
        raise InvalidInputError("columns must not be empty")
    if len(columns) > MAX_COLUMNS:
        raise InvalidInputError(f"columns has {len(columns)} entries; at most {MAX_COLUMNS}")
    for i, (name, type_text) in enumerate(columns):
        check_column(f"columns[{i}]", name, type_text)
