"""`Client.new_scan` against a real catalog and writer on loopback: every output of a scan, `limit`, reading split
by split, time travel by id, time and tag, and the changes between two snapshots, each compared with the library's
own read of the same table (`FileSystemCatalog(...).get_table(...)`)."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from lsmlake import Client
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.client.scan import ScanPlan
from lsmlake.errors import InvalidInputError, LakeError, NotFoundError
from lsmlake.format.predicate import Or, Predicate, Term
from lsmlake.table.changelog import read_changelog
from lsmlake.table.compact import compact_table
from lsmlake.table.file_store_table import FileStoreTable
from tests.support.client_services import ClientServices, client_services

ROWS = [{"id": i, "p": "ab"[i % 2], "v": None if i % 5 == 0 else i * 10, "s": f"s{i % 7}"} for i in range(40)]


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClientServices]:
    with client_services(str(tmp_path_factory.mktemp("wh"))) as s:
        yield s


@pytest.fixture(scope="module")
def lake(services: ClientServices) -> Iterator[Client]:
    with Client(services.catalog, writer=services.writer, timeout_s=30) as c:
        # two partitions of four buckets: eight splits; two commits, the second updating some keys (a merge)
        c.create_table("db.t", "id BIGINT NOT NULL, p STRING NOT NULL, v INT, s STRING", primary_keys=["id", "p"],
                       partition_keys=["p"], options={"bucket": 4})
        c.write("db.t", ROWS[:30], commit_now=True)
        c.write("db.t", [dict(r, s="new") for r in ROWS[20:]], commit_now=True)
        yield c


def library(services: ClientServices, identifier: str) -> FileStoreTable:
    return FileSystemCatalog(services.warehouse).get_table(identifier)


def by_id(t: pa.Table) -> pa.Table:
    return t.sort_by("id")


def test_every_output_reads_what_the_library_reads(lake: Client, services: ClientServices) -> None:
    scan = lake.new_scan("db.t", where="v >= 100 OR v IS NULL", columns=["id", "v", "p"])
    expected = library(services, "db.t").to_arrow(
        projection=["id", "v", "p"], predicate=Or(Term("v", ">=", 100), Term("v", "is_null")))
    assert expected.num_rows > 0
    assert by_id(scan.to_arrow()).equals(by_id(expected))
    assert by_id(scan.to_arrow_batch_reader().read_all()).equals(by_id(expected))
    assert scan.to_pandas().sort_values("id").reset_index(drop=True).equals(
        expected.to_pandas().sort_values("id").reset_index(drop=True))
    con = scan.to_duckdb("rows")
    got = con.execute("SELECT count(*), sum(v), min(id) FROM rows").fetchone()
    assert got == (expected.num_rows, pa.compute.sum(expected["v"]).as_py(), pa.compute.min(expected["id"]).as_py())
    mine = duckdb.connect()
    assert scan.to_duckdb("again", connection=mine) is mine
    assert mine.execute("SELECT count(*) FROM again").fetchone() == (expected.num_rows,)
    # Client.scan is the same read, as an Arrow table
    assert by_id(lake.scan("db.t", where="v >= 100 OR v IS NULL", columns=["id", "v", "p"])).equals(by_id(expected))


def test_the_plan_is_made_once_and_every_output_reads_its_snapshot(lake: Client, services: ClientServices) -> None:
    lake.create_table("db.fixed", "id BIGINT NOT NULL", primary_keys=["id"], options={"bucket": 2})
    lake.write("db.fixed", [{"id": i} for i in range(10)], commit_now=True)
    scan = lake.new_scan("db.fixed")
    plan = scan.plan()
    assert isinstance(plan, ScanPlan) and plan.snapshot_id == 1 and plan.rows == 10 and len(plan.splits) == 2
    lake.write("db.fixed", [{"id": 10}], commit_now=True)
    assert scan.plan() is plan and scan.to_arrow().num_rows == 10  # still snapshot 1
    assert lake.new_scan("db.fixed").to_arrow().num_rows == 11
    assert repr(plan) == "ScanPlan(snapshot_id=1, 2 splits, 2 files, 10 rows before merge and filter)"
    assert repr(lake.new_scan("db.t", where={"p": "a"}, columns=["id"], limit=5)) == (
        "Scan(db.t, latest, where=\"p = 'a'\", columns=[id], limit=5)")
    assert repr(lake.new_scan("db.t", snapshot_id=1)) == "Scan(db.t, snapshot_id=1)"
    # the whole filter prunes in the catalog: a partition term skips the other partition, also under an OR
    assert {s.partition_values for s in lake.new_scan("db.t", where="p = 'a' AND v > 0").plan().splits} == {("a",)}
    assert {s.partition_values for s in lake.new_scan("db.t", where="(p = 'a' AND v > 0) OR (p = 'a' AND id < 3)")
            .plan().splits} == {("a",)}
    assert {s.partition_values for s in lake.new_scan("db.t", where="p = 'a' OR v > 0").plan().splits} == {
        ("a",), ("b",)}


def test_limit_returns_that_many_rows_of_the_filter(lake: Client, services: ClientServices) -> None:
    full = lake.scan("db.t", where=[("v", ">", 50)])
    keys = set(full["id"].to_pylist())
    for limit in (0, 1, 7, full.num_rows, full.num_rows + 10):
        for got in (lake.scan("db.t", where=[("v", ">", 50)], limit=limit),
                    lake.new_scan("db.t", where=[("v", ">", 50)], limit=limit).to_arrow_batch_reader().read_all()):
            assert got.num_rows == min(limit, full.num_rows) and got.schema == full.schema
            assert set(got["id"].to_pylist()) <= keys and len(set(got["id"].to_pylist())) == got.num_rows


def _delete_data_files(table: FileStoreTable, keep: set[str] | None = None) -> None:
    for root, _, names in os.walk(table.path):
        for n in names:
            if n.startswith("data-") and (keep is None or n not in keep):
                os.remove(os.path.join(root, n))


def test_a_batch_reader_reads_each_split_when_it_is_consumed(lake: Client, services: ClientServices) -> None:
    """Reading is lazy and stops at the limit: files deleted after the plan break only the splits still read."""
    lake.create_table("db.lazy", "id BIGINT NOT NULL, v STRING", primary_keys=["id"], options={"bucket": 4})
    lake.write("db.lazy", [{"id": i, "v": "x"} for i in range(100)], commit_now=True)
    scan = lake.new_scan("db.lazy", limit=1)
    first = scan.plan().splits[0]
    reader = lake.new_scan("db.lazy").to_arrow_batch_reader()
    assert reader.read_next_batch().num_rows > 0  # the first split is read
    _delete_data_files(library(services, "db.lazy"), keep={f.file_name for f in first.files})
    assert scan.to_arrow().num_rows == 1  # limit 1: only the first split was needed, and read
    with pytest.raises((LakeError, OSError)):
        reader.read_all()  # the other splits are read only now, and their files are gone


def test_time_travel_by_id_time_and_tag(lake: Client, services: ClientServices) -> None:
    lake.create_table("db.tt", "id BIGINT NOT NULL, v STRING", primary_keys=["id"], options={"bucket": 1})
    lake.write("db.tt", [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}], commit_now=True)
    lake.write("db.tt", [{"id": 2, "v": "B"}, {"id": 3, "v": "c"}], commit_now=True)
    lake.write("db.tt", [{"id": 4, "v": "d"}], commit_now=True)
    lib = library(services, "db.tt")
    s1, s2, s3 = lake.snapshots("db.tt")
    at = {sid: by_id(lib.to_arrow(snapshot_id=sid)) for sid in (1, 2, 3)}
    assert by_id(lake.scan("db.tt", snapshot_id=1)).equals(at[1])
    for when, sid in ((s1.time_millis, 1), (s2.time_millis, 2), (s3.time_millis + 60_000, 3)):
        assert by_id(lake.scan("db.tt", as_of=when)).equals(at[sid])
        aware = dt.datetime.fromtimestamp(when / 1000, dt.UTC)
        assert by_id(lake.new_scan("db.tt", as_of=aware).to_arrow()).equals(at[sid])
        assert by_id(lake.scan("db.tt", as_of=aware.astimezone().replace(tzinfo=None))).equals(at[sid])  # local
    with pytest.raises(NotFoundError, match="no snapshot committed at or before"):
        lake.scan("db.tt", as_of=s1.time_millis - 1)
    with pytest.raises(InvalidInputError, match="one of snapshot_id, as_of or tag"):
        lake.new_scan("db.tt", snapshot_id=1, as_of=s1.time_millis)
    with pytest.raises(InvalidInputError, match="as_of"):
        lake.scan("db.tt", as_of="yesterday")  # type: ignore[arg-type]

    lake.create_tag("db.tt", "first", snapshot_id=1)
    assert by_id(lake.scan("db.tt", tag="first")).equals(at[1])
    assert repr(lake.new_scan("db.tt", tag="first")) == "Scan(db.tt, tag='first')"
    # the tagged snapshot expires; the tag keeps its files, and a tag scan still reads them
    assert 1 in lake.expire("db.tt", retain_min=1, retain_max=1).expired_snapshot_ids
    with pytest.raises(NotFoundError):
        lake.scan("db.tt", snapshot_id=1)
    assert by_id(lake.scan("db.tt", tag="first", where={"id": 2})).equals(at[1].filter(pa.compute.field("id") == 2))
    with pytest.raises(NotFoundError, match="nope"):
        lake.scan("db.tt", tag="nope")


def test_bad_scans_are_refused_naming_the_problem(lake: Client) -> None:
    for kwargs, message in (({"columns": ["id", "nope"]}, r"\['nope'\] are not columns"),
                            ({"columns": "id"}, "list of column names"),
                            ({"limit": -1}, "limit must be"), ({"limit": 1.5}, "limit must be"),
                            ({"where": "v >"}, "v >"), ({"where": [("nope", "=", 1)]}, "'nope' is not a column"),
                            ({"where": {"v": "x"}}, "is not a valid int32"),
                            ({"where": [("v", "~", 1)]}, "unknown filter operator")):
        with pytest.raises(InvalidInputError, match=message):
            lake.new_scan("db.t", **kwargs).to_arrow()
    with pytest.raises(NotFoundError):
        lake.new_scan("db.none")


def _changes(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((r["snapshot_id"], r["row_kind"], r["id"], r.get("v")) for r in rows)


def test_read_changes_between_two_snapshots(lake: Client, services: ClientServices) -> None:
    # a changelog producer: the table's changelog, as the library reads it
    lake.create_table("db.cl", "id BIGINT NOT NULL, v STRING", primary_keys=["id"],
                      options={"bucket": 1, "changelog-producer": "input"})
    lake.write("db.cl", [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}], commit_now=True)
    lake.write("db.cl", [{"id": 1, "v": "A", "op": "+U"}, {"id": 2, "op": "-D", "v": "b"}], row_kind_column="op",
               commit_now=True)
    lake.write("db.cl", [{"id": 3, "v": "c"}], commit_now=True)
    lib = library(services, "db.cl")
    for start, end in ((0, 3), (1, 2), (1, None), (2, 3), (3, 3)):
        got = lake.read_changes("db.cl", start, end)
        want = read_changelog(lib, start + 1, end if end is not None else 3) if start < (end or 3) else None
        assert got.column_names == ["snapshot_id", "row_kind", "id", "v"]
        assert _changes(got.to_pylist()) == (_changes(want.to_pylist()) if want is not None else [])
    assert _changes(lake.read_changes("db.cl", 1, 2).to_pylist()) == [(2, "+U", 1, "A"), (2, "-D", 2, "b")]
    only = lake.read_changes("db.cl", 0, where="id = 1", columns=["v"])
    assert only.column_names == ["snapshot_id", "row_kind", "v"] and only.num_rows == 2

    # no changelog producer: the delta, the rows each APPEND commit wrote as written; compactions give nothing
    lake.create_table("db.delta", "id BIGINT NOT NULL, v STRING", primary_keys=["id"], options={"bucket": 1})
    lake.write("db.delta", [{"id": 1, "v": "a"}], commit_now=True)
    lake.write("db.delta", [{"id": 1, "op": "-D", "v": "a"}, {"id": 5, "v": "e", "op": "+I"}],
               row_kind_column="op", commit_now=True)
    compact_table(library(services, "db.delta"), full=True)  # a COMPACT snapshot 3
    lake.write("db.delta", [{"id": 6, "v": "f"}], commit_now=True)
    assert [s.commit_kind for s in lake.snapshots("db.delta")] == ["APPEND", "APPEND", "COMPACT", "APPEND"]
    assert _changes(lake.read_changes("db.delta", 0).to_pylist()) == [
        (1, "+I", 1, "a"), (2, "+I", 5, "e"), (2, "-D", 1, "a"), (4, "+I", 6, "f")]
    lake.create_table("db.appendonly", "id BIGINT, v STRING")
    lake.write("db.appendonly", [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}], commit_now=True)
    assert _changes(lake.read_changes("db.appendonly", 0, 1).to_pylist()) == [(1, "+I", 1, "a"), (1, "+I", 2, "b")]

    with pytest.raises(InvalidInputError, match="after end_snapshot"):
        lake.read_changes("db.delta", 3, 2)
    with pytest.raises(NotFoundError, match="no snapshot 9"):
        lake.read_changes("db.delta", 0, 9)
    with pytest.raises(InvalidInputError, match="start_snapshot must be"):
        lake.read_changes("db.delta", -1)
    lake.expire("db.delta", retain_min=1, retain_max=1)
    with pytest.raises(NotFoundError, match="expired"):
        lake.read_changes("db.delta", 0)


def test_filters_whose_text_the_catalog_cannot_read_back_still_filter(lake: Client, services: ClientServices) -> None:
    """A TIME literal or a millisecond timestamp written with microseconds has no text the catalog parses back: the
    scan plans with what does parse (here nothing) and the reader still filters by the whole filter."""
    lake.create_table("db.times", "id BIGINT NOT NULL, tm TIME, ts TIMESTAMP(3), x DOUBLE", primary_keys=["id"],
                      options={"bucket": 2})
    rows = [{"id": i, "tm": dt.time(1, 2, i), "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 1000 * i), "x": i / 2}
            for i in range(6)]
    lake.write("db.times", rows, commit_now=True)
    lib = library(services, "db.times")
    for where in ({"tm": dt.time(1, 2, 3)}, {"ts": dt.datetime(2024, 1, 2, 3, 4, 5, 2000)},
                  [("ts", ">", dt.datetime(2024, 1, 2, 3, 4, 5, 3000)), ("id", "<", 5)],
                  [("x", "!=", float("nan"))]):
        expected = by_id(lib.to_arrow(predicate=Predicate.of(where, lib.schema.arrow_schema)))
        assert by_id(lake.scan("db.times", where=where)).equals(expected)
    assert _ids(lake.scan("db.times", where={"tm": dt.time(1, 2, 3)})) == [3]


def _ids(t: pa.Table) -> list[int]:
    return sorted(t["id"].to_pylist())


def test_a_scan_repr_stays_short(lake: Client) -> None:
    long = " OR ".join(f"id = {i}" for i in range(50))
    text = repr(lake.new_scan("db.t", where=long))
    assert text.startswith("Scan(db.t, latest, where='id = 0 OR id = 1") and text.endswith("...')") and len(text) < 110
