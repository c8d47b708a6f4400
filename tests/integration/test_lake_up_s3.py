"""`lake up` on object storage, as a user tries it: `lake up --s3` (a local moto server it starts itself), and
`lake up --warehouse s3://...` against the `s3_server` fixture with the credentials in the URI.

`lake up` runs as its own process; the other `lake` commands run in-process through `main([...])` and find the
cluster from the warehouse URI alone, through the state folder under $HOME/.lake/clusters ($HOME is the test's
temporary folder, for `lake up` and for this process). `lake down` must leave no process of the cluster behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from lsmlake.cli import main as cli
from lsmlake.cli.cluster import ClusterState, find_endpoints, warehouse_key
from lsmlake.kafka.broker import free_port
from tests.support.s3_server import SECRET_KEY, S3Server

pytestmark = pytest.mark.integration

UP_DONE = "cluster is up"
UP_TIMEOUT_S = 240.0
DOWN_TIMEOUT_S = 120.0


def _children() -> dict[int, list[int]]:
    """Every live process's children, by parent pid (from /proc)."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            kids.setdefault(int(fields[1]), []).append(int(entry))
    return kids


def descendants(pid: int) -> set[int]:
    kids, found, todo = _children(), set(), [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@contextmanager
def lake_up(home: Path, warehouse_key_uri: str, *args: str, env: dict[str, str] | None = None
            ) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """`lake up ARGS` as its own process with $HOME at `home`, until the cluster of `warehouse_key_uri` is up."""
    log = home / "lake-up.log"
    child_env = {k: v for k, v in (env or os.environ).items() if not k.startswith(("LSMLAKE_", "LAKE_"))}
    child_env["HOME"] = str(home)
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", "from lsmlake.cli.main import main; raise SystemExit(main())",
                                 "up", "--catalog-port", str(free_port()), "--writer-port", str(free_port()),
                                 "--compactor-port", str(free_port()), "--rest-port", "0", "--ui-port", "0",
                                 "--commit-interval", "0.2", *args],
                                stdout=out, stderr=subprocess.STDOUT, env=child_env)
    try:
        deadline = time.monotonic() + UP_TIMEOUT_S
        while find_endpoints(warehouse_key_uri) is None or UP_DONE not in log.read_text():
            assert proc.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.3)
        yield proc, log
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(DOWN_TIMEOUT_S)


def lake(capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> str:
    capsys.readouterr()
    got = cli.main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert got == code, (got, out, err)
    return out if code == 0 else err


def csv_file(path: Path, rows: list[str]) -> str:
    path.write_text("\n".join(["id,v", *rows]) + "\n")
    return str(path)


def scan(capsys: pytest.CaptureFixture[str], warehouse: str, table: str) -> list[tuple[int, str]]:
    lines = lake(capsys, "--warehouse", warehouse, "scan", table, "--format", "jsonl").splitlines()
    return sorted((r["id"], r["v"]) for r in map(json.loads, lines))


def stop_and_check_nothing_left(capsys: pytest.CaptureFixture[str], proc: subprocess.Popen[bytes],
                                down_uri: str, state: ClusterState) -> None:
    """`lake down` with `down_uri`: the `lake up` process exits 0, and no process it started is still there."""
    started = descendants(proc.pid) | set((state.processes or {}).values())
    assert {"catalog", "writer"} <= set(state.processes or {}) and started
    assert "cluster stopped" in lake(capsys, "down", "--warehouse", down_uri)
    assert proc.wait(DOWN_TIMEOUT_S) == 0
    deadline = time.monotonic() + DOWN_TIMEOUT_S
    while any(alive(p) for p in started):  # children reparented to init are reaped there, not by us
        assert time.monotonic() < deadline, [p for p in started if alive(p)]
        time.sleep(0.2)
    assert not ClusterState.path(state.state_dir).exists()
    assert find_endpoints(down_uri) is None


def test_lake_up_s3_runs_the_cluster_on_a_local_s3_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`lake up --s3`: create, write twice, scan, full compaction through the compactor, scan again; the table is in
    the local server's bucket; `lake down` stops every process, the S3 server too."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for key in [k for k in os.environ if k.startswith(("AWS_", "LAKE_", "LSMLAKE_"))]:
        monkeypatch.delenv(key)  # the commands must get the endpoint from the cluster's state
    wh = "s3://lake/warehouse"
    with lake_up(tmp_path, wh, "--s3", "--spark-master", "local[1]") as (proc, log):
        state = find_endpoints(wh)
        assert state is not None and state.s3_server is not None
        printed = log.read_text()
        assert f"s3         {state.s3_server}" in printed and f"warehouse  {wh}\n" in printed, printed
        assert state.state_dir.startswith(str(tmp_path / ".lake" / "clusters")), state.state_dir
        assert Path(state.metastore.removeprefix("sqlite:///")).is_file()  # type: ignore[union-attr]

        lake(capsys, "--warehouse", wh, "table", "create", "shop.orders", "--schema", "id BIGINT NOT NULL, v STRING",
             "--primary-key", "id", "--option", "bucket=2")
        first = csv_file(tmp_path / "a.csv", [f"{i},a{i}" for i in range(100)])
        second = csv_file(tmp_path / "b.csv", [f"{i},b{i}" for i in range(0, 100, 2)])
        for path in (first, second):
            wrote = lake(capsys, "--warehouse", wh, "write", "shop.orders", path)
            assert "one commit through the catalog service" in wrote
        expected = [(i, f"{'b' if i % 2 == 0 else 'a'}{i}") for i in range(100)]
        assert scan(capsys, wh, "shop.orders") == expected

        out = lake(capsys, "--warehouse", wh, "compact", "shop.orders", "--full")
        assert "through the compactor service" in out, out
        assert scan(capsys, wh, "shop.orders") == expected
        files = lake(capsys, "--warehouse", wh, "files", "shop.orders", "--format", "jsonl")
        records = [json.loads(line) for line in files.splitlines()]
        shape = [(r["bucket"], r["level"], r["rows"], r["min_seq"], r["max_seq"]) for r in records]
        history = lake(capsys, "--warehouse", wh, "snapshots", "shop.orders", "--format", "jsonl")
        assert sorted(r["bucket"] for r in records) == [0, 1] and sum(r["rows"] for r in records) == 100, (
            out, shape, history)
        assert {r["level"] for r in records} == {5}, shape

        # the plans are in the catalog's metastore, which the state folder holds for an object-store warehouse; a
        # bucket the compactor was already looking at when the request came is planned in a round of its own, so
        # the full compaction is one COMPACT snapshot per plan, each plan COMPLETED by its own
        plans = [json.loads(line) for line in
                 lake(capsys, "--warehouse", wh, "timeline", "shop.orders", "--format", "jsonl").splitlines()]
        history = [json.loads(line) for line in
                   lake(capsys, "--warehouse", wh, "snapshots", "shop.orders", "--format", "jsonl").splitlines()]
        kinds = [(h["id"], h["commit_kind"]) for h in history]
        compacts = [i for i, kind in kinds[2:] if kind == "COMPACT"]
        assert kinds[:2] == [(1, "APPEND"), (2, "APPEND")] and 1 <= len(compacts) == len(kinds) - 2 <= 2, kinds
        assert sorted((p["snapshot"], p["state"]) for p in plans) == [(i, "COMPLETED") for i in compacts], plans

        # the files are in the server's bucket, under the warehouse's prefix
        s3 = pafs.S3FileSystem(access_key="any", secret_key="any", endpoint_override=state.s3_server,
                               region="us-east-1")
        snapshots = s3.get_file_info(pafs.FileSelector("lake/warehouse/shop.db/orders/snapshot"))
        assert {f.base_name for f in snapshots if f.base_name.startswith("snapshot-")} == {
            f"snapshot-{i}" for i, _ in kinds}

        status = lake(capsys, "status", "--warehouse", wh)
        assert "NOT SERVING" not in status and f"warehouse  {wh}" in status, status
        assert state.processes is not None and "s3" in state.processes
        stop_and_check_nothing_left(capsys, proc, wh, state)


def test_lake_up_on_an_s3_warehouse_with_credentials_in_its_uri(s3_server: S3Server, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """`lake up --warehouse s3://KEY:SECRET@bucket/prefix?endpoint_override=...`: the secret is on no command line
    and in no output; commands with the full URI write and read through the cluster, `lake compact` on a cluster
    without a compactor names the missing flag, and `status` and `down` find the cluster from the bare URI."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for key in [k for k in os.environ if k.startswith(("AWS_", "LAKE_", "LSMLAKE_"))]:
        monkeypatch.delenv(key)
    wh = s3_server.warehouse()
    bare = warehouse_key(wh)
    assert SECRET_KEY not in bare and "?" not in bare
    with lake_up(tmp_path, wh, "--warehouse", wh, "--no-compactor") as (proc, log):
        state = find_endpoints(bare)
        assert state is not None and state.s3_server is None and state.processes is not None
        for name in ("catalog", "writer"):
            cmdline = Path(f"/proc/{state.processes[name]}/cmdline").read_bytes()
            assert SECRET_KEY.encode() not in cmdline and bare.encode() in cmdline, cmdline
        assert SECRET_KEY not in state.path(state.state_dir).read_text()

        lake(capsys, "--warehouse", wh, "table", "create", "db.t", "--schema", "id BIGINT NOT NULL, v STRING",
             "--primary-key", "id", "--option", "bucket=1")
        rows = csv_file(tmp_path / "rows.csv", [f"{i},x{i}" for i in range(10)])
        assert "one commit through the catalog service" in lake(capsys, "--warehouse", wh, "write", "db.t", rows)
        assert scan(capsys, wh, "db.t") == [(i, f"x{i}") for i in range(10)]
        err = lake(capsys, "--warehouse", wh, "compact", "db.t", code=2)
        assert "pass --compactor-service HOST:PORT" in err, err
        assert lake(capsys, "--warehouse", wh, "snapshots", "db.t", "--format", "jsonl").count("\n") == 1

        status = lake(capsys, "status", "--warehouse", bare)
        assert "NOT SERVING" not in status and SECRET_KEY not in status, status
        stop_and_check_nothing_left(capsys, proc, bare, state)
    assert SECRET_KEY not in log.read_text()
