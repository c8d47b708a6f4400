"""What publishing Iceberg metadata with every commit costs, and how fresh DuckDB's view of a table is.

Real processes on loopback: the embedded Kafka broker, catalog_svc, writer_svc and compactor_svc (Spark
local[2]). Two primary-key tables of the same shape (4 buckets, deletion vectors), one with
`metadata.iceberg.storage=table-location`. COMMITS writes of 1,000 rows go to each, in pairs (one to each
table, then the next pair), each committed by the writer before it replies; the clock runs from the request to
the writer's reply (the commit, the Iceberg publication included). The figure is the p50 with the option, the
anchor the p50 without it, measured in the same run on the same cluster. Target: at most 1.3x.

Freshness, measured on the same commits of the Iceberg table: from the writer's reply until DuckDB's
`iceberg_scan` of the table's current Iceberg metadata returns that commit's rows (an Iceberg reader sees a
deletion-vector table's rows once the compactor moved them above level 0; the catalog publishes the metadata of
that COMPACT snapshot as it commits it).
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

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

COMMITS = int(os.environ.get("ICEBERG_COMMITS", "60"))
ROWS = 1_000
WARMUP = 3


def main() -> None:
    import duckdb
    import grpc

    from lsmlake.catalog.filesystem import FileSystemCatalog
    from lsmlake.iceberg import current_metadata_location
    from lsmlake.iceberg.duckdb_reader import duckdb_iceberg_connection
    from lsmlake.kafka.broker import EmbeddedBroker
    from lsmlake.proto_gen.lsmlake.v1 import common_pb2, writer_pb2, writer_pb2_grpc

    root = Path(tempfile.mkdtemp(prefix="bench-iceberg-"))
    wh = str(root / "wh")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with EmbeddedBroker() as broker:
            cat = FileSystemCatalog(wh)
            cat.create_database("db", True)
            options = {"bucket": "4", "deletion-vectors.enabled": "true"}
            plain = cat.create_table("db.plain", "id BIGINT NOT NULL, v STRING", primary_keys=["id"], options=options)
            ice = cat.create_table("db.ice", "id BIGINT NOT NULL, v STRING", primary_keys=["id"],
                                   options={**options, "metadata.iceberg.storage": "table-location"})
            del plain
            _, wport = common.start_cluster(wh, broker.bootstrap, root, procs)
            channel = grpc.insecure_channel(f"127.0.0.1:{wport}")
            stub = writer_pb2_grpc.WriterServiceStub(channel)
            con = duckdb_iceberg_connection()
            took: dict[str, list[float]] = {"plain": [], "ice": []}
            fresh: list[float] = []
            for i in range(COMMITS + WARMUP):
                ids = pa.array(range(i * ROWS, (i + 1) * ROWS), pa.int64())
                body = common.ipc_bytes(pa.table({"id": ids, "v": [f"c{i}"] * ROWS}))
                for name in ("plain", "ice") if i % 2 == 0 else ("ice", "plain"):  # neither always goes first
                    ident = common_pb2.TableIdentifier(database="db", table=name)
                    t0 = time.perf_counter()
                    stub.Write(iter([writer_pb2.WriteRequest(header=writer_pb2.WriteHeader(table=ident)),
                                     writer_pb2.WriteRequest(arrow_ipc_chunk=body)]), timeout=120)
                    if i >= WARMUP:
                        took[name].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                deadline = time.monotonic() + 120
                while True:
                    location = current_metadata_location(ice)
                    if location is not None:
                        try:
                            seen = con.sql(f"SELECT count(*) FROM iceberg_scan('{location}') "
                                           f"WHERE id >= {i * ROWS} AND id < {(i + 1) * ROWS}").fetchone()[0]
                        except duckdb.IOException:  # a newer publication replaced it meanwhile: look again
                            seen = -1
                        if seen == ROWS:
                            break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"commit {i}'s rows never became readable through Iceberg")
                    time.sleep(0.02)
                if i >= WARMUP:
                    fresh.append(time.perf_counter() - t0)
            channel.close()
            p50 = {k: statistics.median(v) for k, v in took.items()}
            p99 = {k: statistics.quantiles(v, n=100)[98] for k, v in took.items()}
            fmed = statistics.median(fresh)
            print(f"commit (writer reply) p50 with Iceberg metadata {p50['ice'] * 1000:.1f} ms, without "
                  f"{p50['plain'] * 1000:.1f} ms; p99 {p99['ice'] * 1000:.1f} / {p99['plain'] * 1000:.1f} ms "
                  f"over {COMMITS} commits each")
            print(f"freshness (reply -> rows read by DuckDB through Iceberg): median {fmed:.2f} s, "
                  f"max {max(fresh):.2f} s")
            print(json.dumps({"bench": "iceberg_commit_p50", "value": round(p50["ice"] * 1000, 2), "unit": "ms",
                              "anchor": "the same commits without metadata.iceberg.storage (p50)",
                              "anchor_value": round(p50["plain"] * 1000, 2),
                              "ratio": round(p50["ice"] / p50["plain"], 2), "target": "<= 1.3x",
                              "freshness_duckdb_median_s": round(fmed, 3)}))
    finally:
        common.stop_services(procs)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
