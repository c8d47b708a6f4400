"""Rows/s over gRPC into committed snapshots: one writer_svc process (and its catalog_svc), 1,000,000 rows
sent as 100 Arrow requests of 10,000 rows by 8 client threads; a reply counts only once its rows are in a
committed snapshot.

Anchors, measured in the same run on the same 100 batches, each batch written and committed on its own
(as each gRPC request is acknowledged on its own):
- pypaimon 2.1.0 write+commit in process (the JSON line's anchor); target: at least 5x;
- lsmlake's table store core in process (`FileStoreTable.write_arrow`); target: within 2x (ratio >= 0.5).
No compactor runs, so the table raises `num-sorted-run.stop-trigger` (the stall is not what is measured).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

REQUEST_ROWS = 10_000
THREADS = 8
OPTIONS = {"bucket": "1", "num-sorted-run.stop-trigger": "100000"}


def requests_data() -> list[pa.Table]:
    out = []
    for b in common.batches():
        out += [b.slice(i, REQUEST_ROWS) for i in range(0, b.num_rows, REQUEST_ROWS)]
    return out


def grpc_write(root: str, data: list[pa.Table]) -> float:
    """Seconds from the first request to the last committed reply."""
    import grpc

    from lsmlake.catalog.filesystem import FileSystemCatalog
    from lsmlake.proto_gen.lsmlake.v1 import common_pb2, writer_pb2, writer_pb2_grpc

    wh = f"{root}/grpc"
    cat = FileSystemCatalog(wh)
    cat.create_database("db", True)
    cat.create_table("db.t", common.LAKE_SCHEMA, partition_keys=["dt"], primary_keys=["id", "dt"], options=OPTIONS)
    catalog, cport = common.start_service("catalog_svc", ["--warehouse", wh], Path(root) / "catalog.log")
    writer, wport = common.start_service("writer_svc", ["--warehouse", wh, "--catalog", f"127.0.0.1:{cport}",
                                                  "--commit-interval", "0.2"], Path(root) / "writer.log")
    bodies = [common.ipc_bytes(tb) for tb in data]
    ident = common_pb2.TableIdentifier(database="db", table="t")
    errors: list[BaseException] = []
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{wport}", options=[("grpc.max_send_message_length", 64 << 20)])
        stub = writer_pb2_grpc.WriterServiceStub(channel)

        def client(k: int) -> None:
            try:
                for body in bodies[k::THREADS]:
                    stub.Write(iter([writer_pb2.WriteRequest(header=writer_pb2.WriteHeader(table=ident)),
                                     writer_pb2.WriteRequest(arrow_ipc_chunk=body)]), timeout=300)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(THREADS)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        secs = time.perf_counter() - t
        channel.close()
        if errors:
            raise errors[0]
        snaps = len(cat.get_table("db.t").snapshots.ids())
        print(f"  ({len(bodies)} requests became {snaps} snapshots)")
        return secs
    finally:
        for p in (writer, catalog):
            p.terminate()
            p.wait(60)


def lake_per_batch(root: str, data: list[pa.Table]) -> None:
    from lsmlake.catalog.filesystem import FileSystemCatalog

    cat = FileSystemCatalog(root)
    cat.create_database("db", True)
    t = cat.create_table("db.t", common.LAKE_SCHEMA, partition_keys=["dt"], primary_keys=["id", "dt"],
                         options={**OPTIONS, "write-only": "true"})
    for tb in data:
        t.write_arrow(tb)


def main() -> None:
    data = requests_data()
    total = sum(t.num_rows for t in data)
    root = tempfile.mkdtemp(prefix="bench-writer-")
    try:
        secs = grpc_write(root, data)
        ours = common.report(f"writer_svc over gRPC ({THREADS} clients)", secs, total)
        secs, _ = common.timed(lambda: lake_per_batch(f"{root}/core", data))
        core = common.report("lsmlake core in process, commit per batch", secs, total)
        pp = common.pypaimon_table(f"{root}/pypaimon")
        secs, _ = common.timed(lambda: common.pypaimon_write(pp, data))
        anchor = common.report("pypaimon 2.1.0 write+commit per batch", secs, total)
        print(f"ratio to the core in process: {ours / core:.2f} (target >= 0.5)")
        common.result("writer_grpc_1m_rows_10k_batches", ours, "pypaimon 2.1.0 write+commit per batch", anchor,
                      ">= 5x pypaimon, >= 0.5x core in process")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
