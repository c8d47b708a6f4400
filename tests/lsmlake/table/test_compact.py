"""Compaction of whole tables against a plain-Python model, and read back by pypaimon."""

from __future__ import annotations

import itertools

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import CommitConflictError
from lsmlake.format.row_kind import DELETE, UPDATE_BEFORE
from lsmlake.format.schema import VALUE_KIND
from lsmlake.table.compact import commit_compaction, compact_buckets, compact_table, restore_levels

_n = itertools.count()

op = st.tuples(st.integers(0, 15), st.sampled_from(["a", "b"]), st.integers(-9, 9) | st.none(),
               st.sampled_from(["+I", "+U", "-U", "-D"]))
step = st.one_of(st.tuples(st.just("write"), st.lists(op, min_size=1, max_size=30)),
                 st.tuples(st.just("compact"), st.none()), st.tuples(st.just("full"), st.none()))


def _pk_table(tmp_path, buckets: int, **extra):
    cat = FileSystemCatalog(str(tmp_path / f"wh{next(_n)}"))
    cat.create_database("db")
    options = {"bucket": str(buckets), "num-sorted-run.compaction-trigger": "3"}
    options.update(extra)
    return cat.create_table("db.t", "k INT NOT NULL, p STRING NOT NULL, v BIGINT", partition_keys=["p"],
                            primary_keys=["k", "p"], options=options)


def _write(t, batch) -> None:
    t.write_arrow(pa.table({"k": pa.array([b[0] for b in batch], pa.int32()), "p": [b[1] for b in batch],
                            "v": pa.array([b[2] for b in batch], pa.int64()), "_row_kind": [b[3] for b in batch]}))


def _apply(model, batch) -> None:
    for k, p, v, kind in batch:
        if kind in ("+I", "+U"):
            model[(k, p)] = v
        else:
            model.pop((k, p), None)


def _rows(table) -> dict:
    return {(r["k"], r["p"]): r["v"] for r in table.to_pylist()}


def _check_invariants(t) -> None:
    for split in t.plan():
        levels = restore_levels(t, split)  # raises if a level >= 1 holds overlapping files
        for level in range(1, levels.num_levels):
            files = levels.run_of(level).files
            ranges = [levels.keys.range(f) for f in files]
            assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:], strict=False))


def _no_retractions(t) -> bool:
    import pyarrow.parquet as pq

    from lsmlake.table.compact import split_dir

    for split in t.plan():
        for f in split.files:
            kinds = pq.ParquetFile(f"{split_dir(t, split)}/{f.file_name}").read(columns=[VALUE_KIND]).column(0)
            if any(k in (UPDATE_BEFORE, DELETE) for k in kinds.to_pylist()):
                return False
    return True


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(step, min_size=1, max_size=12), buckets=st.sampled_from([1, 2]))
def test_compaction_keeps_the_model(tmp_path, steps, buckets) -> None:
    t = _pk_table(tmp_path, buckets)
    model: dict = {}
    for kind, batch in steps:
        if kind == "write":
            _write(t, batch)
            _apply(model, batch)
        else:
            compact_table(t, full=kind == "full")
            if kind == "full" and t.latest_snapshot() is not None:
                assert _no_retractions(t), "no delete survives a full compaction"
                assert all(len({f.level for f in s.files}) == 1 for s in t.plan())
        assert _rows(t.to_arrow()) == model
        _check_invariants(t)


def test_pypaimon_reads_compacted_tables(tmp_path) -> None:
    from pypaimon import CatalogFactory

    t = _pk_table(tmp_path, 2)
    model: dict = {}
    batches = [[(k, "ab"[k % 2], k * i, "+I" if i == 0 else ("-D" if (k + i) % 5 == 0 else "+U"))
                for k in range(40)] for i in range(7)]
    for i, b in enumerate(batches):
        _write(t, b)
        _apply(model, b)
        if i % 2:
            compact_table(t)
    pp = CatalogFactory.create({"warehouse": t.path.rsplit("/db.db", 1)[0]}).get_table("db.t")

    def pypaimon_rows():
        rb = pp.new_read_builder()
        return _rows(rb.new_read().to_arrow(rb.new_scan().plan().splits()))

    assert _rows(t.to_arrow()) == model == pypaimon_rows()
    res = compact_table(t, full=True)
    assert res.snapshot_id is not None
    max_level = t.options.num_levels() - 1  # trigger 3 -> 4 levels
    assert all(len(s.files) >= 1 and {f.level for f in s.files} == {max_level} for s in t.plan())
    rb = pp.new_read_builder()
    splits = rb.new_scan().plan().splits()
    assert splits and all(s.raw_convertible for s in splits)  # one sorted run per bucket: no merge needed
    assert _rows(t.to_arrow()) == model == pypaimon_rows()


def test_compaction_conflict_fails_cleanly(tmp_path) -> None:
    t = _pk_table(tmp_path, 1)
    for i in range(3):
        _write(t, [(k, "a", i, "+I") for k in range(10)])
    _, first = compact_buckets(t, full=True)
    _, second = compact_buckets(t, full=True)
    commit_compaction(t, first)
    ids = t.snapshots.ids()
    before = {p for s in t.plan() for p in (f.file_name for f in s.files)}
    with pytest.raises(CommitConflictError):
        commit_compaction(t, second)
    assert t.snapshots.ids() == ids
    assert {p for s in t.plan() for p in (f.file_name for f in s.files)} == before
    # the loser's rewritten files were deleted
    import os
    on_disk = {f for d, _, fs in os.walk(t.path) for f in fs if f.endswith(".parquet")}
    assert not {f.file_name for m in second for f in m.new_files} & on_disk


def test_append_table_small_file_compaction_keeps_row_order(tmp_path) -> None:
    from pypaimon import CatalogFactory

    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    t = cat.create_table("db.a", "i BIGINT, s STRING", options={"compaction.min.file-num": "3",
                                                               "target-file-size": "2 kb"})
    for c in range(6):
        t.write_arrow(pa.table({"i": pa.array(range(c * 10, c * 10 + 10), pa.int64()),
                                "s": [f"r{j}" for j in range(c * 10, c * 10 + 10)]}))
    before = t.to_arrow().column("i").to_pylist()
    res = compact_table(t)
    assert res.snapshot_id is not None and res.files_before >= 3
    assert t.to_arrow().column("i").to_pylist() == before
    res = compact_table(t, full=True)
    (split,) = t.plan()
    assert len(split.files) == 1
    assert t.to_arrow().column("i").to_pylist() == before == list(range(60))
    pp = CatalogFactory.create({"warehouse": str(tmp_path / "wh")}).get_table("db.a")
    rb = pp.new_read_builder()
    assert rb.new_read().to_arrow(rb.new_scan().plan().splits()).column("i").to_pylist() == before


def _pypaimon_rows(warehouse: str, identifier: str) -> dict:
    from pypaimon import CatalogFactory

    rb = CatalogFactory.create({"warehouse": warehouse}).get_table(identifier).new_read_builder()
    return _rows(rb.new_read().to_arrow(rb.new_scan().plan().splits()))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(step, min_size=2, max_size=8))
def test_pypaimon_agrees_after_random_compactions(tmp_path, steps) -> None:
    t = _pk_table(tmp_path, 2)
    warehouse = t.path.rsplit("/db.db", 1)[0]
    model: dict = {}
    for kind, batch in steps:
        if kind == "write":
            _write(t, batch)
            _apply(model, batch)
        else:
            compact_table(t, full=kind == "full")
    if t.latest_snapshot() is not None:
        assert _rows(t.to_arrow()) == model == _pypaimon_rows(warehouse, "db.t")


def test_compacting_a_table_pypaimon_wrote(tmp_path) -> None:
    from pypaimon import CatalogFactory, Schema

    warehouse = str(tmp_path / "wh")
    cat = CatalogFactory.create({"warehouse": warehouse})
    cat.create_database("db", True)
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("p", pa.string(), nullable=False),
                        ("v", pa.string()), ("rk", pa.string())])
    cat.create_table("db.t", Schema.from_pyarrow_schema(schema, partition_keys=["p"], primary_keys=["k", "p"],
                                                         options={"bucket": "2", "rowkind.field": "rk"}), True)
    pt = cat.get_table("db.t")
    model: dict = {}
    for i in range(4):
        rows = [(k, "xy"[k % 2], f"v{i}-{k}", "-D" if (k + i) % 7 == 0 and i else "+I") for k in range(30)]
        wb = pt.new_batch_write_builder()
        w, c = wb.new_write(), wb.new_commit()
        w.write_arrow(pa.table({"k": pa.array([r[0] for r in rows], pa.int64()), "p": [r[1] for r in rows],
                                "v": [r[2] for r in rows], "rk": [r[3] for r in rows]}, schema=schema))
        c.commit(w.prepare_commit())
        w.close()
        c.close()
        for k, p, v, rk in rows:
            if rk == "-D":
                model.pop((k, p), None)
            else:
                model[(k, p)] = v
    t = FileSystemCatalog(warehouse).get_table("db.t")

    def ours():
        return {(r["k"], r["p"]): r["v"] for r in t.to_arrow().to_pylist()}

    def theirs():
        from pypaimon import CatalogFactory as CF

        rb = CF.create({"warehouse": warehouse}).get_table("db.t").new_read_builder()
        return {(r["k"], r["p"]): r["v"] for r in rb.new_read().to_arrow(rb.new_scan().plan().splits()).to_pylist()}

    assert ours() == model
    res = compact_table(t, full=True)
    assert res.snapshot_id is not None
    assert ours() == model == theirs()
    # pypaimon keeps writing on top of lsmlake's compaction, and lsmlake reads it
    wb = pt.new_batch_write_builder()
    w, c = wb.new_write(), wb.new_commit()
    w.write_arrow(pa.table({"k": pa.array([1, 2], pa.int64()), "p": ["y", "x"], "v": ["new1", "new2"],
                            "rk": ["+U", "+U"]}, schema=schema))
    c.commit(w.prepare_commit())
    model[(1, "y")], model[(2, "x")] = "new1", "new2"
    assert ours() == model == theirs()


def test_early_full_compaction_schedule_lives_in_the_snapshots(tmp_path) -> None:
    from lsmlake.table.compact import FULL_COMPACTION_PROPERTY, compaction_history

    t = _pk_table(tmp_path, 1, **{"full-compaction.delta-commits": "3", "num-sorted-run.compaction-trigger": "10"})
    kinds = []
    for i in range(7):
        _write(t, [(i, "a", i, "+I")])
        res = compact_table(t)  # a fresh call each time: the counter must come from the snapshots
        kinds.append(res.snapshot_id is not None)
    assert kinds == [False, False, True, False, False, True, False]
    full = [s for s in t.snapshots.snapshots() if (s.properties or {}).get(FULL_COMPACTION_PROPERTY) == "true"]
    assert len(full) == 2
    assert compaction_history(t).commits_since_full == 1


def test_optimization_interval_triggers_a_full_compaction(tmp_path) -> None:
    from lsmlake.table.compact import compaction_history, full_compaction_due

    t = _pk_table(tmp_path, 1, **{"compaction.optimization-interval": "1 h"})
    _write(t, [(1, "a", 1, "+I")])
    h = compaction_history(t)
    first = t.snapshots.snapshot(1).time_millis
    assert not full_compaction_due(t, h, now_ms=first + 1000)
    assert full_compaction_due(t, h, now_ms=first + 3_600_001)
