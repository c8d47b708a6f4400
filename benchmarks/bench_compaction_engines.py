"""Full compaction of 5 overlapping level-0 files (200,000 rows each, keys from 500,000) with the
partial-update and aggregation (sum + last_non_null_value) merge engines, beside the "pyarrow limit"
(read, sort by key and sequence, keep the newest row per key, write one file) on the same data in
the same run. Target: at least 30% of the limit's rows/s. The last line reports the slower engine."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402
from bench_compaction import pyarrow_limit  # noqa: E402

from lsmlake.catalog.filesystem import FileSystemCatalog  # noqa: E402
from lsmlake.table.compact import compact_table  # noqa: E402

ENGINES = {
    "partial-update": {"merge-engine": "partial-update"},
    "aggregation": {"merge-engine": "aggregation", "fields.v.aggregate-function": "sum",
                    "fields.default-aggregate-function": "last_non_null_value"},
}


def main() -> None:
    data = common.batches()
    total = common.ROWS * common.BATCHES
    root = tempfile.mkdtemp(prefix="bench-engines-")
    try:
        paths = common.level0_files(data, root)
        rates = {}
        for name, options in ENGINES.items():
            cat = FileSystemCatalog(f"{root}/{name}")
            cat.create_database("db", True)
            t = cat.create_table("db.t", common.LAKE_SCHEMA, partition_keys=["dt"], primary_keys=["id", "dt"],
                                 options={"bucket": "1", **options})
            common.lake_write(t, data)
            secs, res = common.timed(lambda t=t: compact_table(t, full=True))
            (split,) = t.plan()
            rows = sum(f.row_count for f in split.files)
            rates[name] = common.report(f"lsmlake {name}: full compaction -> {rows} rows", secs, total)
        secs, limit_rows = common.timed(lambda: pyarrow_limit(paths, f"{root}/merged.parquet"))
        anchor = common.report(f"pyarrow limit: merge 5 files -> {limit_rows} rows", secs, total)
        slower = min(rates, key=lambda k: rates[k])
        common.result(f"full_compaction_5x200k_rows_{slower}", rates[slower],
                      "pyarrow limit (read, sort, dedupe, write)", anchor, ">= 0.3x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
