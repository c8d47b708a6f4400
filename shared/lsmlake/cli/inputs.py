"""The input files of `lake write`, read and checked into rows of the table (before anything is written).

Parquet columns are cast to the table's types (`conform`). CSV and JSON go the way rows through the writer
service and Kafka go: each row becomes a plain JSON message (a CSV row through `ingest.csv_rows`) and
`decode_messages` converts the values by the table's column types, rejecting a row with the reason.
"""

from __future__ import annotations

import io
import os
import sys
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lsmlake.cli.errors import CliError, UsageError, arrow_errors
from lsmlake.errors import InvalidInputError, LakeError
from lsmlake.format.row_kind import ROW_KIND_COLUMN
from lsmlake.format.schema import TableSchema
from lsmlake.ingest.csv_rows import csv_messages, read_csv_cells
from lsmlake.ingest.decode import DecodeResult, decode_messages
from lsmlake.ingest.json_rows import json_messages
from lsmlake.table.input_rows import conform

_COMPRESSION_SUFFIXES = (".gz", ".bz2", ".zst", ".lz4")
_FORMAT_BY_EXTENSION = {".parquet": "parquet", ".parq": "parquet", ".csv": "csv", ".jsonl": "jsonl",
                        ".ndjson": "jsonl", ".json": "json"}

Source = str | bytes  # a file path, or the bytes read from stdin


def input_format(name: str, forced: str | None) -> str:
    """The format of an input: `--input-format`, else the file's extension."""
    if forced:
        return forced
    if name == "-":
        raise UsageError("reading stdin ('-') needs --input-format parquet|csv|jsonl|json")
    low = name.lower()
    compressed = False
    for suffix in _COMPRESSION_SUFFIXES:
        if low.endswith(suffix):
            low, compressed = low[: -len(suffix)], True
            break
    fmt = _FORMAT_BY_EXTENSION.get(os.path.splitext(low)[1])
    if fmt is None:
        raise UsageError(f"cannot tell the format of {name!r} from its extension "
                         "(.parquet, .csv, .jsonl, .json); pass --input-format")
    if fmt == "parquet" and compressed:
        raise UsageError(f"{name!r}: compressed Parquet files are not supported (Parquet compresses itself)")
    return fmt


def read_stdin() -> bytes:
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        data: bytes = buffer.read()
        return data
    return sys.stdin.read().encode()


def read_rows(src: Source, name: str, fmt: str, schema: TableSchema, identifier: str) -> pa.Table:
    """One input as the table's columns (in its Arrow types) and `_row_kind` codes; CliError naming the file
    (and for CSV and JSON the row and column) when it cannot be read or a row does not fit the table."""
    if fmt == "parquet":
        try:
            data = pq.read_table(_stream(src))
        except (OSError,) + arrow_errors() as e:
            raise CliError(f"cannot read {name} as {fmt}: {e}") from None
        data = _normalize_row_kind(data, name)
        if data.num_rows == 0:
            return data
        try:
            rows, kinds = conform(schema, data)
        except LakeError as e:
            raise CliError(f"{name}: {e}") from None
        return rows.append_column(ROW_KIND_COLUMN, kinds)
    try:
        if fmt == "csv":
            # In-memory input is small (stdin): read it on this thread (see `_stream`).
            cells = read_csv_cells(_stream(src), [ROW_KIND_COLUMN, *schema.field_names],
                                   use_threads=not isinstance(src, bytes))
            messages = csv_messages(cells, schema)
            places = [f"row {i}" for i in range(1, len(messages) + 1)]
        else:
            messages, places = json_messages(_raw_bytes(src), allow_array=fmt == "json")
    except InvalidInputError as e:
        raise CliError(f"{name}: {e}") from None
    except (OSError, UnicodeDecodeError) + arrow_errors() as e:
        raise CliError(f"cannot read {name} as {fmt}: {e}") from None
    result = decode_messages(schema, list(messages), "json", needs_retractions=False, table=identifier)
    if result.rejected:
        raise CliError(f"{name}: {_rejection(result, places)}")
    return result.batch


def _rejection(result: DecodeResult, places: list[str]) -> str:
    """The first rejected row in the CLI's words (the column quoted as elsewhere in `lake`), and how many more."""
    position, reason = result.rejected[0]
    column = result.rejected_columns.get(position)
    if column is not None:
        prefix = f'field "{column}": '
        reason = f"column {column!r}: {reason.removeprefix(prefix)}"
    more = len(result.rejected) - 1
    return f"{places[position]}: {reason}" + (f" (and {more} more invalid row{'s' if more != 1 else ''})"
                                               if more else "")


def _stream(src: Source) -> Any:
    """A fresh readable for pyarrow: the path itself (compression detected), or a file object.

    (Not a pa.BufferReader: a threaded CSV read of one sometimes aborts the process at exit with
    "terminate called without an active exception", pyarrow 19.)
    """
    return io.BytesIO(src) if isinstance(src, bytes) else src


def _raw_bytes(src: Source) -> bytes:
    if isinstance(src, bytes):
        return src
    with pa.input_stream(src, compression="detect") as f:
        data: bytes = f.read()
        return data


def _normalize_row_kind(data: pa.Table, name: str) -> pa.Table:
    """An empty `_row_kind` means +I; an all-empty column is dropped."""
    if ROW_KIND_COLUMN not in data.column_names:
        return data
    i = data.column_names.index(ROW_KIND_COLUMN)
    col = data.column(i)
    if col.null_count == len(col):
        return data.remove_column(i)
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = pc.fill_null(col, "+I")
    elif pa.types.is_integer(col.type):
        col = pc.fill_null(col, 0)
    else:
        raise CliError(f"{name}: column {ROW_KIND_COLUMN!r} must hold +I, -U, +U or -D, not {col.type}")
    return data.set_column(i, ROW_KIND_COLUMN, col)
