"""Which columns of a data file are compressed.

Parquet names the codec per column chunk. A data file is written with the table's codec
(`file.compression`, zstd by default), except for fixed-width columns whose values do not compress
(random doubles, hashes, random ids): those are written uncompressed, since compressing them saves a
few per cent of space and costs every later read a decompression pass over all their bytes (on a
deletion-vector table, where reads decode without merging, that pass is a large part of the read).
Whether a column compresses is judged from slices of its values compressed with the file's codec;
a wrong guess costs some space or some read time, never correctness. Every Parquet reader reads
uncompressed column chunks.
"""

from __future__ import annotations

import io
from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# A column is written uncompressed when the codec keeps at least this share of its sampled bytes.
INCOMPRESSIBLE = 0.9
SAMPLE_SLICES = 4  # spread over the column: its start alone may not be typical
SLICE_BYTES = 16 << 10

# pyarrow's Parquet codec names -> the Arrow codec of the same compressor, for the estimate
_ESTIMATE_CODEC = {"zstd": "zstd", "lz4": "lz4_raw", "lz4_raw": "lz4_raw", "snappy": "snappy",
                   "gzip": "gzip", "brotli": "brotli"}


def choose(table: pa.Table, codec: str, level: int | None) -> tuple[str | dict[str, str], int | dict[str, int] | None]:
    """(compression, compression_level) for `pq.write_table` of `table`: the codec for every column,
    or per leaf column when some fixed-width column is written uncompressed."""
    estimate = _ESTIMATE_CODEC.get(codec.lower())
    if estimate is None or table.num_rows == 0:
        return codec, level
    try:
        compressor = pa.Codec(estimate, compression_level=level if estimate == "zstd" else None)
    except (pa.ArrowNotImplementedError, ValueError):
        return codec, level
    plain = {name for name, col in zip(table.column_names, table.columns, strict=True)
             if _fixed_width(col.type) and _incompressible(col, compressor)}
    if not plain:
        return codec, level
    paths = leaf_paths(table.schema)
    if paths is None:  # the table's codec for every column rather than a guess at the names
        return codec, level
    codecs = {p: ("none" if name in plain else codec) for name, ps in paths.items() for p in ps}
    levels = None if level is None else {p: level for p, c in codecs.items() if c != "none"}
    return codecs, levels


def _fixed_width(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t)
            or pa.types.is_decimal(t)) and t.bit_width >= 8


def _incompressible(col: pa.ChunkedArray, compressor: pa.Codec) -> bool:
    width = col.type.bit_width // 8
    n = len(col)
    k = max(1, SLICE_BYTES // width)
    if n <= SAMPLE_SLICES * k:
        starts, k = [0], n  # the whole column
    else:  # disjoint slices: overlapping ones would compress against each other
        starts = [j * n // SAMPLE_SLICES for j in range(SAMPLE_SLICES)]
    sample = bytearray()
    for start in starts:
        a = col.slice(start, k).combine_chunks()
        values = a.buffers()[1]
        if values is None:  # no value buffer (all null): nothing worth judging
            return False
        sample += values[a.offset * width:(a.offset + len(a)) * width].to_pybytes()
    return len(compressor.compress(bytes(sample), asbytes=True)) >= INCOMPRESSIBLE * len(sample)


def dictionary_columns(table: pa.Table) -> bool | list[str]:
    """`use_dictionary` for `pq.write_table` of `table`: True (every column), or the leaf columns worth a
    dictionary when some flat column is judged to have too many distinct values for one.

    Parquet's writer tries a dictionary on every column and gives up on a column only once its dictionary page
    is full, having hashed that many values for nothing (a tenth of the encoding of a file of unique keys,
    random doubles and distinct strings). Judged from a sample like the codec choice: a wrong guess costs some
    space or some encoding time, never correctness.
    """
    if table.num_rows < DICTIONARY_MIN_ROWS:
        return True
    plain = {name for name, col in zip(table.column_names, table.columns, strict=True)
             if _flat(col.type) and _mostly_distinct(col)}
    if not plain:
        return True
    paths = leaf_paths(table.schema)
    if paths is None:
        return True
    return [p for name, ps in paths.items() if name not in plain for p in ps]


# below this many rows a file's dictionaries cost little either way
DICTIONARY_MIN_ROWS = 64 << 10
DICTIONARY_SAMPLE = 4 << 10  # values per slice
DISTINCT_SHARE = 0.5  # a sample with more distinct values than this share gets no dictionary


def _flat(t: pa.DataType) -> bool:
    return _fixed_width(t) or pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) \
        or pa.types.is_large_binary(t)


def _mostly_distinct(col: pa.ChunkedArray) -> bool:
    n = len(col)
    starts = [j * n // SAMPLE_SLICES for j in range(SAMPLE_SLICES)]
    sample = pa.chunked_array([c for s in starts for c in col.slice(s, DICTIONARY_SAMPLE).chunks], col.type)
    if len(sample) == 0:
        return False
    return pc.count_distinct(sample).as_py() > DISTINCT_SHARE * len(sample)


@lru_cache(maxsize=64)
def leaf_paths(schema: pa.Schema) -> dict[str, tuple[str, ...]] | None:
    """Each top-level column's Parquet leaf column paths (a nested column has several or longer
    ones), as the Parquet writer names them; None for a type whose leaves are not counted here.
    Leaves come in column order, so they are handed out by each column's leaf count (a name may
    itself hold dots)."""
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_batches([], schema=schema), buf)  # `empty_table` would import pandas
    parquet_schema = pq.ParquetFile(io.BytesIO(buf.getvalue())).schema
    paths = [parquet_schema.column(i).path for i in range(len(parquet_schema))]
    out: dict[str, tuple[str, ...]] = {}
    at = 0
    for f in schema:
        n = _leaves(f.type)
        out[f.name] = tuple(paths[at:at + n])
        at += n
    return out if at == len(paths) else None


def _leaves(t: pa.DataType) -> int:
    if pa.types.is_struct(t):
        return sum(_leaves(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _leaves(t.key_type) + _leaves(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _leaves(t.value_type)
    return 1
