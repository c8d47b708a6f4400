"""`lake write` through a cluster means what it means locally: ONE commit, whatever the size (the files are
written here and committed once through the catalog, numbered by the catalog's sequence authority). A caller the
catalog does not let number rows writes through the writer service in parts, and the output says how many
commits. Real catalog and writer services on loopback ports."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lsmlake.rpc.security import ChannelSecurity, ServerSecurity
from tests.lsmlake.cli.conftest import Lake, untimed
from tests.support.local_server import local_server
from tests.support.security import Tokens
from writer_svc.server import Settings, WriterServer


@dataclass
class Cluster:
    lake: Lake
    flags: list[str]

    def __call__(self, *args: str) -> str:
        return self.lake.ok(*self.flags, *args)


def start(lake: Lake, tokens: Tokens | None = None) -> Iterator[Cluster]:
    security = ServerSecurity(auth_tokens=tokens.file) if tokens else ServerSecurity()
    with local_server(str(lake.warehouse), security=security) as cat:
        writer = WriterServer(Settings(warehouse=str(lake.warehouse), catalog=f"127.0.0.1:{cat.server.port}",
                                       commit_interval_s=0.2, metrics_port=0,
                                       catalog_security=ChannelSecurity(token=tokens.service if tokens else None)))
        writer.start()
        try:
            yield Cluster(lake, ["--catalog-service", f"127.0.0.1:{cat.server.port}",
                                 "--writer-service", f"127.0.0.1:{writer.port}"])
        finally:
            writer.stop()


@pytest.fixture
def cluster(lake: Lake) -> Iterator[Cluster]:
    lake.warehouse.mkdir(parents=True)
    yield from start(lake)


def rows_file(tmp_path: Path, name: str, ids: range, v: str) -> str:
    path = tmp_path / f"{name}.parquet"
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "v": [v] * len(ids)}), path)
    return str(path)


def test_a_large_write_is_one_snapshot(cluster: Cluster, tmp_path: Path) -> None:
    """250,000 rows (two and a half of the writer's old parts) land in one snapshot: no reader sees part of them."""
    lake = cluster.lake
    cluster("table", "create", "db.t", "--schema", "id BIGINT NOT NULL, v STRING", "--primary-key", "id",
            "--option", "bucket=2")
    cluster("write", "db.t", rows_file(tmp_path, "small", range(10), "a"))
    before = lake.snapshot_ids("db.t")
    out = cluster("write", "db.t", rows_file(tmp_path, "big", range(250_000), "b"))
    assert untimed(out) == (f"wrote 250,000 rows from 1 file to db.t in snapshot {before[-1] + 1}, one commit "
                            "through the catalog service: 2 data files, SIZE, TIME\n")
    after = lake.table("db.t").snapshots.snapshots()
    assert [s.id for s in after] == [*before, before[-1] + 1]
    assert after[-1].delta_record_count == 250_000 and after[-1].total_record_count == 250_010
    got = lake.table("db.t").to_arrow()
    assert got.num_rows == 250_000 and set(got.column("v").to_pylist()) == {"b"}


def test_a_named_write_run_again_commits_nothing_twice(cluster: Cluster, tmp_path: Path) -> None:
    lake = cluster.lake
    cluster("table", "create", "db.e", "--schema", "id BIGINT, v STRING")  # append: a repeat would show
    rows = rows_file(tmp_path, "events", range(1000), "e")
    first = cluster("write", "db.e", rows, "--request-id", "load-1")
    assert "in snapshot 1, one commit" in first
    again = cluster("write", "db.e", rows, "--request-id", "load-1")
    assert again == ("wrote 0 rows from 1 file to db.e: this --request-id was written before, in snapshot 1 "
                     "(nothing written again)\n")
    assert lake.snapshot_ids("db.e") == [1] and lake.table("db.e").to_arrow().num_rows == 1000
    assert len(lake.table("db.e").plan()[0].files) == 1  # the second run's files were deleted


def test_numbered_by_the_catalog_beside_the_writer_service(cluster: Cluster, tmp_path: Path) -> None:
    """The CLI's rows and the writer service's share the catalog's sequence numbers: the later change wins, and
    a dynamic-bucket table's keys keep their bucket (the catalog assigns them)."""
    from lsmlake import Client

    lake = cluster.lake
    for name, bucket in (("db.k", "1"), ("db.d", "-1")):
        cluster("table", "create", name, "--schema", "id BIGINT NOT NULL, v STRING", "--primary-key", "id",
                "--option", f"bucket={bucket}")
        cluster("write", name, rows_file(tmp_path, f"{name}-1", range(100), "cli-1"))
        with Client(cluster.flags[1], writer=cluster.flags[3]) as client:
            client.write(name, pa.table({"id": pa.array(range(50), pa.int64()), "v": ["svc"] * 50}), commit_now=True)
        cluster("write", name, rows_file(tmp_path, f"{name}-2", range(25), "cli-2"))
        got = dict(zip(*lake.table(name).to_arrow().to_pydict().values(), strict=True))
        assert got == {i: "cli-2" if i < 25 else "svc" if i < 50 else "cli-1" for i in range(100)}, name


def test_without_the_right_to_number_rows_the_output_says_how_many_commits(lake: Lake, tmp_path: Path,
                                                                            tokens: Tokens) -> None:
    lake.warehouse.mkdir(parents=True)
    token_file = tmp_path / "writer.token"
    for role in ("admin", "writer"):
        token_file.write_text(getattr(tokens, role))
        for cluster in start(lake, tokens):
            flags = [*cluster.flags, "--token-file", str(token_file)]
            if role == "admin":
                lake.ok(*flags, "table", "create", "db.t", "--schema", "id BIGINT, v STRING")
                continue
            out = lake.ok(*flags, "write", "db.t", rows_file(tmp_path, "rows", range(150_000), "w"))
    assert untimed(out).startswith("wrote 150,000 rows from 1 file to db.t through the writer service, in 2 commits "
                                   "of up to 100,000 rows, which readers may see one by one: snapshot 2, TIME (not one "
                                   "commit through the catalog: ")
    assert "sequence numbers" in out
    assert lake.snapshot_ids("db.t") == [1, 2]
