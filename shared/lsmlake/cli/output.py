"""What `lake` prints: values in their JSON form, CSV, aligned text tables, and files written whole or not at all.

JSON output is built by casting whole columns to their JSON form (see `lake scan --help`).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from lsmlake.cli.errors import CliError, arrow_errors
from lsmlake.cli.records import cell, print_table
from lsmlake.format.types import AnyType, to_arrow_type

# -- values in their JSON form -------------------------------------------------------------------

def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _is_nested(t: pa.DataType) -> bool:
    return _is_list(t) or pa.types.is_map(t) or pa.types.is_struct(t)


def _has_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    if _is_list(t):
        return _has_map(t.value_type)
    if pa.types.is_struct(t):
        return any(_has_map(f.type) for f in t)
    return False


def _mask(arr: pa.Array) -> pa.Array | None:
    return arr.is_null() if arr.null_count else None


def _list_parts(arr: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Zero-based int32 offsets and the matching slice of the values of a list or map array."""
    offsets = arr.offsets
    start = offsets[0].as_py() if len(offsets) else 0
    end = offsets[-1].as_py() if len(offsets) else 0
    values = arr.values.slice(start, end - start)
    if start:
        offsets = pc.subtract(offsets, start)
    return offsets.cast(pa.int32()), values


def _json_ready(arr: pa.Array) -> pa.Array:
    """The array with every value in a form `to_pylist` + `json.dumps` render naturally."""
    t = arr.type
    if pa.types.is_decimal(t) or pa.types.is_date(t) or pa.types.is_time(t):
        return arr.cast(pa.string())
    if pa.types.is_timestamp(t):
        return pc.replace_substring(arr.cast(pa.string()), " ", "T", max_replacements=1)
    if _is_binary(t):
        return pa.array([None if v is None else base64.b64encode(v).decode("ascii") for v in arr.to_pylist()],
                        type=pa.string())
    if pa.types.is_map(t):
        offsets, entries = _list_parts(arr)
        keys, items = entries.flatten()
        ck, ci = _json_ready(keys), _json_ready(items)
        if ck.type.equals(keys.type) and ci.type.equals(items.type):
            return arr
        return pa.MapArray.from_arrays(offsets, ck, ci, mask=_mask(arr))
    if _is_list(t):
        offsets, values = _list_parts(arr)
        cv = _json_ready(values)
        if cv.type.equals(values.type):
            return arr
        return pa.ListArray.from_arrays(offsets, cv, mask=_mask(arr))
    if pa.types.is_struct(t):
        children = arr.flatten()
        converted = [_json_ready(c) for c in children]
        if all(a.type.equals(b.type) for a, b in zip(children, converted, strict=True)):
            return arr
        return pa.StructArray.from_arrays(converted, names=[f.name for f in t], mask=_mask(arr))
    return arr


def _maps_to_json(value: Any, t: pa.DataType) -> Any:
    """Maps come out of `to_pylist` as lists of (key, value) tuples: objects for string keys."""
    if value is None:
        return None
    if pa.types.is_map(t):
        if _is_string(t.key_type):
            return {k: _maps_to_json(v, t.item_type) for k, v in value}
        return [[_maps_to_json(k, t.key_type), _maps_to_json(v, t.item_type)] for k, v in value]
    if _is_list(t):
        return [_maps_to_json(x, t.value_type) for x in value]
    if pa.types.is_struct(t):
        return {f.name: _maps_to_json(value[f.name], f.type) for f in t}
    return value


def _non_finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return v


def json_values(col: pa.ChunkedArray | pa.Array) -> list[Any]:
    """The values of a column in their JSON form (see `lake scan --help`)."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    t = col.type
    values_out: list[Any] = []
    for chunk in chunks:
        values = _json_ready(chunk).to_pylist()
        if _has_map(t):
            values = [_maps_to_json(v, t) for v in values]
        if pa.types.is_floating(t) and len(chunk) and pc.any(pc.invert(pc.is_finite(chunk))).as_py():
            values = [_non_finite(v) for v in values]
        values_out.extend(values)
    return values_out


def json_rows(table: pa.Table) -> Iterator[dict[str, Any]]:
    names = table.column_names
    columns = [json_values(c) for c in table.columns]
    for values in zip(*columns, strict=True):
        yield dict(zip(names, values, strict=True))


class JsonValues:
    """Python values of given column types (key or partition tuples) in their JSON form, as `lake scan`."""

    def __init__(self, types: Sequence[AnyType]) -> None:
        self.arrow_types = [to_arrow_type(t) for t in types]

    def __call__(self, values: Sequence[Any]) -> list[Any]:
        converted: list[Any] = []
        for v, t in zip(values, self.arrow_types, strict=True):
            try:
                converted.append(json_values(pa.array([v], type=t))[0])
            except arrow_errors():
                converted.append(str(v))
        return converted


# -- CSV and text tables ---------------------------------------------------------------------------

def _csv_ready(table: pa.Table) -> pa.Table:
    """Columns the Arrow CSV writer cannot write (binary, nested) as base64 or JSON text."""
    columns = []
    for col in table.columns:
        if _is_binary(col.type):
            col = pa.chunked_array([_json_ready(c) for c in col.chunks], type=pa.string())
        elif _is_nested(col.type):
            texts = [None if v is None else json.dumps(v, ensure_ascii=False) for v in json_values(col)]
            col = pa.array(texts, type=pa.string())
        columns.append(col)
    return pa.table(columns, names=table.column_names)


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def write_rows(tables: Iterable[pa.Table], schema: pa.Schema, fmt: str, stream: IO[Any]) -> int:
    """Write the row batches in one format (jsonl, csv, parquet, table); returns the number of rows."""
    n = 0
    if fmt == "parquet":
        with pq.ParquetWriter(stream, schema) as writer:
            for t in tables:
                writer.write_table(t.cast(schema))
                n += t.num_rows
        return n
    if fmt == "jsonl":
        for t in tables:
            for row in json_rows(t):
                stream.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += t.num_rows
        return n
    if fmt == "csv":
        first = True
        for t in tables:
            buf = io.BytesIO()
            pcsv.write_csv(_csv_ready(t), buf, write_options=pcsv.WriteOptions(include_header=first))
            stream.write(buf.getvalue().decode("utf-8"))
            first = False
            n += t.num_rows
        if first:  # no rows: just the header
            buf = io.BytesIO()
            pcsv.write_csv(_csv_ready(schema.empty_table()), buf)
            stream.write(buf.getvalue().decode("utf-8"))
        return n
    rows: list[list[str]] = []
    for t in tables:
        columns = [json_values(c) for c in t.columns]
        rows.extend([cell(v) for v in r] for r in zip(*columns, strict=True))
    print_table(schema.names, rows, right=[i for i, f in enumerate(schema) if _numeric(f.type)], stream=stream)
    return len(rows)


@contextlib.contextmanager
def output_file(path: str, binary: bool) -> Iterator[IO[Any]]:
    """Write to a temporary file next to `path`, renamed over it only when everything succeeded."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".lake-", suffix=".tmp", dir=directory)
    except OSError as e:
        raise CliError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        f: IO[Any]
        f = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="")
        with f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
