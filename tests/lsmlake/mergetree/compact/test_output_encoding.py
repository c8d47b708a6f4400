"""How compaction output is encoded: dictionaries only on columns with few distinct values, statistics as before,
and no pandas imported on the way (Arrow's numpy conversions would import it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format import column_codecs
from lsmlake.mergetree.sorted_run import SortedRun
from lsmlake.table.compact import compact_table


def _table(n: int) -> pa.Table:
    rng = np.random.default_rng(1)
    return pa.table({"id": pa.array(np.arange(n), pa.int64()), "few": pa.array(rng.integers(0, 3, n), pa.int64()),
                     "s": pa.array([f"v{i}" for i in range(n)]), "d": pa.array(rng.random(n)),
                     "tag": pa.array(["x"] * n), "nested": pa.array([{"a": i % 2} for i in range(n)])})


def test_dictionaries_only_where_values_repeat() -> None:
    t = _table(100_000)
    assert column_codecs.dictionary_columns(t) == ["few", "tag", "nested.a"]
    assert column_codecs.dictionary_columns(t.slice(0, 1000)) is True  # small: the writer's default


def test_compacted_file_keeps_its_rows_and_encodes_repeating_columns_with_dictionaries(tmp_path: Path) -> None:
    cat = FileSystemCatalog(str(tmp_path))
    cat.create_database("db", True)
    t = cat.create_table("db.t", "id BIGINT NOT NULL, k STRING, v DOUBLE", primary_keys=["id"], options={"bucket": "1"})
    n = 100_000
    rng = np.random.default_rng(3)
    want = {}
    for _ in range(3):
        ids = rng.permutation(n)[: n // 2]
        vs = rng.random(len(ids))
        t.write_arrow(pa.table({"id": pa.array(ids, pa.int64()), "k": pa.array(["same"] * len(ids)),
                                "v": pa.array(vs)}))
        want.update(zip(ids.tolist(), vs.tolist(), strict=True))
    assert compact_table(t, full=True).snapshot_id is not None
    (split,) = t.plan()
    (f,) = split.files
    path = f"{t.path}/bucket-0/{f.file_name}"
    meta = pq.ParquetFile(path).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    assert "RLE_DICTIONARY" in encodings["k"]
    assert "RLE_DICTIONARY" not in encodings["v"] and "RLE_DICTIONARY" not in encodings["id"]
    got = t.to_arrow()
    assert dict(zip(got.column("id").to_pylist(), got.column("v").to_pylist(), strict=True)) == want
    assert f.row_count == len(want)


def test_cli_full_compaction_imports_no_pandas(tmp_path: Path) -> None:
    cat = FileSystemCatalog(str(tmp_path))
    cat.create_database("db", True)
    t = cat.create_table("db.t", "id BIGINT NOT NULL, v BIGINT", primary_keys=["id"], options={"bucket": "1"})
    for b in range(2):
        ids = np.arange(b, 1000, 2 - b)
        t.write_arrow(pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(np.full(len(ids), b), pa.int64())}))
    code = ("import sys\nfrom lsmlake.cli.main import main\n"
            f"rc = main(['--warehouse', {str(tmp_path)!r}, 'compact', 'db.t', '--full'])\n"
            "print(rc, 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip().splitlines()[-1] == "0 False"
    (split,) = t.plan()
    assert sum(f.row_count for f in split.files) == 1000
    assert len(split.files) == 1


def test_partition_columns_are_made_once_for_the_merged_rows(tmp_path: Path) -> None:
    from lsmlake.mergetree.compact.strategy import strategy_from_options
    from lsmlake.table.compact import bucket_manager

    cat = FileSystemCatalog(str(tmp_path))
    cat.create_database("db", True)
    t = cat.create_table("db.t", "id BIGINT NOT NULL, dt STRING NOT NULL, v BIGINT", partition_keys=["dt"],
                         primary_keys=["id", "dt"], options={"bucket": "1"})
    want = {}
    for b in range(3):
        ids = np.arange(b, 3000, b + 1)
        for day in ("2026-11-20", "2026-11-21"):
            t.write_arrow(pa.table({"id": pa.array(ids, pa.int64()), "dt": pa.array([day] * len(ids)),
                                    "v": pa.array(np.full(len(ids), b), pa.int64())}))
            want.update({(int(i), day): b for i in ids})
    split = t.plan()[0]
    rewriter = bucket_manager(t, split, strategy_from_options(t.options)).rewriter
    assert rewriter._slim_merge is not None and rewriter._slim_merge.keys == ["id"]
    slim = rewriter.read_section([SortedRun.single(f) for f in split.files], slim=True)
    assert "dt" not in slim.column_names
    assert compact_table(t, full=True).snapshot_id is not None
    got = t.to_arrow()
    assert got.schema == t.to_arrow().schema
    assert {(i, d): v for i, d, v in zip(*(got.column(c).to_pylist() for c in ("id", "dt", "v")), strict=True)} == want
    assert all(len(s.files) == 1 for s in t.plan())
