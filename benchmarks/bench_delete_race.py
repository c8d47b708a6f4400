"""Deletes racing a full compaction: how many succeed at once, how many after a redo, how many come back.

The table of issue 30's reproduction: an append table (bucket -1, deletion vectors) of 25 commits of 4,000 rows;
one thread compacts it fully, over and over, while another deletes six groups by predicate. Each delete that lost
to a compaction is redone on the compacted files (`delete_where`); afterwards no deleted row may be readable.
The anchor is the number of deletes issued: every one must succeed and stay deleted (ratio 1.0).
`ROUNDS` (default 10) tables are raced.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading

import pyarrow as pa

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import CommitConflictError
from lsmlake.table.compact import compact_table

ROUNDS = int(os.environ.get("ROUNDS", "10"))
COMMITS, ROWS, GROUPS = 25, 4000, 6


class _Redos(logging.Handler):
    """Counts the deletes' redo messages (`delete_where` logs one per conflict it redoes)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "redone on the latest snapshot" in record.getMessage():
            self.count += 1


def race(root: str, redos: _Redos) -> dict[str, int]:
    cat = FileSystemCatalog(root)
    cat.create_database("db")
    t = cat.create_table("db.t", "id BIGINT NOT NULL, g INT NOT NULL",
                         options={"bucket": "-1", "deletion-vectors.enabled": "true"})
    for c in range(COMMITS):
        ids = pa.array(range(c * ROWS, (c + 1) * ROWS), pa.int64())
        t.write_arrow(pa.table({"id": ids, "g": pa.compute.cast(pa.compute.bit_wise_and(ids, 7), pa.int32())}))
    done = threading.Event()
    compactions = [0, 0]  # committed, lost

    def compact() -> None:
        while not done.is_set():
            try:
                if compact_table(cat.get_table("db.t"), full=True).snapshot_id is not None:
                    compactions[0] += 1
            except CommitConflictError:
                compactions[1] += 1

    th = threading.Thread(target=compact)
    th.start()
    first, redone, failed = 0, 0, 0
    try:
        for g in range(GROUPS):
            before = redos.count
            try:
                cat.get_table("db.t").delete_where({"g": g})
            except CommitConflictError:
                failed += 1
                continue
            if redos.count == before:
                first += 1
            else:
                redone += 1
    finally:
        done.set()
        th.join()
    left = cat.get_table("db.t").to_arrow(projection=["g"]).column("g").to_pylist()
    back = sum(1 for g in left if g < GROUPS)
    return {"first_try": first, "after_redo": redone, "failed": failed, "rows_back": back,
            "compactions": compactions[0], "compactions_lost": compactions[1]}


def main() -> None:
    redos = _Redos()
    logging.getLogger("lsmlake.table.file_store").addHandler(redos)
    logging.getLogger("lsmlake.table.file_store").setLevel(logging.INFO)
    totals: dict[str, int] = {}
    root = tempfile.mkdtemp(prefix="bench-delete-race-")
    try:
        for r in range(ROUNDS):
            for k, v in race(f"{root}/r{r}", redos).items():
                totals[k] = totals.get(k, 0) + v
    finally:
        shutil.rmtree(root, ignore_errors=True)
    issued = ROUNDS * GROUPS
    ok = totals["first_try"] + totals["after_redo"]
    print(f"deletes issued {issued}: {totals['first_try']} succeeded at once, {totals['after_redo']} after a redo, "
          f"{totals['failed']} failed; deleted rows readable again: {totals['rows_back']}; full compactions "
          f"committed {totals['compactions']}, lost to a delete {totals['compactions_lost']}")
    ratio = ok / issued if totals["rows_back"] == 0 else 0.0
    print(json.dumps({"bench": "deletes_racing_full_compaction", "value": ok, "unit": "deletes applied and kept",
                      "anchor": "deletes issued", "anchor_value": issued, "ratio": round(ratio, 3),
                      "target": "1.0"}))


if __name__ == "__main__":
    main()
