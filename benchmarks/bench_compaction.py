"""Full compaction of 5 overlapping level-0 files (200,000 rows each, keys from 500,000) into one
sorted run, beside the "pyarrow limit" on the same data in the same run: read the five files,
concatenate, sort by key and sequence number, keep the newest row per key, write one Parquet file.
Target: at least 50% of the limit's rows/s."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

from lsmlake.table.compact import compact_table  # noqa: E402


def pyarrow_limit(paths: list[str], out: str) -> int:
    tb = pa.concat_tables([pq.ParquetFile(p).read() for p in paths])
    tb = tb.sort_by([("id", "ascending"), ("_SEQ", "ascending")])
    ids = tb.column("id").to_numpy()
    keep = np.ones(len(ids), bool)
    keep[:-1] = ids[1:] != ids[:-1]
    merged = tb.filter(pa.array(keep))
    pq.write_table(merged, out, compression="zstd", compression_level=1)
    return merged.num_rows


def main() -> None:
    data = common.batches()
    total = common.ROWS * common.BATCHES
    root = tempfile.mkdtemp(prefix="bench-compact-")
    try:
        paths = common.level0_files(data, root)
        lake = common.lake_table(f"{root}/lake")
        common.lake_write(lake, data)
        assert [len(s.files) for s in lake.plan()] == [common.BATCHES]
        secs, res = common.timed(lambda: compact_table(lake, full=True))
        (split,) = lake.plan()
        out_rows = sum(f.row_count for f in split.files)
        ours = common.report(f"lsmlake: full compaction -> {out_rows} rows, {len(split.files)} file(s)", secs, total)
        secs, limit_rows = common.timed(lambda: pyarrow_limit(paths, f"{root}/merged.parquet"))
        anchor = common.report(f"pyarrow limit: merge 5 files -> {limit_rows} rows", secs, total)
        if out_rows != limit_rows or res.snapshot_id is None:
            raise SystemExit(f"row counts differ: lsmlake {out_rows}, pyarrow {limit_rows}")
        common.result("full_compaction_5x200k_rows", ours, "pyarrow limit (read, sort, dedupe, write)", anchor,
                      ">= 0.5x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
