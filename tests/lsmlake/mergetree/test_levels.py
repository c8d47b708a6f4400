"""Levels, sorted runs and interval partitioning hold their invariants."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from lsmlake.errors import InvariantError
from lsmlake.mergetree.file_keys import FileKeys
from lsmlake.mergetree.interval_partition import interval_partition
from lsmlake.mergetree.levels import Levels
from lsmlake.mergetree.sorted_run import SortedRun
from tests.support.compaction import INT, file

KEYS = FileKeys([INT])


def test_restore_places_every_file_and_orders_level0_newest_first() -> None:
    a, b = file(10, 0, 1, 5, seq=3), file(10, 0, 2, 8, seq=7)
    c, d = file(50, 3, 1, 4), file(50, 3, 5, 9)
    e = file(100, 5, 0, 100)
    levels = Levels(KEYS, [a, c, b, e, d], num_levels=6)
    assert levels.level0 == [b, a]
    assert levels.run_of(3).files == (c, d)
    assert levels.number_of_sorted_runs() == 4
    assert levels.non_empty_highest_level() == 5
    assert [r.level for r in levels.level_sorted_runs()] == [0, 0, 3, 5]
    assert sorted(f.file_name for f in levels.all_files()) == sorted(f.file_name for f in [a, b, c, d, e])


def test_a_level_refuses_overlapping_files() -> None:
    with pytest.raises(InvariantError, match="overlap"):
        Levels(KEYS, [file(1, 2, 1, 5), file(1, 2, 5, 9)], num_levels=6)


def test_update_replaces_inputs_by_outputs() -> None:
    a, b, c = file(1, 0, 1, 5, seq=1), file(1, 0, 3, 9, seq=2), file(5, 5, 0, 20)
    levels = Levels(KEYS, [a, b, c], num_levels=6)
    out = file(7, 5, 0, 20)
    levels.update([a, b, c], [out])
    assert levels.level0 == [] and levels.run_of(5).files == (out,)
    up = file(1, 0, 30, 40, seq=3)
    levels.add_level0_file(up)
    levels.update([up], [up.upgrade(4)])
    assert levels.run_of(4).files[0].file_name == up.file_name
    assert levels.number_of_sorted_runs() == 2


def test_levels_grow_to_hold_files_of_a_deeper_tree() -> None:
    assert Levels(KEYS, [file(1, 7, 0, 1)], num_levels=3).num_levels == 8
    with pytest.raises(InvariantError):
        Levels(KEYS, [], num_levels=1)


ranges = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 15)), min_size=1, max_size=25)


@settings(max_examples=200, deadline=None)
@given(ranges=ranges)
def test_interval_partition_sections_are_disjoint_and_runs_sorted(ranges) -> None:
    files = [file(1, 0, lo, lo + width) for lo, width in ranges]
    sections = interval_partition(files, KEYS)
    seen = [f.file_name for s in sections for r in s for f in r.files]
    assert sorted(seen) == sorted(f.file_name for f in files)
    bounds = []
    for section in sections:
        fs = [f for r in section for f in r.files]
        bounds.append((min(KEYS.min(f) for f in fs), max(KEYS.max(f) for f in fs)))
        for r in section:
            SortedRun.of(list(r.files), KEYS)  # raises if a run overlaps itself
    assert all(a[1] < b[0] for a, b in zip(bounds, bounds[1:], strict=False)), "sections must not overlap"
    # Greedy partition uses as few runs as the maximum number of files covering one key.
    for section in sections:
        fs = [f for r in section for f in r.files]
        depth = max(sum(1 for f in fs if KEYS.min(f)[0] <= k <= KEYS.max(f)[0])
                    for k in range(min(KEYS.min(f)[0] for f in fs), max(KEYS.max(f)[0] for f in fs) + 1))
        assert len(section) == depth
