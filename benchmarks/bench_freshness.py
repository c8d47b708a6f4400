"""Freshness: the time from a writer's commit to the COMPACT snapshot that compacted that commit's files.

Real processes on loopback: the embedded Kafka broker, catalog_svc, writer_svc and compactor_svc with a warm
Spark session (local[2]). The table has deletion vectors, so its level-0 files are invisible to readers
until compacted (force-up-level-0): freshness is how long written rows stay invisible. 100 commits of
1,000 rows, one at a time; for each, the clock runs from the writer's reply (the rows are committed) until
a snapshot no longer holds any of that commit's files on level 0.

Anchor: the same path without Spark, i.e. the catalog's event reaching a consumer (the delivery part of
the latency), measured on the same commits. Target: median under 3 s on this machine (2 cores, shared).
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

COMMITS = int(os.environ.get("FRESHNESS_COMMITS", "100"))
ROWS = 1_000


def _level0_names(table: object) -> set[str]:
    names = set()
    for s in table.new_scan(None, None, all_levels=True).plan():  # type: ignore[attr-defined]
        names.update(f.file_name for f in s.files if f.level == 0)
    return names


def main() -> None:
    import grpc

    from lsmlake.catalog.filesystem import FileSystemCatalog
    from lsmlake.kafka.broker import EmbeddedBroker
    from lsmlake.kafka.client import consumer
    from lsmlake.proto_gen.lsmlake.v1 import common_pb2, events_pb2, writer_pb2, writer_pb2_grpc

    root = Path(tempfile.mkdtemp(prefix="bench-freshness-"))
    wh = str(root / "wh")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with EmbeddedBroker() as broker:
            cat = FileSystemCatalog(wh)
            cat.create_database("db", True)
            table = cat.create_table("db.t", "id BIGINT NOT NULL, v STRING", primary_keys=["id"],
                                     options={"bucket": "4", "deletion-vectors.enabled": "true",
                                              "write-only": "true"})
            _, wport = common.start_cluster(wh, broker.bootstrap, root, procs)
            events = consumer(broker.bootstrap, "bench-freshness", ["data-files"])
            channel = grpc.insecure_channel(f"127.0.0.1:{wport}")
            stub = writer_pb2_grpc.WriterServiceStub(channel)
            ident = common_pb2.TableIdentifier(database="db", table="t")
            fresh, delivery = [], []
            for i in range(COMMITS + 3):  # the first commits warm the path (group joins, Spark workers)
                ids = pa.array(range(i * ROWS, (i + 1) * ROWS), pa.int64())
                body = common.ipc_bytes(pa.table({"id": ids, "v": [f"c{i}"] * ROWS}))
                reply = stub.Write(iter([writer_pb2.WriteRequest(header=writer_pb2.WriteHeader(table=ident)),
                                         writer_pb2.WriteRequest(arrow_ipc_chunk=body)]), timeout=120)
                t0 = time.perf_counter()
                snap = table.snapshots.snapshot(reply.snapshot_id)
                mine = {e.file.file_name for m in table.manifests.read_list(snap.delta_manifest_list)
                        for e in table.manifests.read_manifest(m.file_name)}
                seen_event = None
                deadline = time.monotonic() + 120
                while True:
                    if seen_event is None:
                        for recs in events.poll(timeout_ms=20).values():
                            for r in recs:
                                if events_pb2.Envelope.FromString(r.value).data_files.snapshot_id == reply.snapshot_id:
                                    seen_event = time.perf_counter() - t0
                    if not (mine & _level0_names(table)):
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"commit {reply.snapshot_id} was never compacted")
                    time.sleep(0.02)
                took = time.perf_counter() - t0
                if i >= 3:
                    fresh.append(took)
                    if seen_event is not None:
                        delivery.append(seen_event)
            channel.close()
            events.close()
            med, p95 = statistics.median(fresh), statistics.quantiles(fresh, n=20)[18]
            dmed = statistics.median(delivery) if delivery else float("nan")
            print(f"freshness over {len(fresh)} commits: median {med:.2f} s, p95 {p95:.2f} s, max {max(fresh):.2f} s")
            print(f"event delivery to a consumer (part of it): median {dmed:.3f} s")
            print(json.dumps({"bench": "freshness_commit_to_compacted", "value": round(med, 3), "unit": "s",
                              "anchor": "catalog event delivery to a consumer (median)", "anchor_value": round(dmed, 3),
                              "ratio": round(med / dmed, 2) if delivery else None,
                              "target": "median < 3 s", "p95": round(p95, 3)}))
    finally:
        common.stop_services(procs)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
