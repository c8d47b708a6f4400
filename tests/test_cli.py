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
from lsmlake import cli
from lsmlake.catalog import FileSystemCatalog
from lsmlake.errors import CommitConflictError
from lsmlake.commit import FileStoreCommit
from lsmlake.table import FileStoreTable

LAKE = Path(sys.executable).parent / "lake"

ORDERS_SCHEMA = "id BIGINT NOT NULL, dt STRING, amount DECIMAL(10,2), day DATE, ts TIMESTAMP(3), note STRING"


class Lake:
    """Runs `lake --warehouse WH ...` in-process and captures its output."""

    def __init__(self, warehouse: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.warehouse = warehouse
        self.capsys = capsys

    def __call__(self, *args: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = cli.main(["--warehouse", str(self.warehouse), *args])
        out, err = self.capsys.readouterr()
        assert "Traceback" not in err
        return code, out, err

    def ok(self, *args: str) -> str:
        code, out, err = self(*args)
        assert code == 0, err
        assert err == ""
        return out

    def fails(self, *args: str, code: int = 1) -> str:
        got, out, err = self(*args)
        assert got == code, (got, out, err)
        assert err.strip().splitlines()[-1].startswith("lake: error: "), err
        return err

    def jsonl(self, *args: str) -> list[dict]:
        return [json.loads(line) for line in self.ok(*args).splitlines()]

    def table(self, identifier: str) -> FileStoreTable:
        return FileSystemCatalog(str(self.warehouse)).get_table(identifier)

    def snapshot_ids(self, identifier: str) -> list[int]:
        return self.table(identifier).snapshots.ids()

    def listing(self, identifier: str) -> list[str]:
        root = Path(self.table(identifier).path)
        return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def lake(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Lake:
    return Lake(tmp_path / "warehouse", capsys)


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
                 ["table", "drop"], ["write"], ["scan"], ["snapshots"], ["files"]):
        assert cli.main([*args, "--help"]) == 0
        out = capsys.readouterr().out
        assert "usage: lake" in out and "examples:" in out, args
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
    assert capsys.readouterr().out == "t\n"
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
    assert lake.ok("table", "list", "shop").split() == ["events", "orders"]
    assert lake.jsonl("table", "list", "shop", "--format", "jsonl") == [{"table": "events"},
                                                                        {"table": "orders"}]
    assert json.loads(lake.ok("table", "list", "shop", "--format", "json")) == ["events", "orders"]

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
    assert lake.ok("table", "list", "shop").split() == ["orders"]
    assert "does not exist" in lake.fails("table", "drop", "shop.events")
    lake.ok("table", "drop", "shop.events", "--if-exists")


@pytest.mark.parametrize("args, message", [
    (["--schema", "id FOOBAR"], "FOOBAR"),
    (["--schema", "id BIGINT", "--option", "no.such.option=1"], "no.such.option"),
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
    assert out == "wrote 3 rows from 1 file to shop.orders in snapshot 1\n"

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
    assert lake.ok("scan", "shop.orders", "--format", "parquet", "--output", str(target)) == ""
    got = pq.read_table(target).sort_by("id")
    expected = lake.table("shop.orders").to_arrow().sort_by("id")
    assert got.schema.names == expected.schema.names
    assert got.to_pylist() == expected.to_pylist() == orders_arrow().to_pylist()
    assert got.schema.field("amount").type == pa.decimal128(10, 2)

    # jsonl and csv to a file
    target = tmp_path / "out.jsonl"
    assert lake.ok("scan", "shop.orders", "--output", str(target)) == ""
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
    assert out == "wrote 4 rows from 2 files to shop.orders in snapshot 1\n"
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
    assert r.stdout == "wrote 2 rows from 1 file to shop.orders in snapshot 1\n"
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
    # python -m lsmlake.cli works too
    r = subprocess.run([sys.executable, "-m", "lsmlake.cli", "--warehouse", str(wh), "table", "list", "shop"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout == "orders\n"
