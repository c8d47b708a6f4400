"""Merge-on-read of a 1-bucket primary-key table holding 5 overlapping level-0 files (1,000,000 rows),
beside pypaimon 2.1.0 reading the same data in the same run. Target: at least 3x pypaimon's rows/s.
Both readers must return the same number of rows as the pyarrow dedupe of the input."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402


def expected_rows(data: list[pa.Table]) -> int:
    return len(np.unique(np.concatenate([t.column("id").to_numpy() for t in data])))


def main() -> None:
    data = common.batches()
    total = common.ROWS * common.BATCHES
    root = tempfile.mkdtemp(prefix="bench-read-")
    try:
        lake = common.lake_table(f"{root}/lake")
        common.lake_write(lake, data)
        pp = common.pypaimon_table(f"{root}/pypaimon")
        common.pypaimon_write(pp, data)
        secs, out = common.timed(lambda: lake.to_arrow())
        ours = common.report(f"lsmlake: merge-on-read -> {out.num_rows} rows", secs, total)
        secs, ref = common.timed(lambda: common.pypaimon_read(pp))
        anchor = common.report(f"pypaimon 2.1.0: merge-on-read -> {ref.num_rows} rows", secs, total)
        exp = expected_rows(data)
        if out.num_rows != exp or ref.num_rows != exp:
            raise SystemExit(f"row counts differ: lsmlake {out.num_rows}, pypaimon {ref.num_rows}, expected {exp}")
        common.result("merge_on_read_1m_rows_5_files", ours, "pypaimon 2.1.0 merge-on-read", anchor, ">= 3x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
