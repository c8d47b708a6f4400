"""Data files compress each column with the table's codec unless it is a fixed-width column whose
values do not compress: that column chunk is written uncompressed. Checked in the files' Parquet
metadata, and the rows read back the same through lsmlake and pypaimon."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pypaimon import CatalogFactory

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format import column_codecs
from lsmlake.format.data_file_writer import bucket_dir

N = 20_000
COLUMNS = ("id BIGINT NOT NULL, noise DOUBLE, hash BIGINT, small INT, stamp TIMESTAMP(6), name STRING, "
           "r ROW<a DOUBLE, b STRING>, l ARRAY<DOUBLE>")


def rows(rng: np.random.Generator, schema: pa.Schema, start: int) -> pa.Table:
    ids = np.arange(start, start + N, dtype=np.int64)
    noise = rng.random(N)
    return pa.table({
        "id": ids,
        "noise": pa.array(noise, mask=rng.random(N) < 0.01),
        "hash": rng.integers(-2**63, 2**63 - 1, N, dtype=np.int64),
        "small": (ids % 7).astype(np.int32),
        "stamp": pa.array(1_700_000_000_000_000 + ids * 1000, pa.timestamp("us")),
        "name": [f"name-{i % 100}" for i in ids],
        "r": pa.StructArray.from_arrays([pa.array(rng.random(N)), pa.array([f"b{i % 3}" for i in ids])],
                                        names=["a", "b"]),
        "l": pa.array([list(rng.random(i % 3)) for i in ids], pa.list_(pa.float64())),
    }).cast(schema)


def chunk_codecs(path: str) -> dict[str, str]:
    meta = pq.ParquetFile(path).metadata
    out: dict[str, str] = {}
    for g in range(meta.num_row_groups):
        for i in range(meta.num_columns):
            c = meta.row_group(g).column(i)
            assert out.setdefault(c.path_in_schema, c.compression) == c.compression
    return out


@pytest.mark.parametrize("pk", [True, False])
def test_incompressible_columns_are_written_uncompressed_and_read_back(tmp_path: Path, pk: bool) -> None:
    wh = str(tmp_path / "wh")
    cat = FileSystemCatalog(wh)
    cat.create_database("db", True)
    t = cat.create_table("db.t", COLUMNS, primary_keys=["id"] if pk else (),
                         options={"bucket": "1" if pk else "-1"})
    rng = np.random.default_rng(5)
    written = [rows(rng, t.schema.arrow_schema, 0), rows(rng, t.schema.arrow_schema, N)]
    for batch in written:
        t.write_arrow(batch)
    (split,) = t.plan()
    d = bucket_dir(t.path, "", 0)
    for f in split.files:
        codecs = chunk_codecs(f"{d}/{f.file_name}")
        uncompressed = sorted(p for p, c in codecs.items() if c == "UNCOMPRESSED")
        # random doubles and 64-bit hashes do not compress; ids, small ints, stamps, strings and the
        # nested columns (their doubles included: only top-level fixed-width columns are judged) do
        assert uncompressed == ["hash", "noise"], codecs
        assert {c for p, c in codecs.items() if p not in uncompressed} == {"ZSTD"}
    want = pa.concat_tables(written).sort_by("id")
    assert t.to_arrow().sort_by("id").equals(want)
    pyp = CatalogFactory.create({"warehouse": wh}).get_table("db.t")
    rb = pyp.new_read_builder()
    got = rb.new_read().to_arrow(rb.new_scan().plan().splits())
    assert got.sort_by("id").cast(want.schema).equals(want)


def test_a_table_without_compression_and_other_codecs_keep_their_codec(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    for codec, parquet_name in [("none", "UNCOMPRESSED"), ("lz4", "LZ4"), ("snappy", "SNAPPY")]:
        cat = FileSystemCatalog(str(tmp_path / codec))
        cat.create_database("db", True)
        t = cat.create_table("db.t", COLUMNS, options={"bucket": "-1", "file.compression": codec})
        batch = rows(rng, t.schema.arrow_schema, 0)
        t.write_arrow(batch)
        (split,) = t.plan()
        codecs = chunk_codecs(f"{bucket_dir(t.path, '', 0)}/{split.files[0].file_name}")
        expected_plain = set() if codec == "none" else {"hash", "noise"}
        assert {p for p, c in codecs.items() if c == "UNCOMPRESSED"} == (
            set(codecs) if codec == "none" else expected_plain)
        assert {c for p, c in codecs.items() if p not in expected_plain} == {parquet_name}
        assert t.to_arrow().sort_by("id").equals(batch)


fixed_width = st.sampled_from([pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.float32(), pa.float64(),
                               pa.date32(), pa.timestamp("us")])


@settings(max_examples=60, deadline=None)
@given(columns=st.lists(st.tuples(fixed_width, st.sampled_from(["random", "constant", "runs"]),
                                  st.floats(0, 1)), min_size=1, max_size=4),
       n=st.integers(1, 40_000), chunks=st.integers(1, 3), seed=st.integers(0, 2**32 - 1))
def test_choice_covers_every_leaf_and_follows_compressibility(columns: list[tuple[pa.DataType, str, float]],
                                                              n: int, chunks: int, seed: int) -> None:
    """Model: a column of random bytes in every value is written uncompressed; a constant column or
    one of long runs (of some kilobytes in all) never is. Whatever the choice, the file reads back
    the same, bit for bit."""
    rng = np.random.default_rng(seed)
    arrays, want_plain, want_zstd = {}, set(), set()
    for i, (typ, kind, null_share) in enumerate(columns):
        width = typ.bit_width // 8
        if kind == "random":
            raw = rng.integers(0, 256, n * width, dtype=np.uint8)
        elif kind == "constant":
            raw = np.tile(rng.integers(0, 256, width, dtype=np.uint8), n)
        else:
            raw = np.repeat(rng.integers(0, 256, (n // 500 + 1, width), dtype=np.uint8), 500, axis=0)[:n].ravel()
        nulls = pa.py_buffer(np.packbits(rng.random(n) >= null_share, bitorder="little").tobytes())
        arr = pa.Array.from_buffers(typ, n, [nulls, pa.py_buffer(raw.tobytes())])
        pieces = np.linspace(0, n, chunks + 1).astype(int)
        arrays[f"c{i}"] = pa.chunked_array([arr.slice(a, b - a) for a, b in zip(pieces[:-1], pieces[1:], strict=True)
                                            if b > a] or [arr])
        if kind == "random":
            want_plain.add(f"c{i}")
        elif n * width >= 4096:  # a few values of a run compress no better than random ones
            want_zstd.add(f"c{i}")
    table = pa.table(arrays)
    compression, level = column_codecs.choose(table, "zstd", 1)
    if isinstance(compression, str):
        assert compression == "zstd" and level == 1
        plain: set[str] = set()
    else:
        assert set(compression) == set(table.column_names)  # every leaf named: the default is no codec
        plain = {p for p, c in compression.items() if c == "none"}
        assert isinstance(level, dict) and set(level) == set(compression) - plain
    assert want_plain <= plain and not (want_zstd & plain)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression=compression, compression_level=level)
    back = pq.read_table(io.BytesIO(buf.getvalue()))
    for name in table.column_names:  # compared as integers: random bytes make NaNs, unequal to themselves
        typ = table.schema.field(name).type
        as_int = pa.int64() if typ.bit_width == 64 else pa.int32() if typ.bit_width == 32 else None
        got, want = back.column(name).combine_chunks(), table.column(name).combine_chunks()
        if pa.types.is_floating(typ) and as_int is not None:
            got, want = got.view(as_int), want.view(as_int)
        assert got.equals(want), name


def test_leaf_paths_of_nested_columns() -> None:
    schema = pa.schema([("a", pa.int64()), ("r", pa.struct([("x", pa.int32()), ("y", pa.list_(pa.string()))])),
                        ("m", pa.map_(pa.string(), pa.float64()))])
    paths = column_codecs.leaf_paths(schema)
    assert paths["a"] == ("a",)
    assert paths["r"][0] == "r.x" and len(paths["r"]) == 2 and paths["r"][1].startswith("r.y.")
    assert len(paths["m"]) == 2 and all(p.startswith("m.") for p in paths["m"])


def test_column_names_with_dots() -> None:
    n = 20_000
    rng = np.random.default_rng(2)
    r = pa.StructArray.from_arrays([pa.array(rng.random(n)), pa.array(np.zeros(n))], names=["c", "d"])
    table = pa.table({"a.b": pa.array([f"x{i % 5}" for i in range(n)]), "noise.x": rng.random(n), "r": r})
    assert column_codecs.leaf_paths(table.schema) == {"a.b": ("a.b",), "noise.x": ("noise.x",), "r": ("r.c", "r.d")}
    compression, level = column_codecs.choose(table, "zstd", 1)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression=compression, compression_level=level)
    meta = pq.ParquetFile(io.BytesIO(buf.getvalue())).metadata.row_group(0)
    assert {meta.column(i).path_in_schema: meta.column(i).compression for i in range(meta.num_columns)} == {
        "a.b": "ZSTD", "noise.x": "UNCOMPRESSED", "r.c": "ZSTD", "r.d": "ZSTD"}
