"""APPEND commit latency on an object store against a local disk, in one run.

A primary-key table with 2 buckets; COMMITS appends of 10 rows each through the library (`write_arrow`: write the
data files, commit one snapshot), on a local S3 server (moto in server mode, a separate process on loopback,
started and stopped here) and on a warehouse folder (the anchor), one commit on each in turn. moto answers on
loopback, so the figure is what the commit protocol costs in requests, not what a cloud store's latency adds; it
takes a few milliseconds of CPU a request (a thread and a connection each, Python's HTTP server), one request at a
time. The S3 commit's LATEST hint, written after the commit returned, is waited for before the next commit is
timed, and counted. The requests per commit, counted from the server's access log, are printed too.
Target: S3 p50 at most 3x the local disk's (issue 33), with at most 15 requests per commit.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))
from s3_local import LocalS3  # noqa: E402

from lsmlake.catalog.filesystem import FileSystemCatalog  # noqa: E402
from lsmlake.format.snapshot import settle_hints  # noqa: E402
from lsmlake.table.file_store_table import FileStoreTable  # noqa: E402

COMMITS = int(os.environ.get("S3_COMMITS", "60"))
ROWS = 10


def _table(warehouse: str) -> FileStoreTable:
    """A primary-key table with 2 buckets and two commits made (warm-up: table creation, the store's probe)."""
    cat = FileSystemCatalog(warehouse)
    cat.create_database("db", ignore_if_exists=True)
    t = cat.create_table("db.t", "k BIGINT NOT NULL, v STRING", primary_keys=["k"], options={"bucket": "2"})
    for w in range(2):
        t.write_arrow(pa.table({"k": pa.array(range(-ROWS * (w + 1), -ROWS * w), pa.int64()), "v": ["w"] * ROWS}))
    return t


def latencies_ms(local_warehouse: str, s3: LocalS3) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """Milliseconds of each of COMMITS appends on the local disk and on S3, taken in turns (so that both see the
    same moments of a noisy machine), and the requests the timed S3 commits sent, by method."""
    tables = {"local": _table(local_warehouse), "s3": _table(s3.warehouse("wh"))}
    out: dict[str, list[float]] = {"local": [], "s3": []}
    counted: collections.Counter[str] = collections.Counter()
    for i in range(COMMITS):
        rows = pa.table({"k": pa.array(range(i * ROWS, (i + 1) * ROWS), pa.int64()), "v": [f"r{i}"] * ROWS})
        for where in ("local", "s3") if i % 2 else ("s3", "local"):
            settle_hints()  # the previous S3 commit's LATEST hint, written after it returned, is not this one's cost
            mark = s3.mark()
            started = time.perf_counter()
            tables[where].write_arrow(rows)
            out[where].append((time.perf_counter() - started) * 1000)
            if where == "s3":
                settle_hints()
                counted += s3.requests_since(mark)
    for where, t in tables.items():
        if t.to_arrow().num_rows != (COMMITS + 2) * ROWS:
            raise SystemExit(f"rows lost on {where}")
    return np.array(out["local"]), np.array(out["s3"]), dict(counted)


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-s3-commit-"))
    s3 = None
    try:
        s3 = LocalS3(root / "moto.log")
        local, remote, counted = latencies_ms(str(root / "lake"), s3)
        per_commit = sum(counted.values()) / COMMITS
        for name, ms in (("APPEND commit on S3 (moto, loopback)", remote), ("APPEND commit on a local disk", local)):
            print(f"{name:40s} p50 {np.percentile(ms, 50):7.1f} ms  p99 {np.percentile(ms, 99):7.1f} ms")
        print(f"requests on S3 of the timed commits: {counted} ({per_commit:.1f} per commit)")
        value, anchor = float(np.percentile(remote, 50)), float(np.percentile(local, 50))
        print(json.dumps({"bench": f"s3_append_commit_p50_{COMMITS}_commits_of_{ROWS}_rows", "value": round(value, 1),
                          "unit": "ms p50", "anchor": "the same commits on a local disk, p50",
                          "anchor_value": round(anchor, 1), "ratio": round(value / anchor, 2), "target": "<= 3x"}))
    finally:
        if s3 is not None:
            s3.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
