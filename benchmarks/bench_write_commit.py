"""Write + commit of 1,000,000 rows in 5 overlapping batches into a 1-bucket primary-key table,
beside pypaimon 2.1.0 on the same data in the same run. Target: at least 10x pypaimon's rows/s."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402


def main() -> None:
    data = common.batches()
    total = common.ROWS * common.BATCHES
    root = tempfile.mkdtemp(prefix="bench-write-")
    try:
        lake = common.lake_table(f"{root}/lake")
        secs, _ = common.timed(lambda: common.lake_write(lake, data))
        ours = common.report("lsmlake: write+commit", secs, total)
        pp = common.pypaimon_table(f"{root}/pypaimon")
        secs, _ = common.timed(lambda: common.pypaimon_write(pp, data))
        anchor = common.report("pypaimon 2.1.0: write+commit", secs, total)
        common.result("write_commit_1m_rows_5_batches", ours, "pypaimon 2.1.0 write+commit", anchor, ">= 10x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
