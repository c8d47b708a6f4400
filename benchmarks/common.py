"""Shared data and helpers of the benchmarks: the anchor data set of ../shared/bench/anchor_bench.py."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ROWS = int(os.environ.get("ROWS", "200000"))  # rows per batch
BATCHES = int(os.environ.get("BATCHES", "5"))
KEYS = int(os.environ.get("KEYS", "500000"))

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("dt", pa.string(), nullable=False),
                    pa.field("v", pa.int64()), pa.field("s", pa.string()), pa.field("d", pa.float64())])
LAKE_SCHEMA = "id BIGINT NOT NULL, dt STRING NOT NULL, v BIGINT, s STRING, d DOUBLE"


def batches() -> list[pa.Table]:
    """BATCHES overlapping batches of ROWS rows with keys drawn from KEYS (seeded)."""
    rng = np.random.default_rng(7)
    out = []
    for b in range(BATCHES):
        ids = rng.integers(0, KEYS, ROWS)
        s = pc.binary_join_element_wise("val-", pc.utf8_lpad(pa.array(ids).cast(pa.string()), 12, "0"), "")
        out.append(pa.table({"id": ids, "dt": pa.array(["2026-11-21"] * ROWS), "v": np.full(ROWS, b),
                             "s": s, "d": rng.random(ROWS)}, schema=SCHEMA))
    return out


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    r = fn()
    return time.perf_counter() - t, r


def report(name: str, secs: float, rows: int) -> float:
    rate = rows / secs
    print(f"{name:45s} {secs:7.2f} s  {rate / 1e3:9.1f} k rows/s")
    return rate


def result(bench: str, value: float, anchor: str, anchor_value: float, target: str) -> None:
    """The last line every benchmark prints."""
    print(json.dumps({"bench": bench, "value": round(value, 1), "unit": "rows/s", "anchor": anchor,
                      "anchor_value": round(anchor_value, 1), "ratio": round(value / anchor_value, 2),
                      "target": target}))


def pypaimon_table(root: str) -> Any:
    from pypaimon import CatalogFactory, Schema

    cat = CatalogFactory.create({"warehouse": root})
    cat.create_database("db", True)
    cat.create_table("db.t", Schema.from_pyarrow_schema(SCHEMA, partition_keys=["dt"], primary_keys=["id", "dt"],
                                                         options={"bucket": "1"}), True)
    return cat.get_table("db.t")


def pypaimon_write(tbl: Any, data: list[pa.Table]) -> None:
    for tb in data:
        wb = tbl.new_batch_write_builder()
        w = wb.new_write()
        c = wb.new_commit()
        w.write_arrow(tb)
        c.commit(w.prepare_commit())
        w.close()
        c.close()


def pypaimon_read(tbl: Any) -> pa.Table:
    rb = tbl.new_read_builder()
    return rb.new_read().to_arrow(rb.new_scan().plan().splits())


def lake_table(root: str) -> Any:
    from lsmlake.catalog.filesystem import FileSystemCatalog

    cat = FileSystemCatalog(root)
    cat.create_database("db", True)
    return cat.create_table("db.t", LAKE_SCHEMA, partition_keys=["dt"], primary_keys=["id", "dt"],
                            options={"bucket": "1"})


def lake_write(tbl: Any, data: list[pa.Table]) -> None:
    for tb in data:
        tbl.write_arrow(tb)


def level0_files(data: list[pa.Table], root: str) -> list[str]:
    """The batches as sorted Parquet files with a `_SEQ` column: the input of the pyarrow-limit merge."""
    import pyarrow.parquet as pq

    paths = []
    for b, tb in enumerate(data):
        tb = tb.append_column("_SEQ", pa.array(np.arange(b * ROWS, (b + 1) * ROWS), pa.int64()))
        p = f"{root}/l0-{b}.parquet"
        pq.write_table(tb.sort_by([("id", "ascending")]), p, compression="zstd", compression_level=1)
        paths.append(p)
    return paths


def start_service(module: str, args: list[str], log: Path, timeout_s: float = 120.0) -> tuple[Any, int]:
    """Start a service (`python -m module --port P args`) logging to `log`; (the process, its port) once its
    gRPC health check answers SERVING."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from lsmlake.kafka.broker import free_port

    port = free_port()
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", module, "--port", str(port), *args], stdout=subprocess.DEVNULL,
                                stderr=f, env={**os.environ, "LSMLAKE_LOG_LEVEL": "WARNING"})
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{module} exited: {log.read_text()[-2000:]}")
            try:
                if stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == 1:
                    return proc, port
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{module} did not start")
            time.sleep(0.1)


def stop_services(procs: list[Any]) -> None:
    """SIGTERM each, last started first, and wait for its graceful stop (killed after a minute)."""
    for p in reversed(procs):
        p.terminate()
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()


def ipc_bytes(data: pa.Table) -> bytes:
    """The table as one Arrow IPC stream: the body of a writer-service request."""
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, data.schema) as w:
        w.write_table(data)
    return sink.getvalue()


def start_cluster(wh: str, bootstrap: str, root: Path, procs: list[Any],
                  commit_interval: str = "0.05") -> tuple[int, int]:
    """Catalog (announcing on Kafka), compactor (Spark local[2]) and writer on `wh`, appended to `procs` as they
    start (so that the caller stops what started, whatever fails); (catalog port, writer port)."""
    p, cport = start_service("catalog_svc", ["--warehouse", wh, "--kafka", bootstrap], root / "catalog.log")
    procs.append(p)
    p, _ = start_service("compactor_svc", ["--warehouse", wh, "--catalog", f"127.0.0.1:{cport}", "--kafka", bootstrap,
                                           "--spark-master", "local[2]"], root / "compactor.log")
    procs.append(p)
    p, wport = start_service("writer_svc", ["--warehouse", wh, "--catalog", f"127.0.0.1:{cport}",
                                            "--commit-interval", commit_interval], root / "writer.log")
    procs.append(p)
    return cport, wport
