"""Long commands show progress with the rate and the time left on a terminal (stderr, only when it is one) and
always end with a summary line (rows, bytes, files, seconds); `lake compact --timeout` bounds the wait for a
compactor service; a postpone-bucket table's rows waiting for placement are counted and the way to place them
named."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lsmlake.cli.progress import Progress, Waiting, with_progress
from lsmlake.proto_gen.lsmlake.v1 import compactor_pb2, compactor_pb2_grpc
from tests.lsmlake.cli.conftest import Lake, untimed
from tests.support.local_server import local_server

LAKE = Path(sys.executable).parent / "lake"


def test_the_progress_line_has_a_rate_and_the_time_left(capsys: pytest.CaptureFixture[str]) -> None:
    p = Progress("writing db.t", 200)
    assert not p.enabled  # stderr is not a terminal under pytest
    p.enabled = True
    for t in with_progress([pa.table({"x": list(range(100))})] * 2, p):
        assert t.num_rows == 100
    err = capsys.readouterr().err
    drawn = [line.strip() for line in err.split("\r") if line.strip()]
    assert drawn[0].startswith("writing db.t [###############               ] 100/200 rows, ")
    assert drawn[0].split(", ")[-1].startswith("ETA ") and drawn[0].split(", ")[1].endswith("/s")
    assert err.endswith("\r")  # erased at the end
    p = Progress("scanning db.t", None)
    assert p.line(p.started + 2).startswith("scanning db.t 0 rows, 0/s, 2.0 s")
    w = Waiting("compacting db.t through the compactor service", 90)
    assert w.line(w.started + 75) == "compacting db.t through the compactor service: 1m15s (gives up after 1m30s)"


def run_on_a_terminal(*args: str, cwd: Path) -> tuple[int, str, str]:
    """`lake ARGS` with stderr on a pseudo-terminal (stdout a pipe): what a person at a terminal sees."""
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "LAKE_NO_PROGRESS"}
    proc = subprocess.Popen([str(LAKE), *args], stdout=subprocess.PIPE, stderr=slave, cwd=cwd, env=env, text=True)
    os.close(slave)
    err = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the terminal closed: the process is done with it
            break
        if not chunk:
            break
        err += chunk
    out, _ = proc.communicate(timeout=120)
    os.close(master)
    return proc.returncode, out, err.decode()


def test_write_compact_and_scan_show_progress_on_a_terminal_and_always_a_summary(tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    data = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": pa.array(range(5000), pa.int64()), "v": ["x"] * 5000}), data)
    code, out, err = run_on_a_terminal("--warehouse", wh, "table", "create", "db.t", "--schema",
                                       "id BIGINT NOT NULL, v STRING", "--primary-key", "id", "--option", "bucket=1",
                                       cwd=tmp_path)
    assert code == 0, err
    for _ in range(2):
        code, out, err = run_on_a_terminal("--warehouse", wh, "write", "db.t", str(data), cwd=tmp_path)
        assert code == 0, err
        assert "writing db.t [" in err and "5,000/5,000 rows" in err and "ETA " in err and f"reading {data}" in err
        assert untimed(out).startswith("wrote 5,000 rows from 1 file to db.t in snapshot ")
        assert untimed(out).endswith(": 1 data file, SIZE, TIME\n")
    code, out, err = run_on_a_terminal("--warehouse", wh, "compact", "db.t", "--full", cwd=tmp_path)
    assert code == 0 and "compacting db.t: " in err
    assert untimed(out) == ("compacted db.t in snapshot 3: 2 files -> 1 file in 1 bucket; wrote 5,000 rows, SIZE, "
                            "1 file, TIME\n")
    target = tmp_path / "out.csv"
    code, out, err = run_on_a_terminal("--warehouse", wh, "scan", "db.t", "--format", "csv", "--output",
                                       str(target), cwd=tmp_path)
    assert code == 0 and "scanning db.t [" in err and "5,000/5,000 rows" in err
    assert untimed(out) == f"wrote 5,000 rows, SIZE, 1 file, TIME to {target} from db.t snapshot 3\n"
    assert len(target.read_text().splitlines()) == 5001
    # not on a terminal: the same summaries, nothing on stderr
    r = subprocess.run([str(LAKE), "--warehouse", wh, "compact", "db.t"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stderr == "" and untimed(r.stdout) == "nothing to compact in db.t (TIME)\n"


class _Compactor(compactor_pb2_grpc.CompactorServiceServicer):
    """A compactor that records the deadline of each trigger and answers that it ran out of time."""

    def __init__(self) -> None:
        self.deadlines: list[float] = []

    def TriggerCompaction(self, request: Any, context: grpc.ServicerContext) -> Any:
        remaining = context.time_remaining()
        self.deadlines.append(remaining)
        return compactor_pb2.TriggerCompactionResponse(
            buckets_queued=1, request_snapshot_id=1, timed_out=True, wait_limit_ms=int((remaining - 0.5) * 1000),
            not_compacted=[compactor_pb2.BucketNotCompacted(bucket=0, reason="timed out")])


@pytest.fixture
def compactor() -> Iterator[tuple[_Compactor, int]]:
    servicer = _Compactor()  # type: ignore[abstract]  # the calls this test makes only
    server = grpc.server(futures.ThreadPoolExecutor(2))
    compactor_pb2_grpc.add_CompactorServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, port
    finally:
        server.stop(None)


def test_compact_through_a_cluster_waits_as_long_as_timeout_says(lake: Lake, compactor: tuple[_Compactor, int]
                                                                ) -> None:
    servicer, port = compactor
    lake.ok("table", "create", "db.t", "--schema", "id BIGINT NOT NULL", "--primary-key", "id", "--option", "bucket=1")
    with local_server(str(lake.warehouse)) as cat:
        flags = ["--catalog-service", f"127.0.0.1:{cat.server.port}", "--compactor-service", f"127.0.0.1:{port}"]
        out = lake.ok(*flags, "compact", "db.t", "--timeout", "7.5")
        lake.ok(*flags, "compact", "db.t")
    # the deadline the compactor sees: --timeout, else the default of 60 s (gRPC may round it up a little)
    assert 0 < servicer.deadlines[0] <= 7.5 + 0.5 and 30 < servicer.deadlines[1] <= 60 + 0.5
    assert "the compactor stopped waiting after " in out and "(a longer --timeout waits for them)" in out
    assert "--timeout" in lake.fails("compact", "db.t", "--timeout", "0", code=2)


def test_rows_waiting_for_placement_are_counted_and_how_to_place_them_said(lake: Lake, tmp_path: Path) -> None:
    lake.ok("table", "create", "db.p", "--schema", "id BIGINT NOT NULL, v STRING", "--primary-key", "id",
            "--option", "bucket=-2")
    data = tmp_path / "p.csv"
    data.write_text("id,v\n" + "".join(f"{i},v\n" for i in range(120)))
    out = lake.ok("write", "db.p", str(data)).splitlines()
    assert out[1] == ("120 rows of db.p wait in bucket-postpone for placement in buckets and are not read until then "
                      "(bucket = -2); run `lake compact db.p` to place them (a cluster's compactor service does it "
                      "by itself)")
    code, scanned, err = lake("scan", "db.p")
    assert code == 0 and scanned == ""
    assert err.startswith("note: 120 rows of db.p wait in bucket-postpone for placement")
    lake.ok("compact", "db.p")
    assert len(lake.jsonl("scan", "db.p")) == 120  # and no note (`ok` checks stderr is empty)
