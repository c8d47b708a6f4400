"""Iceberg engines read what reaches lsmlake through its catalog service: the metadata is published with every
commit, whoever commits (pypaimon through the REST catalog here), and on demand (`lake iceberg sync`, the
Client's `sync_iceberg`) for a table without the option; pyiceberg and DuckDB read exactly the rows the Paimon
readers read. Real processes on loopback: catalog_svc (gRPC and `--rest-port`); pypaimon 2.1.0 writing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import tests.support.writer_procs as procs
from lsmlake import Client
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.cli import main as cli
from lsmlake.errors import InvalidInputError
from lsmlake.iceberg import current_metadata_location
from lsmlake.kafka.broker import free_port
from tests.support.iceberg_readers import duckdb_read, pyiceberg_read, rows
from tests.support.pypaimon_io import read, write

pytestmark = pytest.mark.integration
pypaimon = pytest.importorskip("pypaimon", reason="pypaimon (the test extra) is not installed")


def _duckdb_rows(location: str) -> list[dict[str, Any]]:
    return rows(duckdb_read(location), "id")


def _iceberg_rows(location: str, snapshot_id: int | None = None) -> list[dict[str, Any]]:
    return rows(pyiceberg_read(location, snapshot_id), "id")


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[tuple[procs.Service, int]]:
    rest_port = free_port()
    service = procs.catalog(tmp_path / "wh", None, "--rest-port", str(rest_port))
    try:
        yield service, rest_port
    finally:
        service.stop()


def test_pypaimon_commits_through_rest_are_published_as_iceberg(catalog: tuple[procs.Service, int],
                                                                 tmp_path: Path) -> None:
    _, rest_port = catalog
    cat = pypaimon.CatalogFactory.create({"metastore": "rest", "uri": f"http://127.0.0.1:{rest_port}",
                                          "warehouse": "lake", "token.provider": "bear", "token": "unchecked"})
    cat.create_database("db", False)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("city", pa.string()), ("n", pa.int32())])
    cat.create_table("db.visits", pypaimon.Schema.from_pyarrow_schema(
        schema, partition_keys=["city"], options={"metadata.iceberg.storage": "table-location"}), False)
    table = cat.get_table("db.visits")
    first: list[dict[str, Any]] = [{"id": i, "city": "oslo" if i % 2 else "rome", "n": i * 10} for i in range(20)]
    write(table, pa.Table.from_pylist(first, schema=schema))
    second: list[dict[str, Any]] = [{"id": 100 + i, "city": "lima", "n": i} for i in range(5)]
    write(table, pa.Table.from_pylist(second, schema=schema))

    ours = FileSystemCatalog(str(tmp_path / "wh")).get_table("db.visits")
    assert ours.snapshots.latest_id() == 2
    location = current_metadata_location(ours)
    assert location is not None and location.endswith("v2.metadata.json"), location
    paimon_rows = sorted(read(cat.get_table("db.visits")).to_pylist(), key=lambda r: r["id"])
    assert paimon_rows == sorted(first + second, key=lambda r: r["id"])
    assert _iceberg_rows(location) == paimon_rows
    assert _duckdb_rows(location) == paimon_rows
    assert _iceberg_rows(location, snapshot_id=1) == sorted(first, key=lambda r: r["id"])  # time travel

    # a column type no Iceberg reader reads back as lsmlake wrote it is refused with the option, naming it
    refused = pa.schema([pa.field("id", pa.int64(), nullable=False), ("t", pa.time32("ms"))])
    with pytest.raises(Exception, match="`?t`?.*TIME"):
        cat.create_table("db.clock", pypaimon.Schema.from_pyarrow_schema(
            refused, options={"metadata.iceberg.storage": "table-location"}), False)


def test_lake_iceberg_sync_and_the_client(catalog: tuple[procs.Service, int], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A table created without the option gets Iceberg metadata on demand, through the catalog service: `lake
    iceberg sync` (then already current) and `Client.sync_iceberg` after another commit."""
    service, _ = catalog
    address = f"127.0.0.1:{service.port}"
    client = Client(address, warehouse=str(tmp_path / "wh"))
    try:
        client.create_database("db")
        client.create_table("db.t", "id BIGINT NOT NULL, v STRING")  # an append table
        wh = FileSystemCatalog(str(tmp_path / "wh"))
        table = wh.get_table("db.t")

        commits = iter(range(1, 10))

        def commit(rows: list[dict[str, Any]]) -> None:
            w = table.new_write()
            w.write(pa.Table.from_pylist(rows, schema=table.schema.arrow_schema))
            client.commit("db.t", w.prepare_commit(), commit_user="test", commit_identifier=next(commits))

        commit([{"id": 1, "v": "a"}, {"id": 2, "v": "b"}])
        assert current_metadata_location(table) is None  # no option: nothing published with the commit

        code = cli.main(["--warehouse", str(tmp_path / "wh"), "--catalog-service", address, "iceberg", "sync",
                         "db.t"])
        out = capsys.readouterr().out
        assert code == 0 and "Iceberg metadata of db.t at snapshot 1 (published 1 snapshot(s))" in out, out
        location = current_metadata_location(table)
        assert location is not None and location in out
        assert _iceberg_rows(location) == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]

        commit([{"id": 3, "v": "c"}])
        assert current_metadata_location(table) == location  # still the option's: not published with the commit
        synced = client.sync_iceberg("db.t")
        assert (synced.snapshot_id, synced.published) == (2, 1)
        assert _duckdb_rows(synced.metadata_location) == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"},
                                                          {"id": 3, "v": "c"}]
        again = client.sync_iceberg("db.t")
        assert (again.snapshot_id, again.published, again.metadata_location) == (2, 0, synced.metadata_location)
        with pytest.raises(InvalidInputError):
            client.sync_iceberg("db.")
    finally:
        client.close()


def test_rename_publishes_afresh_and_drop_removes_the_metadata(catalog: tuple[procs.Service, int],
                                                               tmp_path: Path) -> None:
    """The metadata names the table's paths: a renamed table's is published again under the new name (the old
    one's is gone), and a dropped table's goes with it, also when it lives outside the table (hadoop-catalog)."""
    service, _ = catalog
    client = Client(f"127.0.0.1:{service.port}", warehouse=str(tmp_path / "wh"))
    wh = FileSystemCatalog(str(tmp_path / "wh"))
    try:
        client.create_database("db")
        for name, storage in (("a", "table-location"), ("h", "hadoop-catalog")):
            client.create_table(f"db.{name}", "id BIGINT NOT NULL, v STRING",
                                options={"metadata.iceberg.storage": storage})
            table = wh.get_table(f"db.{name}")
            w = table.new_write()
            w.write(pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["x", "y"]}))
            client.commit(f"db.{name}", w.prepare_commit(), commit_user="test")
        hadoop = tmp_path / "wh" / "iceberg" / "db" / "h" / "metadata"
        assert (hadoop / "version-hint.text").is_file()
        assert _duckdb_rows(str(current_metadata_location(wh.get_table("db.h")))) == [
            {"id": 1, "v": "x"}, {"id": 2, "v": "y"}]

        client.rename_table("db.a", "db.b")
        renamed = current_metadata_location(wh.get_table("db.b"))
        assert renamed is not None and "/db.db/b/metadata/" in renamed, renamed
        assert _iceberg_rows(renamed) == [{"id": 1, "v": "x"}, {"id": 2, "v": "y"}]
        assert not (tmp_path / "wh" / "db.db" / "a").exists()

        client.drop_table("db.h")
        assert not hadoop.parent.exists()
    finally:
        client.close()
