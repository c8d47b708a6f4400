"""The `lake` command line: run in-process through `main([...])`, and once through the console script."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.cli import main as cli
from lsmlake.cli.progress import Progress, with_progress
from lsmlake.cli.records import human_size
from lsmlake.errors import CommitConflictError
from lsmlake.table.commit import FileStoreCommit
from tests.lsmlake.cli.conftest import Lake, untimed

LAKE = Path(sys.executable).parent / "lake"

ORDERS_SCHEMA = "id BIGINT NOT NULL, dt STRING, amount DECIMAL(10,2), day DATE, ts TIMESTAMP(3), note STRING"


def create_orders(lake: Lake, name: str = "shop.orders", *extra: str) -> None:
    lake.ok("table", "create", name, "--schema", ORDERS_SCHEMA, "--primary-key", "id,dt",
            "--partition-key", "dt", "--option", "bucket=2", *extra)


def write_text(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def orders_arrow() -> pa.Table:
    return pa.table({
        "id": pa.array([1, 2, 3], pa.int64()),
        "dt": ["2024-01-01", "2024-01-01", "2024-01-02"],
        "amount": pa.array([Decimal("12.50"), Decimal("-0.01"), None], pa.decimal128(10, 2)),
        "day": pa.array([dt.date(2024, 1, 1), None, dt.date(2024, 1, 2)]),
        "ts": pa.array([dt.datetime(2024, 1, 1, 8, 30, 0, 123000), None, dt.datetime(2024, 1, 2)],
                       pa.timestamp("ms")),
        "note": ["a", None, "c"],
    })


def by_id(rows: list[dict]) -> dict[int, dict]:
    return {r["id"]: r for r in rows}


# ---------------------------------------------------------------------------------------------
# help, version, usage
# ---------------------------------------------------------------------------------------------

def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert "lsmlake" in capsys.readouterr().out
    for args in ([], ["table"], ["table", "create"], ["table", "list"], ["table", "describe"],
                 ["table", "drop"], ["write"], ["scan"], ["snapshots"], ["files"], ["compact"], ["levels"]):
        assert cli.main([*args, "--help"]) == 0
        out = capsys.readouterr().out
        assert "usage: lake" in out and "examples:" in out, args
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "lake compact " in out and "lake levels " in out
    assert cli.main(["files", "--help"]) == 0
    assert "k=v" in capsys.readouterr().out.replace("key=value", "k=v")


def test_usage_errors_exit_2(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "required" in lake.fails(code=2)
    assert "invalid choice" in lake.fails("scan", "db.t", "--format", "xml", code=2)
    err = lake.fails("table", "create", "db.t", "--schema", "a INT", "--option", "bucket", code=2)
    assert "KEY=VALUE" in err
    assert "--output" in lake.fails("scan", "db.t", "--format", "parquet", code=2)
    monkeypatch.delenv("LAKE_WAREHOUSE", raising=False)
    assert cli.main(["table", "list", "db"]) == 2
    assert "LAKE_WAREHOUSE" in lake.capsys.readouterr().err


def test_warehouse_from_environment(lake: Lake, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LAKE_WAREHOUSE", str(lake.warehouse))
    assert cli.main(["table", "create", "db.t", "--schema", "a INT"]) == 0
    capsys.readouterr()
    assert cli.main(["table", "list", "db"]) == 0
    assert capsys.readouterr().out == "table\n-----\nt\n"
    # --warehouse is also accepted after the command name
    other = lake.warehouse.parent / "other"
    assert cli.main(["table", "create", "db.u", "--schema", "a INT", "--warehouse", str(other)]) == 0
    assert FileSystemCatalog(str(other)).list_tables("db") == ["u"]


# ---------------------------------------------------------------------------------------------
# table create / list / describe / drop
# ---------------------------------------------------------------------------------------------

def test_table_lifecycle(lake: Lake) -> None:
    create_orders(lake, "shop.orders", "--comment", "all orders")
    lake.ok("table", "create", "shop.events", "--schema", "ts TIMESTAMP(6), msg STRING")
    assert lake.ok("table", "list", "shop").split() == ["table", "------", "events", "orders"]
    assert lake.jsonl("table", "list", "shop", "--format", "jsonl") == [{"table": "events"},
                                                                        {"table": "orders"}]
    assert json.loads(lake.ok("table", "list", "shop", "--format", "json")) == [{"table": "events"},
                                                                                {"table": "orders"}]
    assert lake.ok("table", "list", "shop", "--format", "csv") == "table\nevents\norders\n"

    d = json.loads(lake.ok("table", "describe", "shop.orders", "--format", "json"))
    assert d["table"] == "shop.orders"
    assert [c["name"] for c in d["columns"]] == ["id", "dt", "amount", "day", "ts", "note"]
    assert d["columns"][2]["type"] == "DECIMAL(10, 2)"
    assert d["columns"][1] == {"id": 1, "name": "dt", "type": "STRING NOT NULL", "nullable": False}
    assert d["primary_keys"] == ["id", "dt"] and d["partition_keys"] == ["dt"]
    assert d["options"] == {"bucket": "2"} and d["comment"] == "all orders"
    assert lake.jsonl("table", "describe", "shop.orders", "--format", "jsonl") == [d]
    text = lake.ok("table", "describe", "shop.orders")
    assert "DECIMAL(10, 2)" in text and "bucket = 2" in text and "primary key" in text

    assert "already exists" in lake.fails("table", "create", "shop.orders", "--schema", "a INT")
    lake.ok("table", "create", "shop.orders", "--schema", "a INT", "--if-not-exists")
    assert lake.table("shop.orders").schema.field_names[0] == "id"

    lake.ok("table", "drop", "shop.events")
    assert lake.ok("table", "list", "shop").split()[2:] == ["orders"]
    assert "does not exist" in lake.fails("table", "drop", "shop.events")
    lake.ok("table", "drop", "shop.events", "--if-exists")


@pytest.mark.parametrize("args, message", [
    (["--schema", "id FOOBAR"], "FOOBAR"),
    (["--schema", "id BIGINT", "--primary-key", "id"], "bucket"),
    (["--schema", "id BIGINT", "--partition-key", "nope"], "nope"),
    (["--schema", "id DECIMAL(50, 2)"], "DECIMAL"),
])
def test_create_rejects_bad_definitions(lake: Lake, args: list[str], message: str) -> None:
    err = lake.fails("table", "create", "db.t", *args)
    assert message in err
    assert not (lake.warehouse / "db.db").exists()  # not even the database was created


def test_bad_identifier(lake: Lake) -> None:
    assert "DATABASE.TABLE" in lake.fails("table", "create", "nodot", "--schema", "a INT")
    assert "does not exist" in lake.fails("table", "list", "nodb")


# ---------------------------------------------------------------------------------------------
# write + scan
# ---------------------------------------------------------------------------------------------

def test_write_parquet_and_scan_every_format(lake: Lake, tmp_path: Path) -> None:
    create_orders(lake)
    src = tmp_path / "orders.parquet"
    pq.write_table(orders_arrow(), src)
    out = lake.ok("write", "shop.orders", str(src))
    assert untimed(out) == "wrote 3 rows from 1 file to shop.orders in snapshot 1: 2 data files, SIZE, TIME\n"

    rows = by_id(lake.jsonl("scan", "shop.orders"))
    assert rows[1] == {"id": 1, "dt": "2024-01-01", "amount": "12.50", "day": "2024-01-01",
                       "ts": "2024-01-01T08:30:00.123", "note": "a"}
    assert rows[2] == {"id": 2, "dt": "2024-01-01", "amount": "-0.01", "day": None, "ts": None, "note": None}
    assert rows[3]["ts"] == "2024-01-02T00:00:00.000" and rows[3]["amount"] is None

    # csv
    text = lake.ok("scan", "shop.orders", "--format", "csv")
    records = {int(r["id"]): r for r in csv.DictReader(io.StringIO(text))}
    assert list(records[1]) == ["id", "dt", "amount", "day", "ts", "note"]
    assert records[1]["amount"] == "12.50" and records[1]["day"] == "2024-01-01"
    assert records[2]["note"] == "" and records[2]["amount"] == "-0.01" and records[3]["amount"] == ""

    # table
    lines = lake.ok("scan", "shop.orders", "--format", "table").splitlines()
    assert lines[0].split() == ["id", "dt", "amount", "day", "ts", "note"]
    assert set(lines[1]) <= {"-", " "}
    assert len(lines) == 5
    assert lines[0].index("dt") == lines[2].index("2024-01-0")  # aligned columns
    assert any("12.50" in line for line in lines[2:])

    # parquet (needs --output), and the output file equals the table
    target = tmp_path / "out.parquet"
    summary = lake.ok("scan", "shop.orders", "--format", "parquet", "--output", str(target))
    assert summary == (f"wrote 3 rows, {human_size(target.stat().st_size)}, 1 file, "
                       f"{summary.split(', ')[3].split(' to ')[0]} to {target} from shop.orders snapshot 1\n")
    got = pq.read_table(target).sort_by("id")
    expected = lake.table("shop.orders").to_arrow().sort_by("id")
    assert got.schema.names == expected.schema.names
    assert got.to_pylist() == expected.to_pylist() == orders_arrow().to_pylist()
    assert got.schema.field("amount").type == pa.decimal128(10, 2)

    # jsonl and csv to a file
    target = tmp_path / "out.jsonl"
    assert lake.ok("scan", "shop.orders", "--output", str(target)).startswith("wrote 3 rows, ")
    assert by_id([json.loads(x) for x in target.read_text().splitlines()]) == rows
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".lake-")]


def test_write_csv_and_jsonl_with_row_kinds(lake: Lake, tmp_path: Path) -> None:
    create_orders(lake)
    first = write_text(tmp_path / "first.csv",
                       "id,dt,amount,day,ts,note\n"
                       "1,2024-01-01,10.00,2024-01-01,2024-01-01T10:00:00,one\n"
                       "2,2024-01-01,20.5,2024-01-01,2024-01-01 11:00:00.250,\"\"\n"
                       "3,2024-01-02,,,,\n")
    more = write_text(tmp_path / "more.jsonl",
                      '{"id": 4, "dt": "2024-01-02", "amount": 4.25, "day": "2024-01-02", '
                      '"ts": "2024-01-02T00:00:01"}\n')
    out = lake.ok("write", "shop.orders", first, more)
    assert untimed(out).startswith("wrote 4 rows from 2 files to shop.orders in snapshot 1: ")
    rows = by_id(lake.jsonl("scan", "shop.orders"))
    assert rows[1]["amount"] == "10.00" and rows[1]["ts"] == "2024-01-01T10:00:00.000"
    assert rows[2]["amount"] == "20.50" and rows[2]["note"] == ""
    assert rows[2]["ts"] == "2024-01-01T11:00:00.250"
    assert rows[3] == {"id": 3, "dt": "2024-01-02", "amount": None, "day": None, "ts": None, "note": None}
    assert rows[4]["amount"] == "4.25" and rows[4]["day"] == "2024-01-02" and rows[4]["note"] is None

    # -D deletes, -U/+U updates, a missing _row_kind means +I
    changes = write_text(tmp_path / "changes.jsonl", "\n".join([
        '{"_row_kind": "-D", "id": 1, "dt": "2024-01-01"}',
        '{"_row_kind": "-U", "id": 2, "dt": "2024-01-01", "amount": "20.50"}',
        '{"_row_kind": "+U", "id": 2, "dt": "2024-01-01", "amount": "21.00", "note": "updated"}',
        '{"id": 5, "dt": "2024-01-03", "amount": "5"}',
    ]) + "\n")
    assert "in snapshot 2" in lake.ok("write", "shop.orders", changes)
    csv_changes = write_text(tmp_path / "changes.csv",
                             "_row_kind,id,dt\n-D,3,2024-01-02\n+I,6,2024-01-03\n,7,2024-01-03\n")
    assert "3 rows" in lake.ok("write", "shop.orders", csv_changes)
    rows = by_id(lake.jsonl("scan", "shop.orders"))
    assert sorted(rows) == [2, 4, 5, 6, 7]
    assert rows[2]["amount"] == "21.00" and rows[2]["note"] == "updated"
    assert rows[5]["amount"] == "5.00"
    assert lake.snapshot_ids("shop.orders") == [1, 2, 3]


def test_time_travel(lake: Lake, tmp_path: Path) -> None:
    create_orders(lake)
    lake.ok("write", "shop.orders", write_text(tmp_path / "a.csv", "id,dt,amount\n1,d1,1.00\n2,d1,2.00\n"))
    lake.ok("write", "shop.orders",
            write_text(tmp_path / "b.csv", "_row_kind,id,dt,amount\n-D,1,d1,\n+I,2,d1,2.50\n"))
    assert by_id(lake.jsonl("scan", "shop.orders", "--snapshot", "1")) == {
        1: {"id": 1, "dt": "d1", "amount": "1.00", "day": None, "ts": None, "note": None},
        2: {"id": 2, "dt": "d1", "amount": "2.00", "day": None, "ts": None, "note": None}}
    assert [r["amount"] for r in lake.jsonl("scan", "shop.orders", "--columns", "amount")] == ["2.50"]
    limited = lake.jsonl("scan", "shop.orders", "--snapshot", "1", "--columns", "amount,id", "--limit", "1")
    assert len(limited) == 1 and list(limited[0]) == ["amount", "id"]
    assert len(lake.jsonl("scan", "shop.orders", "--snapshot", "1", "--limit", "0")) == 0
    assert "snapshot 7" in lake.fails("scan", "shop.orders", "--snapshot", "7")
    assert "nope" in lake.fails("scan", "shop.orders", "--columns", "id,nope")
    files1 = lake.jsonl("files", "shop.orders", "--snapshot", "1")
    files2 = lake.jsonl("files", "shop.orders")
    assert len(files1) == 1 and len(files2) == 2
    assert "snapshot 9" in lake.fails("files", "shop.orders", "--snapshot", "9")


def test_snapshots_and_files(lake: Lake, tmp_path: Path) -> None:
    create_orders(lake)
    assert lake.ok("snapshots", "shop.orders") == ""
    assert lake.ok("files", "shop.orders") == ""
    assert lake.ok("scan", "shop.orders") == ""
    assert lake.ok("scan", "shop.orders", "--format", "csv") == '"id","dt","amount","day","ts","note"\n'
    src = tmp_path / "orders.parquet"
    pq.write_table(orders_arrow(), src)
    lake.ok("write", "shop.orders", str(src))
    lake.ok("write", "shop.orders", write_text(tmp_path / "x.jsonl", '{"id": 9, "dt": "2024-01-01"}\n'))

    snaps = lake.jsonl("snapshots", "shop.orders")
    assert [s["id"] for s in snaps] == [1, 2]
    assert list(snaps[0]) == ["id", "schema_id", "commit_kind", "time_millis", "total_record_count",
                              "delta_record_count", "commit_user", "commit_identifier"]
    assert snaps[0]["commit_kind"] == "APPEND" and snaps[0]["schema_id"] == 0
    assert (snaps[0]["total_record_count"], snaps[0]["delta_record_count"]) == (3, 3)
    assert (snaps[1]["total_record_count"], snaps[1]["delta_record_count"]) == (4, 1)
    table = lake.ok("snapshots", "shop.orders", "--format", "table").splitlines()
    assert table[0].split()[:3] == ["id", "schema_id", "commit_kind"] and len(table) == 4

    files = lake.jsonl("files", "shop.orders")
    for key in ("partition", "bucket", "file", "level", "rows", "min_seq", "max_seq", "size"):
        assert all(key in f for f in files), key
    assert {f["partition"] for f in files} == {"dt=2024-01-01", "dt=2024-01-02"}
    assert sum(f["rows"] for f in files) == 4
    assert all(f["level"] == 0 and f["size"] > 0 and f["min_seq"] <= f["max_seq"] for f in files)
    table_path = Path(lake.table("shop.orders").path)
    for f in files:
        assert (table_path / f["partition"] / f"bucket-{f['bucket']}" / f["file"]).is_file()
    text = lake.ok("files", "shop.orders", "--format", "table").splitlines()
    assert text[0].split()[:3] == ["partition", "bucket", "file"] and len(text) == 2 + len(files)


def test_append_table_and_unpartitioned_files(lake: Lake, tmp_path: Path) -> None:
    lake.ok("table", "create", "logs.events", "--schema", "ts TIMESTAMP(6), msg STRING")
    lake.ok("write", "logs.events",
            write_text(tmp_path / "e.csv", "ts,msg\n2024-01-01T00:00:00.000001,hello\n"))
    assert lake.jsonl("scan", "logs.events") == [{"ts": "2024-01-01T00:00:00.000001", "msg": "hello"}]
    assert [f["partition"] for f in lake.jsonl("files", "logs.events")] == [""]
    err = lake.fails("write", "logs.events", write_text(tmp_path / "d.csv", "_row_kind,ts,msg\n-D,,hello\n"))
    assert "append" in err
    assert lake.snapshot_ids("logs.events") == [1]


def test_nested_binary_and_time_values(lake: Lake, tmp_path: Path) -> None:
    lake.ok("table", "create", "db.n", "--schema",
            "id INT NOT NULL, b BYTES, t TIME, tz TIMESTAMP(3) WITH LOCAL TIME ZONE, tags ARRAY<STRING>, "
            "m MAP<STRING, DECIMAL(5,1)>, mi MAP<INT, STRING>, r ROW<x INT, d DATE>, f DOUBLE",
            "--primary-key", "id", "--option", "bucket=1")
    lines = [
        {"id": 1, "b": "aGVsbG8=", "t": "12:30:00.5", "tz": "2024-01-01T12:00:00+02:00", "tags": ["x", None],
         "m": {"a": "1.5", "b": None}, "mi": [[7, "seven"]], "r": {"x": 1, "d": "2024-02-29"}, "f": 1.5},
        {"id": 2, "tz": "2024-01-01 00:00:00", "tags": [], "m": {}, "mi": {"8": "eight"}, "r": None},
    ]
    src = write_text(tmp_path / "n.json", json.dumps(lines))  # a .json file may hold one array
    lake.ok("write", "db.n", src)
    rows = by_id(lake.jsonl("scan", "db.n"))
    assert rows[1] == {"id": 1, "b": "aGVsbG8=", "t": "12:30:00.500", "tz": "2024-01-01T10:00:00.000Z",
                       "tags": ["x", None], "m": {"a": "1.5", "b": None}, "mi": [[7, "seven"]],
                       "r": {"x": 1, "d": "2024-02-29"}, "f": 1.5}
    assert rows[2] == {"id": 2, "b": None, "t": None, "tz": "2024-01-01T00:00:00.000Z", "tags": [], "m": {},
                       "mi": [[8, "eight"]], "r": None, "f": None}
    arrow = lake.table("db.n").to_arrow().sort_by("id")
    assert arrow.column("b").to_pylist() == [b"hello", None]
    assert arrow.column("t").to_pylist() == [dt.time(12, 30, 0, 500000), None]

    # CSV output holds base64 and JSON texts, and reads back to the same rows
    out = tmp_path / "n.csv"
    lake.ok("scan", "db.n", "--format", "csv", "--output", str(out))
    lake.ok("table", "create", "db.n2", "--schema",
            "id INT NOT NULL, b BYTES, t TIME, tz TIMESTAMP(3) WITH LOCAL TIME ZONE, tags ARRAY<STRING>, "
            "m MAP<STRING, DECIMAL(5,1)>, mi MAP<INT, STRING>, r ROW<x INT, d DATE>, f DOUBLE",
            "--primary-key", "id", "--option", "bucket=1")
    lake.ok("write", "db.n2", str(out))
    assert by_id(lake.jsonl("scan", "db.n2")) == rows

    # non-finite floats are strings in JSON (JSON has no NaN)
    lake.ok("write", "db.n", write_text(tmp_path / "nan.csv", "id,f\n3,NaN\n4,-inf\n"))
    rows = by_id(lake.jsonl("scan", "db.n"))
    assert (rows[3]["f"], rows[4]["f"]) == ("NaN", "-Infinity")
    assert "[7, \"seven\"]" in lake.ok("scan", "db.n", "--format", "table")


def test_decimals_are_exact(lake: Lake, tmp_path: Path) -> None:
    schema = "id INT NOT NULL, v DECIMAL(10,2), big DECIMAL(38,10), l ARRAY<DECIMAL(4,1)>"
    lake.ok("table", "create", "db.d", "--schema", schema, "--primary-key", "id", "--option", "bucket=1")
    lake.ok("table", "create", "db.dm", "--schema", schema + ", m MAP<STRING, DECIMAL(3,1)>",
            "--primary-key", "id", "--option", "bucket=1")
    line = '{"id": 1, "v": 1e2, "big": 1234567890123456789012345678.0123456789, "l": [1, 2.5, "3.5"]}\n'
    for name in ("db.d", "db.dm"):  # the second goes through the map-rewriting path
        lake.ok("write", name, write_text(tmp_path / "ok.jsonl", line))
        assert lake.jsonl("scan", name, "--columns", "v,big,l") == [
            {"v": "100.00", "big": "1234567890123456789012345678.0123456789", "l": ["1.0", "2.5", "3.5"]}]
        # digits that do not fit are an error, never silently rounded
        for bad, column in (('{"id": 2, "v": 12.345}', "'v'"), ('{"id": 2, "v": "123456789"}', "'v'"),
                            ('{"id": 2, "l": [1.55]}', "'l'")):
            assert column in lake.fails("write", name, write_text(tmp_path / "bad.jsonl", bad + "\n"))
        assert "'v'" in lake.fails("write", name, write_text(tmp_path / "bad.csv", "id,v\n2,0.001\n"))
        assert lake.snapshot_ids(name) == [1]


# ---------------------------------------------------------------------------------------------
# compact + levels
# ---------------------------------------------------------------------------------------------

KV_OPTIONS = ("--option", "bucket=1", "--option", "num-sorted-run.compaction-trigger=2",
              "--option", "num-sorted-run.stop-trigger=2")


def write_rows(lake: Lake, tmp_path: Path, name: str, header: str, rows: list[str]) -> str:
    """Write CSV rows through `lake write`; returns its output."""
    n = len(list(tmp_path.glob("batch-*.csv")))
    return lake.ok("write", name, write_text(tmp_path / f"batch-{n}.csv", "\n".join([header, *rows]) + "\n"))


def scan_sorted(lake: Lake, name: str) -> list[dict]:
    return sorted(lake.jsonl("scan", name), key=lambda r: json.dumps(r, sort_keys=True))


def test_compact_and_levels(lake: Lake, tmp_path: Path) -> None:
    lake.ok("table", "create", "db.kv", "--schema", "id BIGINT NOT NULL, v STRING", "--primary-key", "id",
            *KV_OPTIONS)
    assert lake.ok("levels", "db.kv") == "no data files\n"
    assert lake.ok("levels", "db.kv", "--format", "jsonl") == ""
    assert untimed(lake.ok("compact", "db.kv")) == "nothing to compact in db.kv (TIME)\n"
    assert lake.snapshot_ids("db.kv") == []

    # one big batch, then two small ones overlapping it in key range (updates and a delete)
    write_rows(lake, tmp_path, "db.kv", "id,v", [f"{i},{'x' * 40}{i}" for i in range(3000)])
    write_rows(lake, tmp_path, "db.kv", "_row_kind,id,v", ["+I,5,five", "-D,7,", "+I,5000,new"])
    write_rows(lake, tmp_path, "db.kv", "id,v", ["6,six", "2999,last", "6000,newer"])

    files = lake.jsonl("levels", "db.kv", "--format", "jsonl")
    assert [(f["level"], f["run"]) for f in files] == [(0, 1), (0, 2), (0, 3)]
    assert list(files[0]) == ["partition", "bucket", "level", "run", "file", "size", "rows", "min_key",
                              "max_key", "min_seq", "max_seq"]
    seqs = [f["min_seq"] for f in files]
    assert seqs == sorted(seqs, reverse=True)  # newest first
    assert (files[0]["min_key"], files[0]["max_key"], files[0]["rows"]) == ([6], [6000], 3)
    assert (files[2]["min_key"], files[2]["max_key"], files[2]["rows"]) == ([0], [2999], 3000)
    assert files[0]["partition"] == "" and files[0]["bucket"] == 0
    assert {f["file"] for f in files} == {f["file"] for f in lake.jsonl("files", "db.kv")}
    text = lake.ok("levels", "db.kv").splitlines()
    assert text[0].startswith("bucket 0: 3 sorted runs, highest level 0 (max 2), ")
    assert "STALL" in text[1] and "stop trigger 2" in text[1]
    assert text[2].startswith("  L0  run 1: " + files[0]["file"])
    assert "3 rows" in text[2] and "keys [6 .. 6000]" in text[2] and "3,000 rows" in text[4]
    assert text[3].startswith("      run 2: ") and text[4].startswith("      run 3: ")
    assert len({line.index("seq ") for line in text[2:]}) == 1  # aligned
    before = scan_sorted(lake, "db.kv")
    assert len(before) == 3001  # 3000 + 5000 + 6000 - 7

    # a normal compaction: everything on level 0 goes up to the max level
    out = lake.ok("compact", "db.kv")
    assert out.startswith("compacted db.kv in snapshot 4: 3 files -> ")
    assert untimed(out).endswith(" in 1 bucket; wrote 3,001 rows, SIZE, 1 file, TIME\n")
    snaps = lake.jsonl("snapshots", "db.kv")
    assert [s["commit_kind"] for s in snaps] == ["APPEND", "APPEND", "APPEND", "COMPACT"]
    assert snaps[-1]["total_record_count"] == len(before)  # the delete is gone on the max level
    assert scan_sorted(lake, "db.kv") == before
    assert {f["level"] for f in lake.jsonl("levels", "db.kv", "--format", "jsonl")} == {2}

    # small batches again: the strategy merges them onto level 1, above the big run
    write_rows(lake, tmp_path, "db.kv", "id,v", ["1,one", "10,ten"])
    write_rows(lake, tmp_path, "db.kv", "_row_kind,id,v", ["-D,1,", "+I,20,twenty"])
    before = scan_sorted(lake, "db.kv")
    out = lake.ok("compact", "db.kv")
    assert "in snapshot 7: 2 files -> 1 file in 1 bucket" in out
    files = lake.jsonl("levels", "db.kv", "--format", "jsonl")
    assert [(f["level"], f["run"]) for f in files] == [(1, 1), (2, 2)]
    assert (files[0]["min_key"], files[0]["max_key"]) == ([1], [20])
    text = lake.ok("levels", "db.kv")
    assert "2 sorted runs, highest level 2 (max 2)" in text and "STALL" not in text
    assert "\n  L1  run 1: " in text and "\n  L2  run 2: " in text
    assert scan_sorted(lake, "db.kv") == before

    # a full compaction: one sorted run on the max level, rows unchanged; then nothing is left to do
    out = lake.ok("compact", "db.kv", "--full")
    assert untimed(out).startswith("compacted db.kv in snapshot 8: 2 files -> 1 file in 1 bucket; wrote ")
    assert scan_sorted(lake, "db.kv") == before
    files = lake.jsonl("levels", "db.kv", "--format", "jsonl")
    assert [(f["level"], f["run"]) for f in files] == [(2, 1)] and files[0]["rows"] == len(before)
    assert lake.ok("levels", "db.kv").startswith("bucket 0: 1 sorted run, highest level 2 (max 2), ")
    assert untimed(lake.ok("compact", "db.kv", "--full")) == "nothing to compact in db.kv (TIME)\n"
    kinds = [s["commit_kind"] for s in lake.jsonl("snapshots", "db.kv")]
    assert kinds == ["APPEND"] * 3 + ["COMPACT"] + ["APPEND"] * 2 + ["COMPACT"] * 2

    # time travel: the levels of an old snapshot
    old = lake.jsonl("levels", "db.kv", "--snapshot", "2", "--format", "jsonl")
    assert [(f["level"], f["run"]) for f in old] == [(0, 1), (0, 2)]
    assert "snapshot 99" in lake.fails("levels", "db.kv", "--snapshot", "99")
    assert "does not exist" in lake.fails("levels", "db.zzz")
    assert "does not exist" in lake.fails("compact", "db.zzz")
    assert "invalid choice" in lake.fails("levels", "db.kv", "--format", "xml", code=2)


def test_compact_one_partition(lake: Lake, tmp_path: Path) -> None:
    lake.ok("table", "create", "db.p", "--schema", "id BIGINT NOT NULL, day DATE NOT NULL, v STRING",
            "--primary-key", "id,day", "--partition-key", "day", *KV_OPTIONS)
    for n in range(3):
        write_rows(lake, tmp_path, "db.p", "id,day,v",
                   [f"{i},2024-01-0{1 + i % 2},v{n}" for i in range(n, 40 + n)])
    before = scan_sorted(lake, "db.p")
    files = lake.jsonl("files", "db.p")
    text = lake.ok("levels", "db.p")
    assert "day=2024-01-01 bucket 0: 3 sorted runs" in text
    assert "day=2024-01-02 bucket 0: 3 sorted runs" in text
    assert {f["partition"] for f in lake.jsonl("levels", "db.p", "--format", "jsonl")} == {
        "day=2024-01-01", "day=2024-01-02"}

    # errors: an unknown column, a value that is no DATE, a column twice: no new snapshot
    err = lake.fails("compact", "db.p", "--partition", "dt=2024-01-02")
    assert "'dt' is not a partition column" in err and "day" in err
    assert "DATE" in lake.fails("compact", "db.p", "--partition", "day=2024-13-45")
    assert "more than once" in lake.fails("compact", "db.p", "--partition", "day=2024-01-01",
                                          "--partition", "day=2024-01-02", code=2)
    assert "KEY=VALUE" in lake.fails("compact", "db.p", "--partition", "day", code=2)
    assert lake.snapshot_ids("db.p") == [1, 2, 3]
    # a partition that does not exist is an error naming the ones that do, in the form --partition takes
    err = lake.fails("compact", "db.p", "--partition", "day=2030-01-01")
    assert "table db.p has no such partition (its partitions: day=2024-01-01, day=2024-01-02)" in err
    assert lake.snapshot_ids("db.p") == [1, 2, 3]

    out = lake.ok("compact", "db.p", "--partition", "day=2024-01-02")
    assert untimed(out).startswith("compacted db.p in snapshot 4: 3 files -> 1 file in 1 bucket; wrote ")
    # `lake files` names the partition folders, with a DATE as its day number
    day1, day2 = "day=19723", "day=19724"
    assert {f["partition"] for f in files} == {day1, day2}
    after = lake.jsonl("files", "db.p")
    assert [f for f in after if f["partition"] == day1] == [f for f in files if f["partition"] == day1]
    assert [f["level"] for f in after if f["partition"] == day2] == [2]
    levels = lake.jsonl("levels", "db.p", "--format", "jsonl")
    assert [f["level"] for f in levels if f["partition"] == "day=2024-01-01"] == [0, 0, 0]
    assert [f["level"] for f in levels if f["partition"] == "day=2024-01-02"] == [2]
    assert scan_sorted(lake, "db.p") == before

    # an unpartitioned table takes no --partition
    lake.ok("table", "create", "db.u", "--schema", "id INT NOT NULL", "--primary-key", "id", *KV_OPTIONS)
    write_rows(lake, tmp_path, "db.u", "id", ["1"])
    assert "not partitioned" in lake.fails("compact", "db.u", "--partition", "id=1")
    assert lake.snapshot_ids("db.u") == [1]


def test_compact_append_table(lake: Lake, tmp_path: Path) -> None:
    lake.ok("table", "create", "logs.events", "--schema", "ts BIGINT, msg STRING")
    for n in range(3):
        write_rows(lake, tmp_path, "logs.events", "ts,msg", [f"{n},m{n}", f"{n + 10},m{n + 10}"])
    before = lake.jsonl("scan", "logs.events")
    text = lake.ok("levels", "logs.events")
    assert text.startswith("bucket 0: 3 files, highest level 0")
    assert "keys" not in text and "STALL" not in text
    files = lake.jsonl("levels", "logs.events", "--format", "jsonl")
    assert len(files) == 3 and all(f["min_key"] == [] and f["level"] == 0 for f in files)
    # three small files are fewer than compaction.min.file-num (5): nothing is due, but --full merges them
    assert untimed(lake.ok("compact", "logs.events")) == "nothing to compact in logs.events (TIME)\n"
    out = lake.ok("compact", "logs.events", "--full")
    assert untimed(out) == ("compacted logs.events in snapshot 4: 3 files -> 1 file in 1 bucket; wrote 6 rows, SIZE, "
                            "1 file, TIME\n")
    assert lake.jsonl("snapshots", "logs.events")[-1]["commit_kind"] == "COMPACT"
    assert lake.jsonl("scan", "logs.events") == before  # the same rows, in the same order
    assert [f["rows"] for f in lake.jsonl("levels", "logs.events", "--format", "jsonl")] == [6]


# ---------------------------------------------------------------------------------------------
# bad input: a message naming the problem, a non-zero exit, and nothing changed
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, content, message", [
    ("unknown.csv", "id,dt,bogus\n1,d,2\n", "bogus"),
    ("unknown.jsonl", '{"id": 1, "dt": "d", "bogus": 2}\n', "bogus"),
    ("nullkey.csv", "id,dt,amount\n,d,1.00\n", "'id'"),
    ("nullkey.jsonl", '{"id": null, "dt": "d"}\n', "'id'"),
    ("missingkey.jsonl", '{"id": 1}\n', "'dt'"),
    ("baddecimal.csv", "id,dt,amount\n1,d,abc\n", "'amount'"),
    ("baddate.jsonl", '{"id": 1, "dt": "d", "day": "31/01/2024"}\n', "'day'"),
    ("badkind.csv", "_row_kind,id,dt\n+X,1,d\n", "+X"),
    ("broken.jsonl", '{"id": 1, "dt": \n', "broken.jsonl"),
    ("broken.parquet", "not parquet", "broken.parquet"),
    ("ragged.csv", "id,dt\n1,d,3,4\n", "ragged.csv"),
])
def test_bad_input_changes_nothing(lake: Lake, tmp_path: Path, name: str, content: str, message: str) -> None:
    create_orders(lake)
    good = write_text(tmp_path / "good.csv", "id,dt,amount\n1,d,1.00\n")
    lake.ok("write", "shop.orders", good)
    before = lake.listing("shop.orders")
    bad = write_text(tmp_path / name, content)
    # alone, and after a good file in the same invocation
    for files in ([bad], [good, bad]):
        err = lake.fails("write", "shop.orders", *files)
        assert message in err, err
        assert lake.snapshot_ids("shop.orders") == [1]
        assert lake.listing("shop.orders") == before


def test_write_errors_before_reading(lake: Lake, tmp_path: Path) -> None:
    create_orders(lake)
    good = write_text(tmp_path / "good.csv", "id,dt\n1,d\n")
    assert "shop.missing" in lake.fails("write", "shop.missing", good)
    assert "nope.csv" in lake.fails("write", "shop.orders", str(tmp_path / "nope.csv"))
    txt = write_text(tmp_path / "x.txt", "id\n")
    assert "--input-format" in lake.fails("write", "shop.orders", txt, code=2)
    assert "--input-format" in lake.fails("write", "shop.orders", "-", code=2)
    assert lake.snapshot_ids("shop.orders") == []
    assert lake.ok("write", "shop.orders", write_text(tmp_path / "empty.csv", "id,dt\n")).endswith(
        "nothing to commit\n")
    assert lake.snapshot_ids("shop.orders") == []
    # --input-format overrides the extension
    assert "1 row " in lake.ok("write", "shop.orders", write_text(tmp_path / "y.txt", '{"id": 1, "dt": "d"}'),
                               "--input-format", "jsonl")
    # a named write needs the writer service, which a bare warehouse folder does not have
    err = lake.fails("write", "shop.orders", good, "--request-id", "r1", code=2)
    assert "--request-id needs a cluster" in err
    assert len(lake.snapshot_ids("shop.orders")) == 1


def test_failed_commit_deletes_written_files(lake: Lake, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    create_orders(lake)
    before = lake.listing("shop.orders")

    def conflict(self: FileStoreCommit, *args: object, **kwargs: object) -> None:
        raise CommitConflictError("simulated conflict")

    monkeypatch.setattr(FileStoreCommit, "commit", conflict)
    err = lake.fails("write", "shop.orders", write_text(tmp_path / "a.csv", "id,dt\n1,a\n2,b\n3,c\n"))
    assert "simulated conflict" in err
    after = [p for p in lake.listing("shop.orders") if p.endswith(".parquet")]
    assert after == [] and lake.snapshot_ids("shop.orders") == []
    assert set(before) <= set(lake.listing("shop.orders"))


def test_scan_output_errors(lake: Lake, tmp_path: Path) -> None:
    create_orders(lake)
    err = lake.fails("scan", "shop.orders", "--output", str(tmp_path / "no" / "such" / "dir.jsonl"))
    assert "dir.jsonl" in err
    assert "table 'shop.zzz' does not exist" in lake.fails("scan", "shop.zzz")
    assert "does not exist" in lake.fails("snapshots", "shop.zzz")
    assert "does not exist" in lake.fails("files", "shop.zzz")
    assert "does not exist" in lake.fails("table", "describe", "shop.zzz")


# ---------------------------------------------------------------------------------------------
# the console script
# ---------------------------------------------------------------------------------------------

def run_lake(*args: str, warehouse: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LAKE_WAREHOUSE=str(warehouse))
    return subprocess.run([str(LAKE), *args], input=stdin, capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.mark.integration
def test_console_script(tmp_path: Path) -> None:
    assert LAKE.exists(), f"{LAKE} is missing: pip install -e . to create the console script"
    wh = tmp_path / "wh"
    r = run_lake("--version", warehouse=wh)
    assert r.returncode == 0 and "lsmlake" in r.stdout
    r = run_lake("table", "create", "shop.orders", "--schema", ORDERS_SCHEMA, "--primary-key", "id,dt",
                 "--partition-key", "dt", "--option", "bucket=2", warehouse=wh)
    assert r.returncode == 0, r.stderr
    rows = ('{"id": 1, "dt": "2024-01-01", "amount": "3.10", "ts": "2024-01-01T00:00:00"}\n'
            '{"id": 2, "dt": "2024-01-02"}\n')
    r = run_lake("write", "shop.orders", "-", "--input-format", "jsonl", warehouse=wh, stdin=rows)
    assert r.returncode == 0, r.stderr
    assert untimed(r.stdout) == "wrote 2 rows from 1 file to shop.orders in snapshot 1: 2 data files, SIZE, TIME\n"
    r = run_lake("scan", "shop.orders", warehouse=wh)
    assert r.returncode == 0, r.stderr
    got = by_id([json.loads(x) for x in r.stdout.splitlines()])
    assert got[1]["amount"] == "3.10" and got[1]["ts"] == "2024-01-01T00:00:00.000"
    assert got[2]["amount"] is None
    # an error: one line on stderr, exit code 1, no traceback, nothing committed
    r = run_lake("write", "shop.orders", "-", "--input-format", "csv", warehouse=wh,
                 stdin="id,dt,zzz\n1,a,1\n")
    assert r.returncode == 1
    assert r.stderr.startswith("lake: error: ") and "zzz" in r.stderr and "Traceback" not in r.stderr
    assert len(run_lake("snapshots", "shop.orders", warehouse=wh).stdout.splitlines()) == 1
    r = run_lake("scan", "shop.orders", "--bogus", warehouse=wh)
    assert r.returncode == 2 and "lake: error: " in r.stderr
    # python -m lsmlake.cli.main works too
    r = subprocess.run([sys.executable, "-m", "lsmlake.cli.main", "--warehouse", str(wh), "table", "list", "shop"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout == "table\n------\norders\n"


def test_changelog_command(lake: Lake, tmp_path: Path) -> None:
    lake.ok("table", "create", "shop.events", "--schema", "k INT NOT NULL, v STRING", "--primary-key", "k",
            "--option", "bucket=1", "--option", "changelog-producer=lookup")
    lake.ok("write", "shop.events", write_text(tmp_path / "a.csv", "k,v,_row_kind\n1,a,+I\n2,b,+I\n"))
    lake.ok("compact", "shop.events")
    lake.ok("write", "shop.events", write_text(tmp_path / "b.csv", "k,v,_row_kind\n1,a2,+U\n2,,-D\n"))
    lake.ok("compact", "shop.events")
    rows = [json.loads(line) for line in lake.ok("changelog", "shop.events").splitlines()]
    assert [(r["snapshot_id"], r["row_kind"], r["k"], r["v"]) for r in rows] == [
        (2, "+I", 1, "a"), (2, "+I", 2, "b"), (4, "-U", 1, "a"), (4, "+U", 1, "a2"), (4, "-D", 2, "b")]
    later = [json.loads(line) for line in lake.ok("changelog", "shop.events", "--from-snapshot", "3").splitlines()]
    assert {r["snapshot_id"] for r in later} == {4}
    assert "does not exist" in lake.fails("changelog", "shop.nope")


def test_delete_command_and_deletion_counts_in_files(lake: Lake, tmp_path: Path) -> None:
    lake.ok("table", "create", "shop.log", "--schema", "id BIGINT, day DATE, msg STRING",
            "--option", "deletion-vectors.enabled=true")
    lake.ok("write", "shop.log", write_text(tmp_path / "a.csv",
                                            "id,day,msg\n1,2024-01-01,a\n2,2024-01-01,b\n3,2024-01-02,c\n"))
    out = lake.ok("delete", "shop.log", "--where", "day=2024-01-01", "--where", "id=2")
    assert "deleted" in out
    assert sorted(json.loads(x)["id"] for x in lake.ok("scan", "shop.log").splitlines()) == [1, 3]
    files = [json.loads(x) for x in lake.ok("files", "shop.log").splitlines()]
    assert sum(f["dv_deleted"] for f in files) == 1
    assert "nothing deleted" in lake.ok("delete", "shop.log", "--where", "id=2")
    assert "'someday' is not a valid date" in lake.fails("delete", "shop.log", "--where", "day=someday")
    assert "'nope' is not a column" in lake.fails("delete", "shop.log", "--where", "nope=1")


def test_progress_is_shown_on_a_terminal_only(capsys: pytest.CaptureFixture[str]) -> None:
    p = Progress("writing db.t", 200)
    assert not p.enabled  # stderr is not a terminal under pytest
    p.enabled = True
    for t in with_progress([pa.table({"x": list(range(100))})] * 2, p):
        assert t.num_rows == 100
    err = capsys.readouterr().err
    assert "writing db.t [" in err and "/200 rows" in err and err.endswith("\r")


def test_levels_and_files_of_a_dynamic_bucket_table(lake: Lake, tmp_path: Path) -> None:
    """`lake write` assigns keys to buckets through the HASH index; `lake levels` shows each bucket's keys, and a
    key written to another partition (cross-partition upsert) moves there."""
    lake.ok("table", "create", "db.dyn", "--schema", "id BIGINT NOT NULL, v STRING, dt STRING NOT NULL",
            "--primary-key", "id", "--partition-key", "dt", "--option", "bucket=-1",
            "--option", "dynamic-bucket.target-row-num=3")
    write_rows(lake, tmp_path, "db.dyn", "id,v,dt", ["1,a,x", "2,b,x", "3,c,x", "4,d,x", "5,e,y"])
    write_rows(lake, tmp_path, "db.dyn", "id,v,dt", ["1,z,y"])
    assert sorted((r["id"], r["dt"]) for r in scan_sorted(lake, "db.dyn")) == [(1, "y"), (2, "x"), (3, "x"),
                                                                               (4, "x"), (5, "y")]
    heads = [line for line in lake.ok("levels", "db.dyn").splitlines() if " bucket " in line]
    assert [h.split(":")[0] for h in heads] == ["dt=x bucket 0", "dt=x bucket 1", "dt=y bucket 0"]
    assert [h.rsplit(", ", 1)[1] for h in heads] == ["3 keys in its HASH index", "1 key in its HASH index",
                                                     "2 keys in its HASH index"]
    assert {(f["partition"], f["bucket"]) for f in lake.jsonl("files", "db.dyn")} == {("dt=x", 0), ("dt=x", 1),
                                                                                       ("dt=y", 0)}


@pytest.mark.parametrize("through_catalog", [False, True])
def test_rescale_a_postpone_table(lake: Lake, tmp_path: Path, through_catalog: bool) -> None:
    """`lake rescale` rewrites the matching partitions into N buckets in one OVERWRITE snapshot; the rows stay
    what they were (pypaimon reads them too); through a catalog service the commit goes through it."""
    from contextlib import nullcontext

    from tests.support.local_server import local_server

    lake.ok("table", "create", "db.p", "--schema", "id BIGINT NOT NULL, v STRING, dt STRING NOT NULL",
            "--primary-key", "id,dt", "--partition-key", "dt", "--option", "bucket=-2",
            "--option", "postpone.default-bucket-num=2")
    write_rows(lake, tmp_path, "db.p", "id,v,dt", [f"{i},v{i},{'x' if i % 3 else 'y'}" for i in range(60)])
    assert lake.ok("rescale", "db.p", "--buckets", "3") == "nothing to rescale in db.p (no partition has buckets yet)\n"
    lake.ok("compact", "db.p")
    before = scan_sorted(lake, "db.p")
    next_id = lake.snapshot_ids("db.p")[-1] + 1
    with local_server(str(lake.warehouse)) if through_catalog else nullcontext() as cat:
        extra = ["--catalog-service", f"127.0.0.1:{cat.server.port}"] if cat is not None else []
        assert lake.ok(*extra, "rescale", "db.p", "--buckets", "4", "--partition", "dt=x") \
            == f"rescaled db.p in snapshot {next_id}: 1 partition now has 4 buckets\n"
    table = lake.table("db.p")
    assert {(table.partition_values(s.partition)[0], s.total_buckets) for s in table.plan()} == {("x", 4), ("y", 2)}
    assert table.snapshots.latest().commit_kind == "OVERWRITE"
    assert ("lake-rescale" in table.snapshots.latest().commit_user) == through_catalog  # the catalog's commit
    assert scan_sorted(lake, "db.p") == before
    from pypaimon import CatalogFactory
    rb = CatalogFactory.create({"warehouse": str(lake.warehouse)}).get_table("db.p").new_read_builder()
    assert len(rb.new_read().to_arrow(rb.new_scan().plan().splits())) == 60
    lake.ok("table", "create", "db.fixed", "--schema", "id BIGINT NOT NULL", "--primary-key", "id",
            "--option", "bucket=2")
    assert "rescale is for postpone-bucket tables" in lake.fails("rescale", "db.fixed", "--buckets", "3")


def test_health_ranks_the_tables(lake: Lake, tmp_path: Path) -> None:
    """`lake health`: the table past its stop trigger first (STALLED), then by score; plans come from the catalog's
    store when the warehouse has one (here none: zero plans)."""
    for name, writes in (("db.calm", 1), ("db.busy", 4)):
        lake.ok("table", "create", name, "--schema", "id BIGINT NOT NULL, v STRING", "--primary-key", "id",
                "--option", "bucket=1", "--option", "write-only=true", "--option", "num-sorted-run.stop-trigger=3")
        for i in range(writes):
            write_rows(lake, tmp_path, name, "id,v", [f"{i * 10 + j},x" for j in range(20)])
    got = lake.jsonl("health", "--format", "jsonl")
    assert [(r["table"], r["stalled"], r["runs"], r["level0_files"], r["requested"], r["error"]) for r in got] == [
        ("db.busy", True, 4, 4, 0, None), ("db.calm", False, 1, 1, 0, None)]
    assert got[0]["score"] < got[1]["score"] <= 100 and got[0]["lag_s"] >= 0
    # the band, the triggers the runs are measured against and why the table lost points
    assert [(r["severity"], r["triggers"]) for r in got] == [("bad", "runs 5..3"), ("good", "runs 5..3")]
    assert got[0]["reasons"][0].startswith("stalled: 4 sorted runs") and got[1]["reasons"] == []
    text = lake.ok("health", "db.calm")
    assert text.splitlines()[0].split()[:4] == ["table", "score", "severity", "stalled"] and "db.calm" in text

    lake.ok("table", "create", "db.log", "--schema", "id BIGINT, v STRING", "--option", "bucket=-1",
            "--option", "write-only=true")
    for i in range(3):
        write_rows(lake, tmp_path, "db.log", "id,v", [f"{i},x"])
    [log] = lake.jsonl("health", "db.log", "--format", "jsonl")
    # an append table: no runs, its small files against compaction.min.file-num .. max.file-num
    assert (log["runs"], log["triggers"], log["stalled"]) == (None, "files 5..50", False)


def test_a_catalog_service_without_a_compactor_compacts_nothing_here(lake: Lake, tmp_path: Path) -> None:
    """With only `--catalog-service` given, `lake compact` does not compact from the CLI process: it fails naming
    the flag that is missing, and the table is left as it was; `lake write` commits through the catalog, as one
    snapshot. `lake delete`, which cannot go through the catalog, says that it commits itself."""
    from tests.support.local_server import local_server

    lake.ok("table", "create", "db.t", "--schema", "id BIGINT NOT NULL, v STRING", "--primary-key", "id",
            "--option", "bucket=1")
    lake.ok("table", "create", "db.a", "--schema", "id BIGINT, v STRING", "--option", "bucket=-1",
            "--option", "deletion-vectors.enabled=true")
    for name in ("db.t", "db.a"):
        write_rows(lake, tmp_path, name, "id,v", [f"{i},x" for i in range(3)])
        write_rows(lake, tmp_path, name, "id,v", [f"{i},y" for i in range(3)])
    before = (lake.snapshot_ids("db.t"), lake.listing("db.t"))
    rows = write_text(tmp_path / "more.csv", "id,v\n7,z\n")
    with local_server(str(lake.warehouse)) as cat:
        extra = ["--catalog-service", f"127.0.0.1:{cat.server.port}"]
        assert "pass --compactor-service HOST:PORT" in lake.fails(*extra, "compact", "db.t", "--full", code=2)
        assert (lake.snapshot_ids("db.t"), lake.listing("db.t")) == before
        out = lake.ok(*extra, "write", "db.t", rows)
        assert untimed(out) == ("wrote 1 row from 1 file to db.t in snapshot 3, one commit through the catalog "
                                "service: 1 data file, SIZE, TIME\n")
        code, out, err = lake(*extra, "delete", "db.a", "--where", "id=1")
        assert code == 0 and "deleted the matching rows of db.a in snapshot 3" in out, (out, err)
        assert f"not through the catalog service 127.0.0.1:{cat.server.port}" in err, err
    latest = lake.table("db.t").snapshots.latest()
    assert latest is not None and latest.commit_user.startswith("lake-write-")
    assert sorted(r["id"] for r in lake.jsonl("scan", "db.t")) == [0, 1, 2, 7]
    assert sorted(r["id"] for r in lake.jsonl("scan", "db.a")) == [0, 0, 2, 2]
