"""CSV text as rows: each CSV row becomes the JSON object a plain JSON message would be, so its cells go
through the value rules of `values` (the ones WriteRows and Kafka messages go through) and `decode_messages`.

A cell is text, and the value rules take text for every scalar type (integers, floats, DECIMAL, DATE,
TIME, TIMESTAMP, base64 BINARY). Two kinds of column have no text form there: a BOOLEAN cell spelled as
the Arrow CSV reader spells booleans (true/false, True/False, TRUE/FALSE, 1/0) becomes a JSON boolean,
and the cell of an ARRAY, MAP or ROW column holds a JSON text, which becomes that JSON value. A cell that
fits neither stays text, so the value rules reject its row naming the column.
Nulls: an empty unquoted cell, NULL or null; a quoted "" is the empty string.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from decimal import Decimal
from json.encoder import encode_basestring
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from lsmlake.errors import InvalidInputError
from lsmlake.format import types as T
from lsmlake.format.schema import TableSchema
from lsmlake.format.types import AnyType, ArrayType, MapType, RowType, to_arrow_type
from lsmlake.ingest.values import BadValue, convert, show, type_name

CSV_NULL_VALUES = ["", "NULL", "null"]
TRUE_TEXTS = frozenset({"true", "True", "TRUE", "1"})
FALSE_TEXTS = frozenset({"false", "False", "FALSE", "0"})


def read_csv_cells(source: Any, names: Iterable[str], use_threads: bool = True) -> pa.Table:
    """A CSV file with a header row (a path or a file object) with the columns in `names` read as text;
    other columns come as the reader infers them (they are not the table's: their rows are rejected)."""
    convert_options = pcsv.ConvertOptions(column_types={n: pa.string() for n in names},
                                          null_values=CSV_NULL_VALUES, strings_can_be_null=True,
                                          quoted_strings_can_be_null=False)
    return pcsv.read_csv(source, read_options=pcsv.ReadOptions(use_threads=use_threads),
                         convert_options=convert_options)


def csv_messages(cells: pa.Table, schema: TableSchema) -> list[bytes]:
    """One plain JSON message per row of `cells` (from `read_csv_cells`), a field per column, nulls included.

    The messages are assembled column by column with Arrow kernels; only nested cells (checked as JSON), text
    holding control characters (escaped as JSON escapes them) and columns the reader inferred go through Python
    value by value."""
    names = cells.column_names
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidInputError(f"the input has duplicate columns {duplicates}")
    if not names:
        return [b"{}"] * cells.num_rows
    types = {f.name: f.type for f in schema.fields}
    fields = [_fields(n, c.combine_chunks(), types.get(n)) for n, c in zip(names, cells.columns, strict=True)]
    messages = pc.binary_join_element_wise("{", pc.binary_join_element_wise(*fields, ","), "}", "")
    out: list[bytes] = messages.cast(pa.binary()).to_pylist()
    return out


def text_value(text: str, t: AnyType) -> Any:
    """A value given as text (a CSV cell, a command-line argument) as the Python value of a column of type
    `t`, by the rules a CSV cell follows; raises BadValue."""
    value: Any = text
    if isinstance(t, ArrayType | MapType | RowType):
        try:
            value = json.loads(text, parse_float=Decimal)
        except ValueError:
            raise BadValue(f"expected {type_name(t)} as JSON text, got {show(text)}") from None
    elif t.kind == T.BOOLEAN:
        value = True if text in TRUE_TEXTS else False if text in FALSE_TEXTS else text
    return pa.array([convert(value, t)], to_arrow_type(t))[0].as_py()


def _fields(name: str, cells: pa.Array, t: AnyType | None) -> pa.Array:
    """`"name":value` for every cell of a column of type `t` (None: not a column of the table)."""
    if not pa.types.is_string(cells.type):  # a column the table does not have, as the reader inferred it
        values = pa.array([_plain(v) for v in cells.to_pylist()], pa.string())
    elif isinstance(t, ArrayType | MapType | RowType):
        values = pa.array([_json_text(v) for v in cells.to_pylist()], pa.string())
    else:
        values = _json_strings(cells)
        if t is not None and t.kind == T.BOOLEAN:
            values = pc.if_else(pc.is_in(cells, value_set=pa.array(sorted(TRUE_TEXTS))), "true",
                                pc.if_else(pc.is_in(cells, value_set=pa.array(sorted(FALSE_TEXTS))), "false",
                                           values))
    return pc.binary_join_element_wise(json.dumps(name, ensure_ascii=False) + ":", values, "")


def _json_strings(cells: pa.Array) -> pa.Array:
    """Text cells as JSON strings (null as null)."""
    if len(cells) and pc.any(pc.match_substring_regex(cells, r"[\x00-\x1f]")).as_py():
        return pa.array([_plain(v) for v in cells.to_pylist()], pa.string())
    escaped = pc.replace_substring(pc.replace_substring(cells, "\\", "\\\\"), '"', '\\"')
    return pc.fill_null(pc.binary_join_element_wise('"', escaped, '"', ""), "null")


def _plain(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return encode_basestring(value)
    return json.dumps(value, ensure_ascii=False)


def _json_text(value: str | None) -> str:
    """The cell's JSON text as it is (its numbers keep every digit), on one line; text that is no JSON stays a
    string. Line breaks can only be whitespace between the tokens of valid JSON, so they become spaces."""
    if value is None:
        return "null"
    try:
        json.loads(value)
    except ValueError:
        return _plain(value)
    return value.replace("\r", " ").replace("\n", " ")
