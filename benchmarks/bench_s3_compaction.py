"""A full compaction on an object store against a local disk, in one run.

The anchor data set (`common.batches`: 5 batches of 200,000 rows, keys from 500,000) written as 5 commits into a
primary-key table with 4 buckets (20 level-0 files), then compacted in full (one sorted run per bucket) by a process
that did not write it (a fresh catalog: nothing cached), on a local S3 server (moto in server mode, a separate
process on loopback, started and stopped here) and on a warehouse folder (the anchor). Each of ROUNDS rounds
writes both tables afresh; the medians are compared. The compaction's requests, counted from the server's access
log, are printed too.
Target: S3 at most 1.3x the local disk's time (issue 33), with at most 3 requests per input file, 1 per output file
and a constant.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402
from s3_local import LocalS3  # noqa: E402

from lsmlake.catalog.filesystem import FileSystemCatalog  # noqa: E402
from lsmlake.table.compact import compact_table  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "3"))
BUCKETS = 4


def compaction_s(warehouse: str, data: list[pa.Table],
                 s3: LocalS3 | None = None) -> tuple[float, int, int, dict[str, int]]:
    """Seconds of one full compaction of the written data; (seconds, input files, output files, requests)."""
    cat = FileSystemCatalog(warehouse)
    cat.create_database("db", ignore_if_exists=True)
    t = cat.create_table("db.t", common.LAKE_SCHEMA, partition_keys=["dt"], primary_keys=["id", "dt"],
                         options={"bucket": str(BUCKETS)})
    common.lake_write(t, data)
    compactor = FileSystemCatalog(warehouse).get_table("db.t")
    inputs = sum(len(s.files) for s in compactor.new_scan().plan())
    mark = s3.mark() if s3 is not None else 0
    secs, res = common.timed(lambda: compact_table(compactor, full=True))
    counted = dict(s3.requests_since(mark)) if s3 is not None else {}
    splits = compactor.new_scan().plan()
    outputs = sum(len(s.files) for s in splits)
    if res.snapshot_id is None or len(splits) != BUCKETS or any(len(s.files) != 1 for s in splits):
        raise SystemExit(f"the compaction on {warehouse.split('?')[0]} left {[len(s.files) for s in splits]} files")
    return secs, inputs, outputs, counted


def main() -> None:
    data = common.batches()
    total = common.ROWS * common.BATCHES
    root = Path(tempfile.mkdtemp(prefix="bench-s3-compaction-"))
    s3 = None
    try:
        s3 = LocalS3(root / "moto.log")
        local_s, remote_s = [], []
        for r in range(ROUNDS):
            # the order alternates, so that neither side always pays the first round's warm-up
            for side in ("local", "s3") if r % 2 == 0 else ("s3", "local"):
                if side == "local":
                    secs, _, _, _ = compaction_s(str(root / f"lake-{r}"), data)
                    local_s.append(secs)
                else:
                    secs, inputs, outputs, counted = compaction_s(s3.warehouse(f"wh-{r}"), data, s3)
                    remote_s.append(secs)
            print(f"round {r}: local disk {local_s[-1]:.2f} s, S3 {remote_s[-1]:.2f} s; {inputs} input files -> "
                  f"{outputs}; requests on S3 {sum(counted.values())} {counted} "
                  f"(bound 3 x {inputs} + {outputs} + a constant)")
        value, anchor = statistics.median(remote_s), statistics.median(local_s)
        common.report("full compaction on S3 (moto, loopback), median", value, total)
        common.report("full compaction on a local disk, median", anchor, total)
        print(json.dumps({"bench": f"s3_full_compaction_{total}_rows_{BUCKETS}_buckets", "value": round(value, 2),
                          "unit": "s (median)", "anchor": "the same compaction on a local disk, median",
                          "anchor_value": round(anchor, 2), "ratio": round(value / anchor, 2), "target": "<= 1.3x"}))
    finally:
        if s3 is not None:
            s3.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
