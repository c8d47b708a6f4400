"""Writing a dynamic-bucket table (`bucket = -1`): lsmlake against pypaimon 2.1.0 on the same batches.

The anchor data set (`common.batches()`: BATCHES overlapping batches of ROWS rows, keys drawn from KEYS) is
written into a dynamic-bucket primary-key table with `dynamic-bucket.target-row-num` = 100,000, one commit
per batch, by lsmlake's library (vectorised key hashing, the key index looked up with sorted arrays, each
batch's new keys assigned and committed before its rows are written) and by pypaimon 2.1.0 (its
`HashBucketAssigner`). Both tables must read back the same rows. The figure is rows per second written;
beside it lsmlake writing the same batches into a fixed-bucket table with as many buckets, for the cost of
the key index. Target: at least pypaimon's rate.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from typing import Any

from common import BATCHES, LAKE_SCHEMA, ROWS, SCHEMA, batches, timed

TARGET_ROWS = "100000"


def _lake(wh: str, batch_list: list[Any], options: dict[str, str]) -> tuple[float, Any]:
    from lsmlake.catalog.filesystem import FileSystemCatalog

    cat = FileSystemCatalog(wh)
    cat.create_database("db", True)
    cat.create_table("db.t", LAKE_SCHEMA, primary_keys=["id"], options={"write-only": "true", **options})

    def run() -> None:
        for b in batch_list:
            cat.get_table("db.t").write_arrow(b)
    secs, _ = timed(run)
    return secs, cat.get_table("db.t")


def _pypaimon(wh: str, batch_list: list[Any]) -> tuple[float, Any]:
    from pypaimon import CatalogFactory, Schema

    cat = CatalogFactory.create({"warehouse": wh})
    cat.create_database("db", True)
    cat.create_table("db.t", Schema.from_pyarrow_schema(SCHEMA, primary_keys=["id"], options={
        "bucket": "-1", "dynamic-bucket.target-row-num": TARGET_ROWS, "file.format": "parquet",
        "write-only": "true"}), False)

    def run() -> None:
        for b in batch_list:
            builder = cat.get_table("db.t").new_batch_write_builder()
            w, c = builder.new_write(), builder.new_commit()
            w.write_arrow(b)
            c.commit(w.prepare_commit())
            w.close()
            c.close()
    secs, _ = timed(run)
    return secs, cat.get_table("db.t")


def main() -> None:
    batch_list = batches()
    total = ROWS * BATCHES
    root = tempfile.mkdtemp(prefix="bench-dynamic-")
    try:
        lake_s, lake_table = _lake(f"{root}/lake", batch_list, {"bucket": "-1",
                                                                 "dynamic-bucket.target-row-num": TARGET_ROWS})
        buckets = len({s.bucket for s in lake_table.plan()})
        fixed_s, _ = _lake(f"{root}/fixed", batch_list, {"bucket": str(buckets)})
        py_s, py_table = _pypaimon(f"{root}/py", batch_list)
        ours = lake_table.to_arrow().sort_by("id")
        rb = py_table.new_read_builder()
        theirs = rb.new_read().to_arrow(rb.new_scan().plan().splits()).select(ours.column_names).sort_by("id")
        if not ours.equals(theirs):
            raise SystemExit("lsmlake and pypaimon read different rows")
        rate, anchor, fixed = total / lake_s, total / py_s, total / fixed_s
        print(f"{'lsmlake, dynamic buckets':38s} {lake_s:7.2f} s  {rate:12,.0f} rows/s  ({buckets} buckets)")
        print(f"{'lsmlake, the same number of fixed buckets':38s} {fixed_s:7.2f} s  {fixed:12,.0f} rows/s")
        print(f"{'pypaimon 2.1.0, dynamic buckets':38s} {py_s:7.2f} s  {anchor:12,.0f} rows/s")
        print(json.dumps({"bench": f"dynamic_write_{BATCHES}x{ROWS}", "value": round(rate),
                          "unit": "rows/s", "anchor": "pypaimon 2.1.0 dynamic-bucket write",
                          "anchor_value": round(anchor), "ratio": round(rate / anchor, 2), "target": ">= 1x"}))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
