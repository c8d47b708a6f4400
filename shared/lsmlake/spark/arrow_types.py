"""Table schemas as Spark sees them, and Arrow batches shaped exactly as Spark expects them."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructField, StructType

from lsmlake.errors import InvalidInputError


def spark_schema(arrow_schema: pa.Schema) -> StructType:
    """The Spark schema of a table: TIMESTAMP -> TIMESTAMP_NTZ, TIMESTAMP_LTZ -> TIMESTAMP; every column nullable.

    Nullable because a NOT NULL column added by an alter still reads as null in older files.
    """
    st = from_arrow_schema(arrow_schema, prefer_timestamp_ntz=True)
    return StructType([StructField(f.name, f.dataType, True) for f in st.fields])


def check_columns(requested: StructType, available: Sequence[str], what: str) -> None:
    """Refuse a user-specified schema naming columns the table does not have."""
    missing = [f.name for f in requested.fields if f.name not in available]
    if missing:
        raise InvalidInputError(f"{what}: column(s) {missing} are not columns of the table (it has {list(available)})")


def arrow_target(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark reads batches of `schema` as (microsecond timestamps, UTC for TIMESTAMP)."""
    return to_arrow_schema(schema, timestamp_utc=True)


def conform(table: pa.Table, target: pa.Schema) -> pa.Table:
    """`table`'s columns in `target`'s order and types; timestamps lose sub-microsecond digits (Spark has none)."""
    table = table.select(target.names)
    if table.schema.equals(target, check_metadata=False):
        return table
    arrays = []
    for name, f in zip(target.names, target, strict=True):
        col = table.column(name)
        if not col.type.equals(f.type):
            col = col.cast(f.type, safe=not pa.types.is_timestamp(f.type))
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=target)
