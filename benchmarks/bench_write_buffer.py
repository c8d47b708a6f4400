"""The writer service's write buffer: the anchor data set (1,000,000 rows, 1-bucket primary-key table)
arriving as many small batches through `BufferedTableWrite`, which spills sorted runs to local disk
and writes level-0 files at one commit, against a plain `TableWrite` of the same rows (5 big batches,
one commit) in the same run. Target: at least half the plain write's rows/s, spills included.

Options (environment): SMALL_ROWS (rows per small batch, 2000), BUFFER (write-buffer-size, "8 mb",
small enough that the buffer spills several times), plus ROWS, BATCHES, KEYS of common.py.
Run: .venv/bin/python benchmarks/bench_write_buffer.py
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

SMALL_ROWS = int(os.environ.get("SMALL_ROWS", "2000"))
BUFFER = os.environ.get("BUFFER", "8 mb")


def lake_table(root: str, options: dict[str, str]) -> Any:
    from lsmlake.catalog.filesystem import FileSystemCatalog

    cat = FileSystemCatalog(root)
    cat.create_database("db", True)
    return cat.create_table("db.t", common.LAKE_SCHEMA, partition_keys=["dt"], primary_keys=["id", "dt"],
                            options={"bucket": "1", **options})


def buffered_write(tbl: Any, small: list[pa.Table], spill_root: str) -> Any:
    from lsmlake.table.write_buffer import BufferedTableWrite

    with BufferedTableWrite(tbl, spill_root=spill_root) as bw:
        for batch in small:
            bw.write(batch)
        stats = bw.stats()
        tbl.commit_messages(bw.prepare_commit())
    return stats


def main() -> None:
    data = common.batches()
    total = common.ROWS * common.BATCHES
    small = [tb.slice(i, SMALL_ROWS) for tb in data for i in range(0, tb.num_rows, SMALL_ROWS)]
    root = tempfile.mkdtemp(prefix="bench-write-buffer-")
    try:
        plain = lake_table(f"{root}/plain", {})
        secs, _ = common.timed(lambda: plain.write_arrow(data))
        anchor = common.report("lsmlake TableWrite: 5 batches, 1 commit", secs, total)
        buffered = lake_table(f"{root}/buffered", {"write-buffer-size": BUFFER, "write-buffer-spillable": "true"})
        secs, stats = common.timed(lambda: buffered_write(buffered, small, root))
        ours = common.report(f"BufferedTableWrite: {len(small)} batches, 1 commit", secs, total)
        print(f"  spills {stats.spill_count}, spilled {stats.spilled_bytes / 2**20:.1f} MiB")
        assert stats.spill_count > 0, "the buffer did not spill: lower BUFFER"
        assert buffered.to_arrow().num_rows == plain.to_arrow().num_rows
        common.result("write_buffer_1m_rows_small_batches_spilling", ours, "lsmlake TableWrite, same rows", anchor,
                      ">= 0.5x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
