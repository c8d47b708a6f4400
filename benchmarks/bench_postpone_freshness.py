"""Freshness of a postpone-bucket table: from a writer's commit until a reader sees the rows, beside the same
figure for a fixed-bucket table, in one run.

Real processes on loopback: the embedded Kafka broker, catalog_svc, writer_svc and compactor_svc with a warm
Spark session (local[2]). Two deletion-vector primary-key tables that differ only in their bucket mode:
`bucket = 4`, and `bucket = -2` with `postpone.default-bucket-num = 4`. FRESHNESS_COMMITS commits of 1,000
new keys each, one at a time; for each, the clock runs from the writer's reply (the rows are committed)
until lsmlake's reader finds the commit's first key. A fixed-bucket table's rows wait for one compaction
(level 0 up); a postpone table's for two (placement into buckets, then level 0 up).

Value: the postpone table's median; anchor: the fixed-bucket table's median. Target: median under 5 s.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

COMMITS = int(os.environ.get("FRESHNESS_COMMITS", "50"))
ROWS = 1_000
WARMUP = 3  # the first commits warm the path (group joins, Spark workers)


def _visible(warehouse: str, name: str, key: int) -> bool:
    from lsmlake.catalog.filesystem import FileSystemCatalog

    table = FileSystemCatalog(warehouse).get_table(f"db.{name}")
    pred = {"id": key}
    return table.new_read(["id"], pred).read(table.new_scan(pred).plan()).num_rows > 0


def _measure(stub: Any, warehouse: str, name: str) -> list[float]:
    from lsmlake.proto_gen.lsmlake.v1 import common_pb2, writer_pb2

    ident = common_pb2.TableIdentifier(database="db", table=name)
    out = []
    for i in range(COMMITS + WARMUP):
        data = pa.table({"id": pa.array(range(i * ROWS, (i + 1) * ROWS), pa.int64()), "v": [f"c{i}"] * ROWS})
        stub.Write(iter([writer_pb2.WriteRequest(header=writer_pb2.WriteHeader(table=ident)),
                         writer_pb2.WriteRequest(arrow_ipc_chunk=common.ipc_bytes(data))]), timeout=120)
        t0 = time.perf_counter()
        deadline = time.monotonic() + 120
        while not _visible(warehouse, name, i * ROWS):
            if time.monotonic() > deadline:
                raise RuntimeError(f"commit {i} of db.{name} never became visible")
            time.sleep(0.02)
        if i >= WARMUP:
            out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    import grpc

    from lsmlake.catalog.filesystem import FileSystemCatalog
    from lsmlake.kafka.broker import EmbeddedBroker
    from lsmlake.proto_gen.lsmlake.v1 import writer_pb2_grpc

    root = Path(tempfile.mkdtemp(prefix="bench-postpone-"))
    wh = str(root / "wh")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with EmbeddedBroker() as broker:
            cat = FileSystemCatalog(wh)
            cat.create_database("db", True)
            for name, bucket in (("fixed", {"bucket": "4"}),
                                 ("postpone", {"bucket": "-2", "postpone.default-bucket-num": "4"})):
                cat.create_table(f"db.{name}", "id BIGINT NOT NULL, v STRING", primary_keys=["id"],
                                 options={**bucket, "deletion-vectors.enabled": "true"})
            _, wport = common.start_cluster(wh, broker.bootstrap, root, procs)
            with grpc.insecure_channel(f"127.0.0.1:{wport}") as channel:
                stub = writer_pb2_grpc.WriterServiceStub(channel)
                fixed = _measure(stub, wh, "fixed")
                postpone = _measure(stub, wh, "postpone")
        figures = {}
        for name, times in (("fixed-bucket", fixed), ("postpone-bucket", postpone)):
            med, p95 = statistics.median(times), statistics.quantiles(times, n=20)[18]
            figures[name] = (med, p95)
            print(f"{name + ' table':22s} commit -> visible over {len(times)} commits: median {med:.2f} s, "
                  f"p95 {p95:.2f} s, max {max(times):.2f} s")
        (med, p95), (amed, ap95) = figures["postpone-bucket"], figures["fixed-bucket"]
        print(json.dumps({"bench": "postpone_freshness_commit_to_visible", "value": round(med, 3), "unit": "s",
                          "anchor": "fixed-bucket table, same cluster (median)", "anchor_value": round(amed, 3),
                          "ratio": round(med / amed, 2), "target": "median < 5 s", "p95": round(p95, 3),
                          "anchor_p95": round(ap95, 3)}))
    finally:
        common.stop_services(procs)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
