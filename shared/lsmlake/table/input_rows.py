"""Validating and shaping incoming rows against a table schema (before anything is written)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lsmlake.errors import InvalidInputError, SchemaMismatchError
from lsmlake.format import options as opts
from lsmlake.format import row_kind
from lsmlake.format.schema import TableSchema


def conform(schema: TableSchema, data: pa.Table | pa.RecordBatch) -> tuple[pa.Table, pa.Array]:
    """The rows cast to the table's columns, and the `_VALUE_KIND` of each row.

    The optional `_row_kind` column (or the column named by `rowkind.field`) gives each row's kind.
    Missing nullable columns are filled with nulls. Raises a SchemaMismatchError that names the
    column: an unknown column, a value that does not cast safely, a null in a NOT NULL column.
    """
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if not isinstance(data, pa.Table):
        raise InvalidInputError(f"expected an Arrow table or record batch, got {type(data).__name__}")
    names = data.column_names
    if len(set(names)) != len(names):
        raise SchemaMismatchError(f"the input has duplicate columns {sorted({n for n in names if names.count(n) > 1})}")
    table_cols = set(schema.field_names)
    unknown = [n for n in names if n not in table_cols and n != row_kind.ROW_KIND_COLUMN]
    if unknown:
        raise SchemaMismatchError(f"unknown column(s) {unknown}; the table has {schema.field_names}")
    n = data.num_rows
    if row_kind.ROW_KIND_COLUMN in names:
        kinds = row_kind.parse_kinds(data.column(row_kind.ROW_KIND_COLUMN))
    else:
        rk_field = schema.table_options.get(opts.ROWKIND_FIELD)
        if rk_field and rk_field in names:
            kinds = row_kind.parse_kinds(data.column(rk_field), rk_field)
        else:
            kinds = _zeros(n)
    if not schema.is_primary_key_table and n:
        if pc.any(pc.not_equal(kinds, row_kind.INSERT)).as_py():
            raise InvalidInputError("append-only tables accept only +I rows; use a primary-key table for updates")
    arrays = []
    for f, af in zip(schema.fields, schema.arrow_schema, strict=True):
        if f.name in names:
            col = data.column(f.name)
            if not col.type.equals(af.type):
                try:
                    col = col.cast(af.type, safe=True)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                    raise SchemaMismatchError(
                        f"column {f.name!r}: cannot convert {col.type} to {f.type.sql()}: {e}") from None
        else:
            if not f.type.nullable:
                raise SchemaMismatchError(f"column {f.name!r} is NOT NULL but missing from the input")
            col = pa.nulls(n, af.type)
        if not f.type.nullable and col.null_count:
            what = "primary-key column" if f.name in schema.primary_keys else "NOT NULL column"
            raise SchemaMismatchError(f"{what} {f.name!r} holds {col.null_count} null value(s)")
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=schema.arrow_schema), kinds


def _zeros(n: int) -> pa.Array:
    return pa.array(np.zeros(n, dtype=np.int8))
