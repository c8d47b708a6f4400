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


@lru_cache(maxsize=64)
def leaf_paths(schema: pa.Schema) -> dict[str, tuple[str, ...]]:
    """Each top-level column's Parquet leaf column paths (a nested column has several or longer
    ones), as the Parquet writer names them."""
    buf = io.BytesIO()
    pq.write_table(schema.empty_table(), buf)
    parquet_schema = pq.ParquetFile(io.BytesIO(buf.getvalue())).schema
    out: dict[str, list[str]] = {name: [] for name in schema.names}
    for i in range(len(parquet_schema)):
        path = parquet_schema.column(i).path
        out[path.split(".", 1)[0]].append(path)
    return {name: tuple(ps) for name, ps in out.items()}
