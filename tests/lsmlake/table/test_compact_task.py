"""The merge task's choices (upgrade or rewrite, dropping deletes) and the write-stall signals."""

from __future__ import annotations

import pyarrow as pa

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.mergetree.compact.unit import CompactUnit
from lsmlake.table.compact import merge_tree_manager


def _table(tmp_path, **options):
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    o = {"bucket": "1"}
    o.update(options)
    return cat.create_table("db.t", "k BIGINT NOT NULL, v STRING", primary_keys=["k"], options=o)


def _write(t, keys, kind="+I", v="x"):
    t.write_arrow(pa.table({"k": pa.array(keys, pa.int64()), "v": [v] * len(keys), "_row_kind": [kind] * len(keys)}))


def test_big_disjoint_file_is_upgraded_not_rewritten(tmp_path) -> None:
    t = _table(tmp_path, **{"target-file-size": "1 kb"})  # every file is "big" (>= 70% of 1 kb)
    _write(t, list(range(0, 200)))
    _write(t, list(range(1000, 1200)))
    m = merge_tree_manager(t, t.plan()[0])
    unit = CompactUnit(3, tuple(m.levels.level0))  # disjoint big files (rolled at 1 kb) to level 3
    from lsmlake.mergetree.compact.task import MergeTreeCompactTask
    task = MergeTreeCompactTask(m.levels.keys, m.rewriter, unit, m.levels.max_level, m.min_file_size, False)
    result = task.run()
    assert task.upgraded == len(unit.files) > 1 and task.rewritten == 0
    assert {f.file_name for f in result.before} == {f.file_name for f in result.after}
    assert {f.level for f in result.after} == {3}


def test_overlapping_files_are_rewritten_and_deletes_dropped_at_the_bottom(tmp_path) -> None:
    t = _table(tmp_path)
    _write(t, [1, 2, 3])
    _write(t, [2], kind="-D")
    m = merge_tree_manager(t, t.plan()[0])
    result = m.compact(full=True)
    assert result is not None
    (out,) = result.after
    assert out.level == m.levels.max_level and out.row_count == 2 and out.delete_row_count == 0


def test_level0_file_with_deletes_is_rewritten_on_its_way_to_the_max_level(tmp_path) -> None:
    t = _table(tmp_path, **{"target-file-size": "1 kb"})
    _write(t, list(range(300)), kind="-D")
    m = merge_tree_manager(t, t.plan()[0])
    result = m.compact(full=True)
    assert result is not None and result.after == []  # only deletes: nothing survives
    assert t.to_arrow().num_rows == 0


def test_deletes_are_kept_when_older_data_may_lie_below(tmp_path) -> None:
    t = _table(tmp_path)
    _write(t, [1, 2, 3])
    from lsmlake.table.compact import compact_table
    compact_table(t, full=True)  # level 5 holds 1, 2, 3
    _write(t, [2], kind="-D")
    _write(t, [7])
    m = merge_tree_manager(t, t.plan()[0])
    unit = CompactUnit(3, tuple(m.levels.level0))
    assert not m.drop_delete(unit)  # level 5 below may hold key 2
    assert m.drop_delete(CompactUnit(5, tuple(m.levels.all_files())))


def test_write_stall_signals_follow_the_stop_trigger(tmp_path) -> None:
    t = _table(tmp_path, **{"num-sorted-run.compaction-trigger": "2", "num-sorted-run.stop-trigger": "3"})
    states = []
    for i in range(5):
        _write(t, [i])
        m = merge_tree_manager(t, t.plan()[0])
        states.append((m.levels.number_of_sorted_runs(), m.should_wait_for_latest_compaction(),
                       m.should_wait_for_preparing_checkpoint()))
    assert states == [(1, False, False), (2, False, False), (3, False, False), (4, True, False), (5, True, True)]
    assert t.options.stop_trigger() == 3
    assert _table(tmp_path / "x").options.stop_trigger() == 8  # default: trigger 5 + 3
