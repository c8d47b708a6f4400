"""Deletion vectors: lookup compaction marks older rows; raw reads with vectors equal the model and pypaimon."""

from __future__ import annotations

import itertools

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.table.compact import compact_table, split_dir
from lsmlake.table.read import load_vectors
from tests.support.golden import GOLDEN_WAREHOUSE

_n = itertools.count()
row = st.tuples(st.integers(0, 12), st.integers(0, 5), st.sampled_from(["+I", "+U", "-D"]))
steps = st.lists(st.one_of(st.tuples(st.just("write"), st.lists(row, min_size=1, max_size=12)),
                           st.tuples(st.sampled_from(["compact", "full"]), st.none())), min_size=1, max_size=8)


def _table(tmp_path, **extra):
    cat = FileSystemCatalog(str(tmp_path / f"wh{next(_n)}"))
    cat.create_database("db")
    o = {"bucket": "2", "deletion-vectors.enabled": "true", "num-sorted-run.compaction-trigger": "3"}
    o.update(extra)
    return cat.create_table("db.t", "k INT NOT NULL, v INT", primary_keys=["k"], options=o)


def _write(t, batch) -> None:
    t.write_arrow(pa.table({"k": pa.array([r[0] for r in batch], pa.int32()),
                            "v": pa.array([r[1] for r in batch], pa.int32()), "_row_kind": [r[2] for r in batch]}))


def _apply(model, batch) -> None:
    for k, v, kind in batch:
        if kind == "-D":
            model.pop(k, None)
        else:
            model[k] = v


def _rows(table) -> dict:
    return {r["k"]: r["v"] for r in table.to_pylist()}


def _pypaimon(t) -> dict:
    from pypaimon import CatalogFactory

    rb = CatalogFactory.create({"warehouse": t.path.rsplit("/db.db", 1)[0]}).get_table("db.t").new_read_builder()
    return _rows(rb.new_read().to_arrow(rb.new_scan().plan().splits()))


def _no_live_row_marked(t) -> None:
    """Every row a deletion vector marks has a newer version elsewhere; every unmarked key is unique."""
    import pyarrow.parquet as pq

    for split in t.plan():
        vectors = load_vectors(t.io, t.path, split.dv_index)
        live_keys: list[int] = []
        for f in split.files:
            if f.level == 0:
                continue
            keys = pq.ParquetFile(f"{split_dir(t, split)}/{f.file_name}").read(columns=["k"]).column(0).to_pylist()
            gone = set(vectors.get(f.file_name, []))
            live_keys += [k for i, k in enumerate(keys) if i not in gone]
        assert len(live_keys) == len(set(live_keys)), "one live row per key above level 0"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps, write_only=st.booleans())
def test_deletion_vector_tables_match_the_model(tmp_path, steps, write_only) -> None:
    t = _table(tmp_path, **({"write-only": "true"} if write_only else {}))
    model: dict = {}
    for kind, batch in steps:
        if kind == "write":
            _write(t, batch)
            _apply(model, batch)
        else:
            compact_table(t, full=kind == "full")
        if not write_only:
            assert _rows(t.to_arrow()) == model
        _no_live_row_marked(t)
    compact_table(t)
    assert _rows(t.to_arrow()) == model == _pypaimon(t)


def test_writes_compact_level0_so_readers_see_them(tmp_path) -> None:
    t = _table(tmp_path)
    n = 5000  # big enough that a small level-0 file does not pull the big run into its compaction
    _write(t, [(k, k, "+I") for k in range(n)])
    _write(t, [(k, 100 + k, "+U") for k in range(0, 50, 5)] + [(7, 0, "-D")])
    assert all(f.level > 0 for s in t.plan() for f in s.files)
    snap = t.latest_snapshot()
    assert snap is not None and snap.index_manifest, "deletion vectors are in the index manifest"
    expected = {k: (100 + k if k < 50 and k % 5 == 0 else k) for k in range(n) if k != 7}
    assert _rows(t.to_arrow()) == expected == _pypaimon(t)
    marked = sum(len(v) for s in t.plan() for v in load_vectors(t.io, t.path, s.dv_index).values())
    assert marked >= 10, "older versions are marked, not rewritten"


def test_pypaimon_written_dv_table_becomes_readable_after_compaction(tmp_path) -> None:
    from pypaimon import CatalogFactory, Schema

    warehouse = str(tmp_path / "wh")
    cat = CatalogFactory.create({"warehouse": warehouse})
    cat.create_database("db", True)
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.string()), ("rk", pa.string())])
    cat.create_table("db.t", Schema.from_pyarrow_schema(schema, primary_keys=["k"], options={
        "bucket": "2", "deletion-vectors.enabled": "true", "rowkind.field": "rk"}), True)
    pt = cat.get_table("db.t")
    model: dict = {}
    for i in range(3):
        rows = [(k, f"v{i}-{k}", "-D" if i == 2 and k % 4 == 0 else ("+I" if i == 0 else "+U")) for k in range(20)]
        wb = pt.new_batch_write_builder()
        w, c = wb.new_write(), wb.new_commit()
        w.write_arrow(pa.table({"k": [r[0] for r in rows], "v": [r[1] for r in rows], "rk": [r[2] for r in rows]},
                               schema=schema))
        c.commit(w.prepare_commit())
        for k, v, rk in rows:
            if rk == "-D":
                model.pop(k, None)
            else:
                model[k] = v

    def theirs() -> dict:
        rb = CatalogFactory.create({"warehouse": warehouse}).get_table("db.t").new_read_builder()
        return {r["k"]: r["v"] for r in rb.new_read().to_arrow(rb.new_scan().plan().splits()).to_pylist()}

    assert theirs() == {}, "pypaimon reads its own deletion-vector table as empty before compaction"
    t = FileSystemCatalog(warehouse).get_table("db.t")
    res = compact_table(t)
    assert res.snapshot_id is not None
    assert theirs() == model
    assert {r["k"]: r["v"] for r in t.to_arrow().to_pylist()} == model


def test_golden_dv_tables_read_like_pypaimon() -> None:
    cat = FileSystemCatalog(str(GOLDEN_WAREHOUSE))
    assert cat.get_table("db.dv_pk_t").to_arrow().num_rows == 0  # level 0 only: invisible until compacted
    assert cat.get_table("db.dv_append_t").to_arrow().num_rows == 14  # 20 rows, 6 deleted by vectors


@pytest.mark.parametrize("engine", [{"merge-engine": "partial-update"}, {"sequence.field": "v"},
                                   {"changelog-producer": "lookup"}])
def test_whole_row_lookup_engines(tmp_path, engine) -> None:
    t = _table(tmp_path, **engine)
    _write(t, [(k, k, "+I") for k in range(10)])
    _write(t, [(k, k + 1, "+U") for k in range(0, 10, 2)])
    expected = {k: (k + 1 if k % 2 == 0 else k) for k in range(10)}
    assert _rows(t.to_arrow()) == expected == _pypaimon(t)


def test_append_table_delete_where_through_deletion_vectors(tmp_path) -> None:
    from pypaimon import CatalogFactory

    from lsmlake.errors import InvalidInputError

    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    t = cat.create_table("db.a", "id BIGINT, dt STRING, v DOUBLE", partition_keys=["dt"],
                         options={"deletion-vectors.enabled": "true"})
    t.write_arrow(pa.table({"id": pa.array(range(100), pa.int64()), "dt": ["a", "b"] * 50,
                            "v": [float(i) for i in range(100)]}))
    t.write_arrow(pa.table({"id": pa.array(range(100, 150), pa.int64()), "dt": ["a"] * 50,
                            "v": [float(i) for i in range(100, 150)]}))
    files_before = {f.file_name for s in t.plan() for f in s.files}
    res = t.delete_where([("v", ">=", 90.0), ("dt", "=", "a")])
    assert res is not None and t.snapshots.snapshot(res.snapshot_id).commit_kind == "OVERWRITE"
    expected = sorted(i for i in range(150) if not (i >= 90 and (i >= 100 or i % 2 == 0)))
    assert sorted(t.to_arrow().column("id").to_pylist()) == expected
    assert {f.file_name for s in t.plan() for f in s.files} == files_before, "no data file rewritten"
    # a second delete adds to the existing vectors
    assert t.delete_where({"id": 1}) is not None
    expected.remove(1)
    assert sorted(t.to_arrow().column("id").to_pylist()) == expected
    assert t.delete_where({"id": 1}) is None  # nothing left to delete
    rb = CatalogFactory.create({"warehouse": str(tmp_path / "wh")}).get_table("db.a").new_read_builder()
    assert sorted(rb.new_read().to_arrow(rb.new_scan().plan().splits()).column("id").to_pylist()) == expected
    with pytest.raises(InvalidInputError):
        t.delete_where([])
    with pytest.raises(InvalidInputError):
        t.delete_where({"nope": 1})


def test_append_compaction_keeps_deleted_rows_deleted(tmp_path) -> None:
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    t = cat.create_table("db.t", "k INT NOT NULL, v INT", options={"deletion-vectors.enabled": "true"})
    for i in range(3):
        t.write_arrow(pa.table({"k": pa.array([i * 2, i * 2 + 1], pa.int32()), "v": pa.array([1, 2], pa.int32())}))
    t.delete_where({"k": 1})
    assert compact_table(t, full=True).snapshot_id is not None
    assert sorted(r["k"] for r in t.to_arrow().to_pylist()) == [0, 2, 3, 4, 5]
    snap = t.latest_snapshot()
    assert snap is not None and not t.indexes.read(snap.index_manifest), "vectors of compacted files are dropped"


def test_concurrent_deletes_of_one_bucket_conflict_instead_of_losing_one(tmp_path) -> None:
    from lsmlake.errors import CommitConflictError
    from lsmlake.format.index_manifest import dv_index_change
    from lsmlake.table.write import CommitMessage

    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    t = cat.create_table("db.t", "k INT NOT NULL", options={"deletion-vectors.enabled": "true"})
    t.write_arrow(pa.table({"k": pa.array(range(5), pa.int32())}))
    (split,) = t.plan()
    from pyroaring import BitMap

    # two deleters planned against the same snapshot (neither saw the other's vector)
    first = [CommitMessage(split.partition, split.bucket, split.total_buckets)]
    second = [CommitMessage(split.partition, split.bucket, split.total_buckets)]
    name = split.files[0].file_name
    first[0].new_index_files, first[0].deleted_index_files = dv_index_change(t.indexes, split, {name: BitMap([1])})
    second[0].new_index_files, second[0].deleted_index_files = dv_index_change(t.indexes, split, {name: BitMap([2])})
    t.new_commit().commit(first, kind="OVERWRITE")
    with pytest.raises(CommitConflictError, match="deletion vectors of bucket 0"):
        t.new_commit().commit(second, kind="OVERWRITE")
    assert sorted(r["k"] for r in t.to_arrow().to_pylist()) == [0, 2, 3, 4]


def test_overwrite_of_a_dv_table_is_visible(tmp_path) -> None:
    t = _table(tmp_path)
    _write(t, [(1, 1, "+I"), (2, 2, "+I")])
    t.overwrite_arrow(pa.table({"k": pa.array([3], pa.int32()), "v": pa.array([3], pa.int32())}))
    assert _rows(t.to_arrow()) == {3: 3} == _pypaimon(t)
