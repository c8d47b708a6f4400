"""Partition directory names: escaping, Java value strings, and the golden warehouse's directories."""

from __future__ import annotations

import json
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lsmlake.format import types as T
from lsmlake.format.binary_row import deserialize_row
from lsmlake.format.partition import (
    DEFAULT_PARTITION_NAME,
    escape_path_name,
    partition_path,
    partition_value_string,
    unescape_path_name,
)
from lsmlake.format.type_json import type_from_json
from lsmlake.format.types import DataType
from tests.support.golden import GOLDEN_WAREHOUSE

GOLDEN = GOLDEN_WAREHOUSE / "db.db"
needs_golden = pytest.mark.skipif(not GOLDEN.is_dir(), reason="golden warehouse not available")

STRING = T.string_type()
INT = DataType(T.INT)


def test_escape_example() -> None:
    assert escape_path_name("a/b c=d%") == "a%2Fb c%3Dd%25"
    assert unescape_path_name("a%2Fb c%3Dd%25") == "a/b c=d%"


def test_escaped_characters() -> None:
    assert escape_path_name("\x00\x1f\x7f") == "%00%1F%7F"
    assert escape_path_name("\"#%'*/:=?\\{}[]^") == "%22%23%25%27%2A%2F%3A%3D%3F%5C%7B%7D%5B%5D%5E"
    assert escape_path_name("plain -_.,;!@$&()+~ ü 日本") == "plain -_.,;!@$&()+~ ü 日本"
    assert unescape_path_name("%zz%4") == "%zz%4"  # not two hex digits: kept as is


@given(st.text())
def test_unescape_inverts_escape(s: str) -> None:
    assert unescape_path_name(escape_path_name(s)) == s


@pytest.mark.parametrize("value,t,expected", [
    (True, DataType(T.BOOLEAN), "true"),
    (False, DataType(T.BOOLEAN), "false"),
    (-5, DataType(T.TINYINT), "-5"),
    (2 ** 40, DataType(T.BIGINT), "1099511627776"),
    (1.5, DataType(T.DOUBLE), "1.5"),
    (100.0, DataType(T.DOUBLE), "100.0"),
    (1e7, DataType(T.DOUBLE), "1.0E7"),
    (0.001, DataType(T.DOUBLE), "0.001"),
    (0.0001, DataType(T.DOUBLE), "1.0E-4"),
    (-0.0, DataType(T.DOUBLE), "-0.0"),
    (float("nan"), DataType(T.DOUBLE), "NaN"),
    (float("-inf"), DataType(T.DOUBLE), "-Infinity"),
    (0.1, DataType(T.FLOAT), "0.1"),  # shortest float32 digits, not 0.10000000149011612
    (3.4028234663852886e38, DataType(T.FLOAT), "3.4028235E38"),  # Float.MAX_VALUE
    (Decimal("12.34"), DataType(T.DECIMAL, precision=10, scale=2), "12.34"),
    (Decimal("-0.5"), DataType(T.DECIMAL, precision=10, scale=2), "-0.50"),
    (Decimal("0"), DataType(T.DECIMAL, precision=10, scale=3), "0.000"),
    (Decimal("12345678901234567890.123456789"), DataType(T.DECIMAL, precision=38, scale=9),
     "12345678901234567890.123456789"),
    ("a b/c", STRING, "a b/c"),
    (b"\x01\x02", T.bytes_type(), "b'\\x01\\x02'"),
    (date(2024, 2, 29), DataType(T.DATE), "19782"),
    (date(1969, 12, 31), DataType(T.DATE), "-1"),
    (time(1, 0, 0, 5000), DataType(T.TIME), "3600005"),
    (datetime(2024, 1, 2, 3, 4, 5, 678000), DataType(T.TIMESTAMP, precision=3), "2024-01-02T03:04:05.678"),
    (datetime(2024, 1, 1), DataType(T.TIMESTAMP, precision=6), "2024-01-01T00:00"),
    (datetime(2024, 1, 1, 0, 0, 7), DataType(T.TIMESTAMP, precision=6), "2024-01-01T00:00:07"),
    (datetime(2024, 1, 1, 0, 0, 0, 123456), DataType(T.TIMESTAMP, precision=6), "2024-01-01T00:00:00.123456"),
    (datetime(2024, 1, 1, 0, 0, 0, 123456), DataType(T.TIMESTAMP, precision=3), "2024-01-01T00:00:00.123"),
    (datetime(1, 1, 1), DataType(T.TIMESTAMP, precision=3), "0001-01-01T00:00"),
    (datetime(2024, 1, 1, 8, tzinfo=timezone(timedelta(hours=8))), DataType(T.TIMESTAMP_LTZ, precision=3),
     "2024-01-01T00:00"),
    (None, STRING, None),
])
def test_value_strings(value: Any, t: DataType, expected: str | None) -> None:
    assert partition_value_string(value, t) == expected


def test_nanosecond_timestamp_string() -> None:
    nanos = pa.scalar(1704067200123456789, pa.timestamp("ns")).as_py()
    text = partition_value_string(nanos, DataType(T.TIMESTAMP, precision=9))
    assert text == "2024-01-01T00:00:00.123456789"


def test_partition_path_defaults() -> None:
    types = [STRING, INT]
    assert partition_path(["2024-01-01", 3], ["dt", "h"], types) == "dt=2024-01-01/h=3"
    for blank in (None, "", "   ", "\t\n"):
        assert partition_path([blank, None], ["dt", "h"], types) == \
            "dt=__DEFAULT_PARTITION__/h=__DEFAULT_PARTITION__"
    assert partition_path([None], ["dt"], [STRING], default_name="NULLP") == "dt=NULLP"
    # Java's Character.isWhitespace is false for a no-break space.
    assert partition_path(["\u00a0"], ["dt"], [STRING]) == "dt=\u00a0"
    assert partition_path(["x=y"], ["a/b"], [STRING]) == "a%2Fb=x%3Dy"
    assert partition_path([], [], []) == ""


# ---------------------------------------------------------------------------------------------
# Golden warehouse directories
# ---------------------------------------------------------------------------------------------

def golden_partitions(table: str) -> list[tuple[list[Any], str, Path]]:
    """(decoded _PARTITION values, expected directory, data file) for every ADD entry of the table."""
    tdir = GOLDEN / table
    d = json.loads((tdir / "schema" / "schema-0").read_text())
    types = {f["name"]: type_from_json(f["type"]) for f in d["fields"]}
    keys = d["partitionKeys"]
    out = []
    for path in sorted((tdir / "manifest").glob("manifest-*")):
        if path.name.startswith("manifest-list-"):
            continue
        with path.open("rb") as f:
            for entry in fastavro.reader(f):
                assert isinstance(entry, dict)
                if entry["_KIND"] != 0:
                    continue
                values = deserialize_row(entry["_PARTITION"], [types[k] for k in keys])
                rel = partition_path(values, keys, [types[k] for k in keys])
                bucket_dir = tdir / rel / f"bucket-{entry['_BUCKET']}"
                out.append((values, rel, bucket_dir / entry["_FILE"]["_FILE_NAME"]))
    return out


@needs_golden
def test_types_t_directory() -> None:
    ((values, rel, data_file),) = golden_partitions("types_t")
    assert values[2] == "a b/c" and values[8] == b"\x01\x02"
    assert rel == ("pi=7/pb=1099511627776/ps=a b%2Fc/pd=19782/pts=2024-01-02T03%3A04%3A05.678/pdec=12.34"
                   "/pdbl=1.5/pbool=true/pbin=b%27%5Cx01%5Cx02%27")
    assert data_file.is_file()


@needs_golden
def test_nullpart_t_directories() -> None:
    found = {(tuple(values), rel) for values, rel, data_file in golden_partitions("nullpart_t")
             if data_file.is_file()}
    assert found == {((None, None), "ps=__DEFAULT_PARTITION__/pi=__DEFAULT_PARTITION__"),
                     (("q", 3), "ps=q/pi=3")}


@needs_golden
def test_append_t_directories() -> None:
    found = {(values[0], rel) for values, rel, data_file in golden_partitions("append_t")
             if data_file.is_file()}
    # null and "" are different partitions in _PARTITION but share the default directory.
    assert found == {(None, "p=" + DEFAULT_PARTITION_NAME), ("", "p=" + DEFAULT_PARTITION_NAME),
                     ("x", "p=x"), ("a/b c=d%", "p=a%2Fb c%3Dd%25")}


@needs_golden
@pytest.mark.parametrize("table", ["overwrite_t", "dv_append_t", "append_bucket_t", "alltypes_t"])
def test_other_golden_directories_exist(table: str) -> None:
    entries = golden_partitions(table)
    assert entries and all(data_file.is_file() for _, _, data_file in entries)


@pytest.mark.parametrize("dv", [False, True])
def test_partition_columns_read_back_from_the_partition_value(tmp_path: Path, dv: bool) -> None:
    """Reads build partition columns from the partition's value instead of decoding them: every type,
    a null partition, deletion vectors and projections of only partition columns return the written rows."""
    from lsmlake.catalog.filesystem import FileSystemCatalog
    from lsmlake.table.compact import compact_table

    cat = FileSystemCatalog(str(tmp_path))
    cat.create_database("db")
    opts = {"bucket": "2", **({"deletion-vectors.enabled": "true"} if dv else {})}
    t = cat.create_table("db.t", "id BIGINT NOT NULL, i INT NOT NULL, d DATE NOT NULL, m DECIMAL(10,2) NOT NULL, "
                         "ts TIMESTAMP(3) NOT NULL, s STRING NOT NULL, v STRING",
                         partition_keys=["i", "d", "m", "ts", "s"], primary_keys=["id", "i", "d", "m", "ts", "s"],
                         options=opts)
    parts = [(1, date(2026, 1, 2), Decimal("3.50"), datetime(2026, 1, 2, 3, 4, 5, 6000), "a/b c"),
             (-7, date(1970, 1, 1), Decimal("-0.01"), datetime(1999, 12, 31), "")]
    rows = [{"id": n, "i": p[0], "d": p[1], "m": p[2], "ts": p[3], "s": p[4], "v": f"v{n}"}
            for n in range(40) for p in parts[n % 2:n % 2 + 1]]
    t.write_arrow(pa.Table.from_pylist(rows, schema=t.schema.arrow_schema))
    if dv:
        compact_table(t, full=True)
        upd = [dict(r, v="new") for r in rows[::3]]
        t.write_arrow(pa.Table.from_pylist(upd, schema=t.schema.arrow_schema))
        compact_table(t)  # lookup compaction: the old rows are marked in deletion vectors
        assert any(s.dv_index is not None for s in t.plan())
        for r in rows[::3]:
            r["v"] = "new"

    def key(r: dict[str, Any]) -> Any:
        return r["id"]

    assert sorted(t.to_arrow().to_pylist(), key=key) == rows
    only = t.to_arrow(projection=["s", "d"]).to_pylist()
    assert sorted((r["s"], r["d"]) for r in only) == sorted((r["s"], r["d"]) for r in rows)
    assert sorted(t.to_arrow(predicate={"i": -7}).to_pylist(), key=key) == [r for r in rows if r["i"] == -7]


def test_null_partition_reads_as_null(tmp_path: Path) -> None:
    from lsmlake.catalog.filesystem import FileSystemCatalog

    cat = FileSystemCatalog(str(tmp_path))
    cat.create_database("db")
    t = cat.create_table("db.log", "x BIGINT, p STRING", partition_keys=["p"], options={"bucket": "-1"})
    t.write_arrow(pa.table({"x": [1, 2, 3], "p": [None, "q", None]}))
    got = sorted(t.to_arrow().to_pylist(), key=lambda r: r["x"])
    assert got == [{"x": 1, "p": None}, {"x": 2, "p": "q"}, {"x": 3, "p": None}]
    assert sorted(t.to_arrow(projection=["p"]).column("p").to_pylist(), key=str) == [None, None, "q"]
