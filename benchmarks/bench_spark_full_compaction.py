"""Full compaction of a 5,000,000-row primary-key table with 16 buckets as ONE Spark job (one task per
bucket), timed on local[1] and on local[2]; the anchor is local[1], so the ratio is the speed-up.

The table is written by lsmlake (write-only, so writes do not compact) in 5 overlapping batches of
1,000,000 distinct keys each (drawn from 3,000,000): every bucket holds 5 level-0 files. Each mode compacts
a fresh copy of that table folder, so both do the same work; each SparkCompactor is started (and
its Python workers warmed up) before the clock starts, and stopped before the next one starts.
Only the job is timed; committing is not.

The machine has 2 cores shared with other work: local[2] can at best double local[1], and any
other load on the machine eats into that. Target: >= 1.5x (the speed-up scales with cores).
Sizes: ROWS_TOTAL, BATCHES, KEYS, BUCKETS environment variables.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

from lsmlake.catalog.filesystem import FileSystemCatalog  # noqa: E402
from lsmlake.spark.compaction_job import BucketTask, SparkCompactor, task_prefix  # noqa: E402
from lsmlake.table.compact import commit_compaction, plan_bucket  # noqa: E402

ROWS_TOTAL = int(os.environ.get("ROWS_TOTAL", "5000000"))
BATCHES = int(os.environ.get("BATCHES", "5"))
KEYS = int(os.environ.get("KEYS", "3000000"))
BUCKETS = int(os.environ.get("BUCKETS", "16"))


def batches() -> list[pa.Table]:
    """BATCHES overlapping batches of the anchor schema, ROWS_TOTAL rows in all (seeded)."""
    rng = np.random.default_rng(7)
    rows = ROWS_TOTAL // BATCHES
    out = []
    for b in range(BATCHES):
        ids = rng.permutation(KEYS)[:rows]
        s = pc.binary_join_element_wise("val-", pc.utf8_lpad(pa.array(ids).cast(pa.string()), 12, "0"), "")
        out.append(pa.table({"id": ids, "dt": pa.array(["2026-11-21"] * rows), "v": np.full(rows, b),
                             "s": s, "d": rng.random(rows)}, schema=common.SCHEMA))
    return out


def write_table(warehouse: str) -> int:
    cat = FileSystemCatalog(warehouse)
    cat.create_database("db", True)
    t = cat.create_table("db.t", common.LAKE_SCHEMA, partition_keys=["dt"], primary_keys=["id", "dt"],
                         options={"bucket": str(BUCKETS), "write-only": "true"})
    for tb in batches():
        t.write_arrow(tb)
    splits = t.plan()
    assert len(splits) == BUCKETS and all(len(s.files) >= BATCHES for s in splits), [len(s.files) for s in splits]
    return sum(s.row_count for s in splits)


def _warm(_: int) -> int:
    import lsmlake.spark.compaction_job  # noqa: F401 - imports the engine in the Python worker

    return os.getpid()


def compact_with_spark(master: str, warehouse: str) -> tuple[float, int, float, int]:
    """(seconds of the job, tasks of the job, seconds summed over tasks, rows after commit) on `master`."""
    t = FileSystemCatalog(warehouse).get_table("db.t")
    tasks = []
    prefix = task_prefix(master.replace("[", "").replace("]", "").replace(",", "_"))
    for split in t.plan():
        unit = plan_bucket(t, split, full=True)
        if unit is not None:
            tasks.append(BucketTask.of(t.identifier, split, unit, True, prefix))
    compactor = SparkCompactor(master, conf={"spark.driver.memory": "1g"})
    try:
        sc = compactor.start().sparkContext
        sc.parallelize(range(8), 8).map(_warm).collect()
        secs, outcomes = common.timed(lambda: compactor.run(warehouse, tasks))
        task_count = compactor.last_job_task_count() or 0
    finally:
        compactor.stop()
    errors = [o.error for o in outcomes if o.error]
    assert not errors, errors
    commit_compaction(t, [m for o in outcomes if (m := o.message()) is not None])
    after = t.plan()
    assert all(len({f.level for f in s.files}) == 1 for s in after)
    return secs, task_count, sum(o.seconds for o in outcomes), sum(s.row_count for s in after)


def main() -> None:
    root = tempfile.mkdtemp(prefix="bench-spark-compact-")
    try:
        base = f"{root}/base"
        secs, rows = common.timed(lambda: write_table(base))
        print(f"wrote {rows} rows into {BUCKETS} buckets x {BATCHES} level-0 files in {secs:.1f} s")
        results = {}
        for i, master in enumerate(("local[1]", "local[2]")):
            wh = f"{root}/run{i}"
            shutil.copytree(base, wh)
            secs, tasks, task_secs, out_rows = compact_with_spark(master, wh)
            print(f"{master}: one job of {tasks} tasks ({task_secs:.1f} s summed over tasks) -> {out_rows} rows")
            results[master] = common.report(f"spark {master}: full compaction of {rows} rows", secs, rows)
            shutil.rmtree(wh, ignore_errors=True)
        one, two = results["local[1]"], results["local[2]"]
        print(f"speed-up local[2] / local[1]: {two / one:.2f}x (2 shared cores)")
        common.result("spark_full_compaction_16_buckets", two, "spark local[1]", one, ">= 1.5x (scales with cores)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
