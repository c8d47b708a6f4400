"""`lake compact db.t --full` of 5 overlapping level-0 runs (1,000,000 rows each, one bucket) as a whole process,
beside the copy floor measured in the same run.

The copy floor is the physical limit of any rewrite of those rows: a fresh Python process that imports pyarrow,
decodes the same five data files, concatenates them and encodes them once into one Parquet file with the table's
codec (zstd level 1). Both sides are timed as subprocesses from spawn to exit, so both pay an interpreter start;
the floor neither sorts nor dedupes nor commits. Each side runs REPEAT times, interleaved, on fresh copies of the
table; the medians count. The result is checked: distinct keys = rows after compaction, all on the top level.
The share of start-up (interpreter, imports, reading the snapshot, planning) is shown as the time of the same
command on the compacted table, which has nothing left to do.
Target: at least 80% of the floor's rows/s.
"""

from __future__ import annotations

import os

os.environ.setdefault("ROWS", "1000000")
os.environ.setdefault("KEYS", "2500000")

import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

REPEAT = int(os.environ.get("REPEAT", "5"))
LAKE = [sys.executable, "-m", "lsmlake.cli.main"]

FLOOR = """
import sys
import pyarrow as pa, pyarrow.parquet as pq
tb = pa.concat_tables([pq.ParquetFile(p).read() for p in sys.argv[2:]])
pq.write_table(tb, sys.argv[1], compression="zstd", compression_level=1)
"""


def run_timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    data = common.batches()
    total = common.ROWS * common.BATCHES
    distinct = pc.count_distinct(pa.chunked_array([b.column("id") for b in data])).as_py()
    root = tempfile.mkdtemp(prefix="bench-cli-compact-")
    try:
        base = f"{root}/base"
        lake = common.lake_table(base)
        common.lake_write(lake, data)
        (split,) = lake.plan()
        assert len(split.files) == common.BATCHES, [f.level for f in split.files]
        inputs = [f"{lake.path}/dt=2026-11-21/bucket-0/{f.file_name}" for f in split.files]
        ours: list[float] = []
        floor: list[float] = []
        idle: list[float] = []
        for i in range(REPEAT):
            wh = f"{root}/wh{i}"
            shutil.copytree(base, wh)
            ours.append(run_timed([*LAKE, "--warehouse", wh, "compact", "db.t", "--full"]))
            floor.append(run_timed([sys.executable, "-c", FLOOR, f"{root}/floor.parquet", *inputs]))
            from lsmlake.catalog.filesystem import FileSystemCatalog

            t = FileSystemCatalog(wh).get_table("db.t")
            (after,) = t.plan()
            rows = sum(f.row_count for f in after.files)
            if rows != distinct or {f.level for f in after.files} != {t.options.num_levels() - 1}:
                raise SystemExit(f"compaction wrong: {rows} rows (want {distinct}), levels "
                                 f"{sorted(f.level for f in after.files)}")
            idle.append(run_timed([*LAKE, "--warehouse", wh, "compact", "db.t", "--full"]))
            shutil.rmtree(wh)
        start = statistics.median(idle)
        print(f"runs: lake {[round(s, 2) for s in ours]} s, floor {[round(s, 2) for s in floor]} s; start-up "
              f"(the command with nothing to compact) {[round(s, 2) for s in idle]} s, median {start:.2f} s = "
              f"{start / statistics.median(ours):.0%} of ours")
        value = common.report(f"lake compact --full -> {distinct} rows", statistics.median(ours), total)
        anchor = common.report("copy floor (decode 5 files, encode 1, zstd 1)", statistics.median(floor), total)
        common.result("cli_full_compaction_5x1m_rows", value, "copy floor: pyarrow decode + encode once, "
                      "subprocess", anchor, ">= 0.8")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
