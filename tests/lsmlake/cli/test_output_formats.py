"""One output vocabulary: every listing command takes `--format table|jsonl|csv|json`, each giving the same
records; tables write times as ISO 8601, nulls as empty cells (never `null`) and whole numbers with thousands
separators, in every table."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from pathlib import Path

import pytest

from tests.lsmlake.cli.conftest import Lake

LISTINGS = [["table", "list", "db"], ["snapshots", "db.t"], ["files", "db.t"], ["levels", "db.t"],
            ["health"], ["health", "db.t"]]


@pytest.fixture
def table(lake: Lake, tmp_path: Path) -> Lake:
    lake.ok("table", "create", "db.t", "--schema", "id BIGINT NOT NULL, v STRING", "--primary-key", "id",
            "--option", "bucket=1")
    for n, rows in enumerate((1500, 10)):
        path = tmp_path / f"rows-{n}.csv"
        path.write_text("id,v\n" + "".join(f"{i},{'' if i % 2 else 'x'}\n" for i in range(rows)))
        lake.ok("write", "db.t", str(path))
    return lake


def table_rows(text: str) -> list[list[str]]:
    """The cells of an aligned table (split on runs of two spaces), header first, the rule left out."""
    lines = text.splitlines()
    assert set(lines[1]) <= {"-", " "}
    return [re.split(r"\s{2,}", line.strip()) for i, line in enumerate(lines) if i != 1]


@pytest.mark.parametrize("args", LISTINGS, ids=lambda a: " ".join(a))
def test_every_listing_gives_the_same_records_in_every_format(table: Lake, args: list[str]) -> None:
    records = table.jsonl(*args, "--format", "jsonl")
    assert records
    assert json.loads(table.ok(*args, "--format", "json")) == records
    got = list(csv.DictReader(io.StringIO(table.ok(*args, "--format", "csv"))))
    assert [list(r) for r in got] == [list(r) for r in records]
    for r, c in zip(records, got, strict=True):
        assert c == {k: "" if v is None else json.dumps(v) if isinstance(v, dict | list)
                     else str(v).lower() if isinstance(v, bool) else str(v) for k, v in r.items()}
    text = table.ok(*args, "--format", "table") if args[0] != "levels" else ""
    if text:
        assert "null" not in text and "None" not in text
        header, *rows = table_rows(text)
        assert header == list(records[0])


def test_tables_write_times_in_iso_8601_and_thousands_separators(table: Lake) -> None:
    snapshots = table.jsonl("snapshots", "db.t")
    header, *rows = table_rows(table.ok("snapshots", "db.t", "--format", "table"))
    shown = [dict(zip(header, r, strict=True)) for r in rows]
    for s, cells in zip(snapshots, shown, strict=True):
        when = dt.datetime.fromtimestamp(s["time_millis"] / 1000, tz=dt.UTC)
        assert cells["time_millis"] == when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert [c["total_record_count"] for c in shown] == ["1,500", "1,510"]
    assert [c["delta_record_count"] for c in shown] == ["1,500", "10"]
    files = table_rows(table.ok("files", "db.t", "--format", "table"))
    assert "1,500" in files[1] or "1,500" in files[2]
    levels = table.ok("levels", "db.t")
    assert "1,500 rows" in levels  # the picture counts with separators too


def test_a_null_is_an_empty_cell_in_a_table(table: Lake) -> None:
    header, *rows = table_rows(table.ok("scan", "db.t", "--format", "table", "--where", "id < 2"))
    assert header == ["id", "v"] and rows == [["0", "x"], ["1"]]  # row 1's v is null: an empty cell
