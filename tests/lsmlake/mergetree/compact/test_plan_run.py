"""Planning a bucket's compaction on one side and running it by file names on another does what the
bucket's compaction manager does in one go, for every merge engine; new files carry the run's prefix."""

from __future__ import annotations

import itertools
import shutil

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError, NotFoundError
from lsmlake.format.index_manifest import dv_index_change
from lsmlake.mergetree.compact.lookup import DvCompactResult
from lsmlake.mergetree.compact.rewriter import changelog_prefix
from lsmlake.table.append_compaction import AppendCompactManager
from lsmlake.table.compact import (
    commit_compaction,
    compact_split,
    compact_table,
    compaction_history,
    full_compaction_required,
    merge_tree_manager,
    plan_bucket,
    run_planned,
    split_dir,
)
from lsmlake.table.read import load_vectors
from lsmlake.table.write import CommitMessage

_n = itertools.count()
PREFIX = "data-run-x1-"

PK_ENGINES = {
    "deduplicate": {},
    "deduplicate-dv": {"deletion-vectors.enabled": "true"},
    "partial-update": {"merge-engine": "partial-update", "partial-update.remove-record-on-delete": "true"},
    "aggregation": {"merge-engine": "aggregation", "fields.a.aggregate-function": "sum",
                    "fields.b.ignore-retract": "true", "aggregation.remove-record-on-delete": "true"},
    "first-row": {"merge-engine": "first-row", "ignore-delete": "true"},
    "lookup-changelog": {"changelog-producer": "lookup"},
    "full-compaction-changelog": {"changelog-producer": "full-compaction"},
    "dv-lookup-changelog": {"deletion-vectors.enabled": "true", "changelog-producer": "lookup"},
}
ENGINES = [*PK_ENGINES, "append", "append-dv"]

row = st.tuples(st.integers(0, 9), st.integers(-5, 5) | st.none(), st.sampled_from(["x", "y"]) | st.none(),
                st.sampled_from(["+I", "+I", "+U", "-D"]))
write = st.tuples(st.just("write"), st.lists(row, min_size=1, max_size=10))
step = st.one_of(write, write, write, st.tuples(st.sampled_from(["compact", "full"]), st.none()))


def _table(tmp_path, engine: str):
    cat = FileSystemCatalog(str(tmp_path / f"wh{next(_n)}"))
    cat.create_database("db")
    options = {"bucket": "2", "num-sorted-run.compaction-trigger": "3", "write-only": "true"}
    if engine.startswith("append"):
        options = {"write-only": "true", "compaction.min.file-num": "2"}
        if engine == "append-dv":
            options["deletion-vectors.enabled"] = "true"
        return cat.create_table("db.t", "k INT NOT NULL, a BIGINT, b STRING", options=options)
    options.update(PK_ENGINES[engine])
    return cat.create_table("db.t", "k INT NOT NULL, a BIGINT, b STRING", primary_keys=["k"], options=options)


def _write(t, batch) -> None:
    if not t.schema.is_primary_key_table:
        batch = [r for r in batch if r[3] == "+I"]
        if not batch:
            return
    t.write_arrow(pa.table({"k": pa.array([r[0] for r in batch], pa.int32()),
                            "a": pa.array([r[1] for r in batch], pa.int64()), "b": [r[2] for r in batch],
                            "_row_kind": [r[3] for r in batch]}))
    if t.schema.options.get("deletion-vectors.enabled") and not t.schema.is_primary_key_table:
        t.delete_where({"k": batch[0][0]})


def _reference(table, split, full: bool, history) -> CommitMessage | None:
    """The bucket's manager compacting in one go (what `compact_split` did before planning was split off)."""
    full = full or full_compaction_required(table)
    if table.schema.is_primary_key_table:
        result = merge_tree_manager(table, split, history=history).compact(full)
    else:
        result = AppendCompactManager(table, split, split_dir(table, split)).compact(full)
    if result is None or result.is_empty():
        return None
    msg = CommitMessage(split.partition, split.bucket, split.total_buckets, list(result.after), list(result.before),
                        list(result.changelog))
    if isinstance(result, DvCompactResult):
        msg.new_index_files, msg.deleted_index_files = dv_index_change(table.indexes, split, result.vectors)
    return msg


def _shape(files, old: set[str]) -> list[tuple]:
    """Files compared across two runs: upgraded ones by name, written ones by content and place."""
    return sorted((f.file_name if f.file_name in old else "", f.level, f.row_count, f.min_key, f.max_key,
                   f.min_sequence_number, f.max_sequence_number, f.delete_row_count) for f in files)


def _rows(t) -> list[dict]:
    return sorted(t.to_arrow().to_pylist(), key=lambda r: tuple((v is None, str(v)) for v in r.values()))


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(step, min_size=2, max_size=8), full=st.booleans())
def test_plan_then_run_equals_one_go(tmp_path, engine, steps, full) -> None:
    t = _table(tmp_path, engine)
    for kind, batch in steps:
        if kind == "write":
            _write(t, batch)
        else:
            compact_table(t, full=kind == "full")
    snapshot = t.latest_snapshot()
    if snapshot is None:
        return
    # the same table twice: the reference compacts one copy, plan + run the other
    copy = tmp_path / f"wh{next(_n)}"
    shutil.copytree(t.path.rsplit("/db.db/", 1)[0], copy)
    other = FileSystemCatalog(str(copy)).get_table("db.t")
    history = compaction_history(t)
    expected, got = [], []
    for split, split2 in zip(t.plan(snapshot.id), other.plan(snapshot.id), strict=True):
        ref = _reference(t, split, full, history)
        unit = plan_bucket(other, split2, full, history)
        msg = None
        if unit is not None:
            # run as a worker would: a freshly opened table, the files by name
            worker = FileSystemCatalog(str(copy)).get_table("db.t")
            msg = run_planned(worker, split2, [f.file_name for f in unit.files], unit.output_level,
                              full or unit.file_rewrite, PREFIX)
        assert (ref is None) == (msg is None)
        if ref is None or msg is None:
            continue
        old = {f.file_name for f in ref.deleted_files}
        assert [f.file_name for f in msg.deleted_files] == [f.file_name for f in ref.deleted_files]
        assert _shape(msg.new_files, old) == _shape(ref.new_files, old)
        assert _shape(msg.changelog_files, set()) == _shape(ref.changelog_files, set())
        assert [e.file_name for e in msg.deleted_index_files] == [e.file_name for e in ref.deleted_index_files]
        assert len(msg.new_index_files) == len(ref.new_index_files)
        assert all(f.file_name.startswith(PREFIX) for f in msg.new_files if f.file_name not in old)
        assert all(f.file_name.startswith(changelog_prefix(PREFIX)) for f in msg.changelog_files)
        expected.append(ref)
        got.append(msg)
    event(f"{engine}: {len(got)} buckets compacted")
    if expected:
        commit_compaction(t, expected)
        commit_compaction(other, got)
    assert _rows(other) == _rows(t)
    for split, split2 in zip(t.plan(), other.plan(), strict=True):
        names = {f.file_name for f in split.files} & {f.file_name for f in split2.files}
        v1 = load_vectors(t.io, t.path, split.dv_index)
        v2 = load_vectors(other.io, other.path, split2.dv_index)
        assert {n: list(v) for n, v in v1.items() if n in names} == {n: list(v) for n, v in v2.items() if n in names}


def _three_level0_files(tmp_path):
    t = _table(tmp_path, "deduplicate")
    for i in range(3):
        _write(t, [(k, i, "x", "+I") for k in range(10)])
    return t


def test_compact_split_is_plan_then_run(tmp_path) -> None:
    t = _three_level0_files(tmp_path)
    for split in t.plan():
        unit = plan_bucket(t, split, full=True)
        assert unit is not None and unit.output_level == t.options.num_levels() - 1
        assert {f.file_name for f in unit.files} == {f.file_name for f in split.files}
    msgs = [m for s in t.plan() if (m := compact_split(t, s, full=True)) is not None]
    assert msgs and all(f.file_name.startswith("data-") for m in msgs for f in m.new_files)


def test_run_planned_refuses_a_unit_it_cannot_run(tmp_path) -> None:
    t = _three_level0_files(tmp_path)
    split = t.plan()[0]
    names = [f.file_name for f in split.files]
    on_disk = sorted(i.name for i in t.io.list(split_dir(t, split)))
    with pytest.raises(NotFoundError, match="nope"):
        run_planned(t, split, [*names, "nope.parquet"], 5, True, PREFIX)
    with pytest.raises(InvalidInputError, match="twice"):
        run_planned(t, split, names + names[:1], 5, True, PREFIX)
    with pytest.raises(InvalidInputError, match="output_level"):
        run_planned(t, split, names, 99, True, PREFIX)
    with pytest.raises(InvalidInputError, match="file_prefix"):
        run_planned(t, split, names, 5, True, "a/b-")
    assert sorted(i.name for i in t.io.list(split_dir(t, split))) == on_disk, "nothing was written"
