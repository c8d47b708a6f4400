"""lsmlake reads the golden warehouse pypaimon 2.1.0 wrote, and gets exactly what pypaimon returns.

Every table of the warehouse is covered (test_inventory fails when a new one appears):
* supported tables: same rows as pypaimon at every snapshot, same files planned, rows in the buckets
  the bucket function gives, and lsmlake can keep writing into them (pypaimon reads the result);
* tables with features lsmlake does not support yet (deletion vectors, dynamic bucket): lsmlake
  either refuses them with a clear LakeError or reads exactly what pypaimon reads.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections import Counter
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pypaimon import CatalogFactory

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import LakeError
from lsmlake.format.bucket import bucket_ids
from lsmlake.table.file_store_table import FileStoreTable
from tests.support.dynamic_index import check_index
from tests.support.golden import GOLDEN_WAREHOUSE
from tests.support.values import norm_value

GOLDEN = GOLDEN_WAREHOUSE

ALL_TABLES = ["alltypes_t", "append_bucket_t", "append_t", "changelog_t", "dv_append_t", "dv_pk_t", "dyn_t",
              "nullpart_t", "overwrite_t", "rowkind_t", "types_t"]
# Tables lsmlake does not support yet, with words its error must use to be a clear refusal.
UNSUPPORTED = {
    "dv_pk_t": ("deletion",),  # deletion-vectors.enabled: level-0 files are invisible until compacted
    "dv_append_t": ("deletion",),  # deletion vectors (row-id deletes of a data-evolution table)
}
SUPPORTED = [t for t in ALL_TABLES if t not in UNSUPPORTED]


# ---------------------------------------------------------------------------------------------
# Canonical values (the same rules as test_interop_pypaimon.py)
# ---------------------------------------------------------------------------------------------

def norm_type(t: pa.DataType) -> Any:
    """Logical type; timestamp units (pypaimon reads TIMESTAMP(0) as 's'), child names and
    nullability are ignored."""
    if pa.types.is_timestamp(t):
        return ("timestamp", t.tz is not None)
    if pa.types.is_map(t):
        return ("map", norm_type(t.key_type), norm_type(t.item_type))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return ("list", norm_type(t.value_type))
    if pa.types.is_struct(t):
        return ("struct", tuple((t.field(i).name, norm_type(t.field(i).type)) for i in range(t.num_fields)))
    return str(t)


def norm_rows(table: pa.Table) -> list[tuple]:
    return sorted((tuple(norm_value(r[c]) for c in table.column_names) for r in table.to_pylist()), key=repr)


def assert_same(lsm: pa.Table, pyp: pa.Table, what: str) -> None:
    assert lsm.column_names == pyp.column_names, f"{what}: columns {lsm.column_names} vs {pyp.column_names}"
    for f in lsm.schema:
        assert norm_type(f.type) == norm_type(pyp.schema.field(f.name).type), \
            f"{what}: column {f.name!r}: lsmlake {f.type} vs pypaimon {pyp.schema.field(f.name).type}"
    got, want = norm_rows(lsm), norm_rows(pyp)
    if got != want:
        g, w = Counter(got), Counter(want)
        pytest.fail(f"{what}: lsmlake returned {len(got)} rows, pypaimon {len(want)}; "
                    f"only lsmlake: {sorted((g - w).elements(), key=repr)[:5]}; "
                    f"only pypaimon: {sorted((w - g).elements(), key=repr)[:5]}")


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def golden() -> str:
    """A private copy of the golden warehouse (nothing here may touch the original)."""
    if not (GOLDEN / "db.db").is_dir():
        pytest.fail(f"golden warehouse not found at {GOLDEN} (set LSMLAKE_GOLDEN)")
    return str(GOLDEN)


@pytest.fixture(scope="module")
def warehouse(golden: str, tmp_path_factory: Any) -> str:
    wh = tmp_path_factory.mktemp("golden") / "wh"
    shutil.copytree(golden, wh)
    return str(wh)


@pytest.fixture
def writable(golden: str, tmp_path: Any) -> str:
    """A fresh copy for tests that write."""
    wh = tmp_path / "wh"
    shutil.copytree(golden, wh)
    return str(wh)


def pyp_read(wh: str, name: str, snapshot_id: int | None = None) -> pa.Table:
    pt = CatalogFactory.create({"warehouse": wh}).get_table(f"db.{name}")
    if snapshot_id is not None:
        pt = pt.copy({"scan.snapshot-id": str(snapshot_id)})
    rb = pt.new_read_builder()
    return rb.new_read().to_arrow(rb.new_scan().plan().splits())


def pyp_plan(wh: str, name: str) -> set[tuple[int, str]]:
    rb = CatalogFactory.create({"warehouse": wh}).get_table(f"db.{name}").new_read_builder()
    return {(s.bucket, f.file_name) for s in rb.new_scan().plan().splits() for f in s.files}


def lsm(wh: str, name: str) -> FileStoreTable:
    return FileSystemCatalog(wh).get_table(f"db.{name}")


def snapshot_ids(t: FileStoreTable) -> list[int]:
    latest = t.latest_snapshot()
    assert latest is not None
    return list(range(1, latest.id + 1))


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------

def test_inventory(warehouse: str) -> None:
    """Every golden table is covered by this file: a new one must be added to ALL_TABLES."""
    assert FileSystemCatalog(warehouse).list_tables("db") == ALL_TABLES


@pytest.mark.parametrize("name", SUPPORTED)
def test_reads_what_pypaimon_reads(warehouse: str, name: str) -> None:
    """Same columns, types and rows as pypaimon, at every snapshot (time travel)."""
    t = lsm(warehouse, name)
    for sid in snapshot_ids(t):
        assert_same(t.to_arrow(snapshot_id=sid), pyp_read(warehouse, name, sid), f"{name} at snapshot {sid}")
    latest = t.to_arrow()
    assert latest.num_rows > 0, f"{name}: the golden table is not empty"
    assert_same(latest, pyp_read(warehouse, name), f"{name} (latest)")


@pytest.mark.parametrize("name", SUPPORTED)
def test_plans_the_files_pypaimon_plans(warehouse: str, name: str) -> None:
    t = lsm(warehouse, name)
    ours = {(s.bucket, f.file_name) for s in t.plan() for f in s.files}
    assert ours == pyp_plan(warehouse, name)


def test_rows_of_the_dynamic_bucket_table_sit_where_its_hash_index_says(warehouse: str) -> None:
    assert check_index(warehouse, "db.dyn_t") == {(1,): 0, (2,): 0, (3,): 0}  # three keys, one bucket


@pytest.mark.parametrize("name", [n for n in SUPPORTED if n not in ("alltypes_t", "append_t", "dyn_t")])
def test_rows_sit_in_the_bucket_lsmlake_computes(warehouse: str, name: str) -> None:
    t = lsm(warehouse, name)
    n = t.schema.num_buckets
    assert n > 0
    keys = list(t.schema.bucket_keys)
    read = t.new_read()
    splits = t.plan()
    assert splits
    for s in splits:
        assert s.total_buckets == n
        rows = read.read_split(s)
        got = set(bucket_ids([rows.column(c) for c in keys], t.schema.types_of(keys), n).tolist())
        assert got <= {s.bucket}, f"{name}: rows of bucket {s.bucket} hash to {got}"


@pytest.mark.parametrize("name", list(UNSUPPORTED))
def test_unsupported_tables_refused_or_read_right(warehouse: str, name: str) -> None:
    """A table with a feature lsmlake lacks is either refused with a clear LakeError or read exactly
    as pypaimon reads it; silently returning other rows is a bug."""
    try:
        t = lsm(warehouse, name)
        results = {sid: t.to_arrow(snapshot_id=sid) for sid in snapshot_ids(t)}
    except LakeError as e:
        words = UNSUPPORTED[name]
        assert any(w in str(e).lower() for w in words), f"{name}: unclear error: {e!r}"
        return
    for sid, got in results.items():
        assert_same(got, pyp_read(warehouse, name, sid),
                    f"{name} at snapshot {sid} (lsmlake did not refuse it)")


# ---------------------------------------------------------------------------------------------
# Writing into golden tables
# ---------------------------------------------------------------------------------------------

def expected_after(t: FileStoreTable, before: pa.Table, rows: Sequence[dict[str, Any]],
                   kinds: Sequence[str]) -> pa.Table:
    """The rows of `before` after applying `rows` with `kinds` (by primary key; appended otherwise)."""
    out = before.to_pylist()
    if not t.schema.is_primary_key_table:
        out += list(rows)
    else:
        pk = list(t.schema.primary_keys)
        by_key = {tuple(r[c] for c in pk): r for r in out}
        for r, kind in zip(rows, kinds, strict=True):
            full = {c: r.get(c) for c in t.schema.field_names}
            if kind in ("+I", "+U"):
                by_key[tuple(full[c] for c in pk)] = full
            else:
                by_key.pop(tuple(full[c] for c in pk), None)
        out = list(by_key.values())
    schema = pa.schema([f.with_nullable(True) for f in t.schema.arrow_schema])
    return pa.Table.from_pylist(out, schema=schema)


def _ts(*a: int) -> dt.datetime:
    return dt.datetime(*a)


# table -> (rows to write, their row kinds, how the kinds are given: "_row_kind", "rk" or None)
GOLDEN_WRITES: dict[str, tuple[list[dict[str, Any]], list[str], str | None]] = {
    "rowkind_t": ([{"k": 1, "v": "a2", "rk": "+U"}, {"k": 3, "v": "c2", "rk": "-D"},
                   {"k": 4, "v": "d", "rk": "+I"}], ["+U", "-D", "+I"], "rk"),
    "overwrite_t": ([{"k": 1, "dt": "d2", "v": "b2"}, {"k": 2, "dt": "d1", "v": "n"}, {"k": 9, "dt": "d1"}],
                    ["+U", "+I", "-D"], "_row_kind"),
    "nullpart_t": ([{"ps": "q", "pi": 3, "k1": 2, "k2": "a-much-longer-string", "dec": Decimal("1.00"),
                     "ts6": _ts(2024, 5, 6, 7, 8, 9, 123456)},
                    {"ps": "q", "pi": 3, "k1": 5, "k2": "", "bigdec": Decimal("-0.0000000001"), "b": False}],
                   ["+U", "+I"], "_row_kind"),
    "types_t": ([{"pi": 7, "pb": 1099511627776, "ps": "a b/c", "pd": dt.date(2024, 2, 29),
                  "pts": _ts(2024, 1, 2, 3, 4, 5, 678000), "pdec": Decimal("12.34"), "pdbl": 1.5,
                  "pbool": True, "pbin": b"\x01\x02", "k": k, "v": v} for k, v in ((1, "x2"), (2, "new"))],
                ["+U", "+I"], "_row_kind"),
    "append_t": ([{"id": 6, "name": "n6", "p": "x"}, {"id": 7, "name": "n7", "p": None},
                  {"id": 8, "name": "n8", "p": ""}, {"id": 9, "name": None, "p": "a/b c=d%"}],
                 ["+I"] * 4, None),
    "append_bucket_t": ([{"k": k, "v": f"w{k}"} for k in range(100, 130)], ["+I"] * 30, None),
}


@pytest.mark.parametrize("name", list(GOLDEN_WRITES))
def test_lsmlake_continues_golden_table(writable: str, name: str) -> None:
    """lsmlake commits updates, deletes and inserts into a pypaimon-written table; both readers then
    return the expected rows, at the new snapshot and (unchanged) at the old ones."""
    t = lsm(writable, name)
    old = {sid: pyp_read(writable, name, sid) for sid in snapshot_ids(t)}
    rows, kinds, via = GOLDEN_WRITES[name]
    data = pa.Table.from_pylist([{c: r.get(c) for c in t.schema.field_names} for r in rows],
                                schema=pa.schema([f.with_nullable(True) for f in t.schema.arrow_schema]))
    if via == "_row_kind":
        data = data.append_column("_row_kind", pa.array(kinds, pa.string()))
    expected = expected_after(t, old[max(old)], rows, kinds)
    result = t.write_arrow(data)
    assert result is not None and result.snapshot_id == max(old) + 1
    assert_same(t.to_arrow(), expected, f"{name}: lsmlake after lsmlake's commit")
    assert_same(pyp_read(writable, name), expected, f"{name}: pypaimon after lsmlake's commit")
    for sid, before in old.items():
        assert_same(t.to_arrow(snapshot_id=sid), before, f"{name}: lsmlake at old snapshot {sid}")
    if t.schema.num_buckets > 0:
        read = t.new_read()
        keys = list(t.schema.bucket_keys)
        for s in t.plan():
            got = read.read_split(s)
            b = set(bucket_ids([got.column(c) for c in keys], t.schema.types_of(keys),
                               t.schema.num_buckets).tolist())
            assert b <= {s.bucket}, f"{name}: rows of bucket {s.bucket} hash to {b}"
    if t.schema.is_primary_key_table:  # lsmlake's files continue the bucket's sequence numbers
        prev = {(s.partition, s.bucket): s.files for s in t.plan(max(old))}
        for s in t.plan():
            old_files = prev.get((s.partition, s.bucket), ())
            names = {f.file_name for f in old_files}
            new = [f for f in s.files if f.file_name not in names]
            if old_files and new:
                assert min(f.min_sequence_number for f in new) > max(f.max_sequence_number for f in old_files)


# Unsupported tables: table -> (rows to append or upsert, words of a clear refusal)
UNSUPPORTED_WRITES: dict[str, tuple[list[dict[str, Any]], tuple[str, ...]]] = {
    "changelog_t": ([{"k": 1, "v": "a2"}, {"k": 5, "v": "e"}], ("changelog",)),
    "dv_append_t": ([{"id": 100, "v": "x", "dt": "d1"}, {"id": 101, "v": "y", "dt": "d2"}],
                    ("deletion", "row-tracking", "row tracking", "data-evolution", "data evolution")),
    "dyn_t": ([{"k": 1, "v": "a2"}, {"k": 4, "v": "d"}], ("dynamic", "bucket")),
}


@pytest.mark.parametrize("name", list(UNSUPPORTED_WRITES))
def test_write_into_unsupported_golden_table(writable: str, name: str) -> None:
    """lsmlake refuses to write into a table whose features it lacks, or writes what they require:
    pypaimon then reads the expected rows, changelog-producer=input gets its changelog, row
    tracking gets its row ids."""
    rows, words = UNSUPPORTED_WRITES[name]
    before = pyp_read(writable, name)
    try:
        t = lsm(writable, name)
        data = pa.Table.from_pylist(rows, schema=t.schema.arrow_schema)
        t.write_arrow(data)
    except LakeError as e:
        assert any(w in str(e).lower() for w in words), f"{name}: unclear error: {e!r}"
        return
    try:
        after = pyp_read(writable, name)
    except Exception as e:  # noqa: BLE001 - any failure here means lsmlake broke the table
        pytest.fail(f"{name}: pypaimon cannot read the table after lsmlake wrote into it: {e!r}")
    assert_same(after, expected_after(t, before, rows, ["+I"] * len(rows)).select(after.column_names),
                f"{name}: pypaimon after lsmlake's write")
    snap = t.latest_snapshot()
    assert snap is not None
    if t.schema.options.get("changelog-producer") == "input":
        assert snap.changelog_record_count == len(rows), \
            f"{name}: changelog-producer=input, but lsmlake's commit recorded " \
            f"{snap.changelog_record_count} changelog rows for {len(rows)} written rows"
    if t.schema.options.get("row-tracking.enabled") == "true":
        prev = t.snapshot(snap.id - 1)
        assert prev is not None and prev.next_row_id is not None
        assert snap.next_row_id == prev.next_row_id + len(rows), "row tracking: nextRowId must advance"
        new = [f for s in t.plan() for f in s.files if f.first_row_id is None]
        assert not new, f"{name}: data files without _FIRST_ROW_ID in a row-tracking table: {new[:2]}"


def test_alltypes_roundtrip(writable: str) -> None:
    """lsmlake reads alltypes_t and writes the row back unchanged; pypaimon reads two equal rows."""
    t = lsm(writable, "alltypes_t")
    before = t.to_arrow()
    assert before.num_rows == 1
    t.write_arrow(before)
    doubled = pa.concat_tables([pyp_read(writable, "alltypes_t", 1)] * 2)
    assert_same(t.to_arrow(), doubled, "alltypes_t: lsmlake after writing the row back")
    assert_same(pyp_read(writable, "alltypes_t"), doubled,
                "alltypes_t: pypaimon after lsmlake wrote the row back")
