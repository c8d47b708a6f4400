"""pypaimon commits through lsmlake's REST catalog, against pypaimon committing straight into a folder.

The same pypaimon 2.1.0 job (COMMITS commits of ROWS rows into a primary-key table with 2 buckets) runs
twice: with `metastore=rest` pointed at a `catalog-svc --rest-port` process on loopback (every commit is
checked, published and recorded with its events by the catalog: the files exist, the base is the latest
snapshot, adds are new), and with pypaimon's own filesystem catalog (the anchor: no catalog, no checks,
no events). The figure is commits per second; the ratio is what going through lsmlake costs a job.
Target: at least half the anchor's rate.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow as pa

COMMITS = int(os.environ.get("REST_COMMITS", "40"))
ROWS = 1_000
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def _catalog_process(warehouse: Path) -> tuple[subprocess.Popen[bytes], int]:
    from lsmlake.kafka.broker import free_port

    port = free_port()
    with open(warehouse.parent / "catalog.log", "w") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen([sys.executable, "-m", "catalog_svc", "--warehouse", str(warehouse), "--port", "0",
                                 "--rest-port", str(port)], stdout=subprocess.DEVNULL, stderr=log,
                                env={**os.environ, "LSMLAKE_LOG_LEVEL": "WARNING"})
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"catalog_svc exited: {(warehouse.parent / 'catalog.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/config?warehouse=x", timeout=1) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("catalog_svc did not answer on its REST port within 60 s")
        time.sleep(0.2)  # polling interval, bounded by the deadline


def _job(options: dict[str, str]) -> float:
    """Seconds for COMMITS pypaimon commits of ROWS rows each (table creation not counted)."""
    from pypaimon import CatalogFactory, Schema

    cat = CatalogFactory.create(options)
    cat.create_database("db", True)
    cat.create_table("db.t", Schema.from_pyarrow_schema(SCHEMA, primary_keys=["id"], options={"bucket": "2"}), True)
    table: Any = cat.get_table("db.t")
    started = time.perf_counter()
    for c in range(COMMITS):
        builder = table.new_batch_write_builder()
        w, commit = builder.new_write(), builder.new_commit()
        w.write_arrow(pa.table({"id": pa.array(range(c * ROWS // 2, c * ROWS // 2 + ROWS), pa.int64()),
                                "v": [f"c{c}"] * ROWS}, schema=SCHEMA))
        commit.commit(w.prepare_commit())
        w.close()
        commit.close()
    return time.perf_counter() - started


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-rest-"))
    proc = None
    try:
        proc, port = _catalog_process(root / "lake")
        rest = _job({"metastore": "rest", "uri": f"http://127.0.0.1:{port}", "warehouse": "lake",
                     "token.provider": "bear", "token": "no-token-is-checked-here"})
        folder = _job({"warehouse": str(root / "pypaimon")})
        ours, anchor = COMMITS / rest, COMMITS / folder
        print(f"{'pypaimon through lsmlake REST catalog':45s} {rest:7.2f} s  {ours:7.1f} commits/s")
        print(f"{'pypaimon filesystem catalog':45s} {folder:7.2f} s  {anchor:7.1f} commits/s")
        print(json.dumps({"bench": f"rest_commit_{COMMITS}_commits_{ROWS}_rows", "value": round(ours, 1),
                          "unit": "commits/s", "anchor": "pypaimon 2.1.0 filesystem catalog",
                          "anchor_value": round(anchor, 1), "ratio": round(ours / anchor, 2), "target": ">= 0.5x"}))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
