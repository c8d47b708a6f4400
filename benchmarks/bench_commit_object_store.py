"""Commit latency on an object store: one-row appends to a table on a local S3 server, against a local disk.

The S3 server is moto in server mode (a separate process on loopback, started here), so the figure is what
lsmlake's commit protocol costs in requests over HTTP (snapshot published with one conditional create, plus the
manifests, the data file and the LATEST hint), not what AWS answers in. The same COMMITS one-row appends run on a
warehouse folder in the same run (the anchor). The figure is the p50 commit latency on S3; p99 of both printed.
Target: S3 p50 at most 20x the local disk's.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow as pa

from lsmlake.catalog.filesystem import FileSystemCatalog

COMMITS = int(os.environ.get("OBJECT_STORE_COMMITS", "100"))
KEYS, BUCKET = ("bench", "bench-secret"), "lake"


def _moto(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A moto S3 server on a free loopback port with the bucket `lake`; (the process, its endpoint)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    with open(log, "wb") as f:  # the child keeps its own descriptor
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=f, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"moto server exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("moto server did not answer within 60 s")
        time.sleep(0.1)  # polling interval, bounded by the deadline
    import pyarrow.fs as pafs

    pafs.S3FileSystem(access_key=KEYS[0], secret_key=KEYS[1], region="us-east-1", endpoint_override=endpoint,
                      allow_bucket_creation=True).create_dir(BUCKET)
    return proc, endpoint


def _latencies_ms(warehouse: str) -> np.ndarray:
    """Milliseconds of each of COMMITS one-row appends (table creation and the first commit not counted)."""
    cat = FileSystemCatalog(warehouse)
    cat.create_database("db", ignore_if_exists=True)
    t = cat.create_table("db.t", "k BIGINT NOT NULL, v STRING")
    t.write_arrow(pa.table({"k": [-1], "v": ["warm-up"]}))
    out = []
    for i in range(COMMITS):
        row = pa.table({"k": [i], "v": [f"row-{i}"]})
        started = time.perf_counter()
        t.write_arrow(row)
        out.append((time.perf_counter() - started) * 1000)
    assert cat.get_table("db.t").to_arrow().num_rows == COMMITS + 1
    return np.array(out)


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-object-store-"))
    proc = None
    try:
        proc, endpoint = _moto(root / "moto.log")
        s3 = _latencies_ms(f"s3://{KEYS[0]}:{KEYS[1]}@{BUCKET}/wh?endpoint_override={endpoint}&region=us-east-1")
        local = _latencies_ms(str(root / "lake"))
        for name, ms in (("commit on S3 (moto, loopback)", s3), ("commit on a local disk", local)):
            print(f"{name:45s} p50 {np.percentile(ms, 50):7.1f} ms  p99 {np.percentile(ms, 99):7.1f} ms")
        value, anchor = float(np.percentile(s3, 50)), float(np.percentile(local, 50))
        print(json.dumps({"bench": f"commit_object_store_{COMMITS}_one_row_appends", "value": round(value, 1),
                          "unit": "ms p50", "anchor": "the same commits on a local disk, p50",
                          "anchor_value": round(anchor, 1), "ratio": round(value / anchor, 2),
                          "target": "<= 20x"}))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
