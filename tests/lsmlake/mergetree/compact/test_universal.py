"""Universal compaction against the hand-worked sequences of Paimon's size-tiered rules."""

from __future__ import annotations

import pytest

from lsmlake.mergetree.compact.force_up_level0 import ForceUpLevel0Compaction
from lsmlake.mergetree.compact.full import EarlyFullCompaction, pick_full_compaction
from lsmlake.mergetree.compact.universal import UniversalCompaction
from tests.support.compaction import file, runs

NUM_LEVELS = 6  # trigger 5 + 1


def _pick(spec):
    unit = UniversalCompaction().pick(NUM_LEVELS, runs(spec))
    if unit is None:
        return None
    return unit.output_level, sum(f.file_size for f in unit.files), len(unit.files)


def test_the_documented_chain_of_states() -> None:
    """Add a size-1 level-0 run at a time; after each pick the runs must be exactly as listed."""
    expected = ["1", "1 1", "1 1 1", "1 1 1 1", "5", "1 5", "1 1 5", "1 1 1 5", "4 5", "1 4 5", "1 1 4 5",
                "3 4 5", "1 3 4 5", "2 3 4 5", "1 2 3 4 5"]
    strategy = UniversalCompaction()
    state: list[tuple[int, int]] = []  # (level, size), newest first
    seen = []
    for _ in expected:
        state = [(0, 1)] + state
        unit = strategy.pick(NUM_LEVELS, runs(state))
        if unit is not None:
            n = len(unit.files)
            state = [(unit.output_level, sum(size for _, size in state[:n]))] + state[n:]
        seen.append(" ".join(str(size) for _, size in state))
    assert seen == expected


@pytest.mark.parametrize("spec,expected", [
    ([(0, 1)] * 5, (5, 5, 5)),                                        # 1 1 1 1 1 -> 5
    ([(0, 1), (5, 5)], None),                                         # 1 5
    ([(0, 1), (0, 1), (5, 5)], None),                                 # 1 1 5
    ([(0, 1)] * 3 + [(5, 5)], None),                                  # 1 1 1 5
    ([(0, 1)] * 4 + [(5, 5)], (4, 4, 4)),                             # 1 1 1 1 5 -> 4 5
    ([(0, 1), (4, 4), (5, 5)], None),                                 # 1 4 5
    ([(0, 1), (0, 1), (4, 4), (5, 5)], None),                         # 1 1 4 5
    ([(0, 1)] * 3 + [(4, 4), (5, 5)], (3, 3, 3)),                     # 1 1 1 4 5 -> 3 4 5
    ([(0, 1), (3, 3), (4, 4), (5, 5)], None),                         # 1 3 4 5
    ([(0, 1), (0, 1), (3, 3), (4, 4), (5, 5)], (2, 2, 2)),            # 1 1 3 4 5 -> 2 3 4 5
    ([(0, 1), (2, 2), (3, 3), (4, 4), (5, 5)], None),                 # 1 2 3 4 5: amplification exactly 200%
])
def test_single_picks(spec, expected) -> None:
    assert _pick(spec) == expected


def test_size_amplification_beyond_200_percent_picks_everything() -> None:
    assert _pick([(0, 1), (2, 2), (3, 3), (4, 5), (5, 5)]) == (5, 16, 5)  # 11 > 2 * 5


def test_file_number_trigger_forces_the_surplus() -> None:
    # 7 runs with growing sizes: no amplification, no ratio; 7 > 5 forces the 3 newest into one run,
    # written just above the next run (level 2 - 1).
    spec = [(0, 1), (0, 3), (0, 9), (2, 27), (3, 81), (4, 243), (5, 2000)]
    unit = UniversalCompaction().pick(NUM_LEVELS, runs(spec))
    assert unit is not None
    assert [f.file_size for f in unit.files] == [1, 3, 9] and unit.output_level == 1


def test_output_is_never_level_zero() -> None:
    # the next run is on level 1, so "its level minus one" would be 0: the pick takes it along instead
    spec = [(0, 1), (0, 3), (0, 9), (1, 27), (2, 81), (3, 243), (5, 2000)]
    unit = UniversalCompaction().pick(NUM_LEVELS, runs(spec))
    assert unit is not None and unit.output_level == 1
    assert [f.file_size for f in unit.files] == [1, 3, 9, 27]


def test_size_ratio_option() -> None:
    # With a 50% ratio, 1 1 1 1 (sum 4) may absorb a run of 6 but not 7.
    s = UniversalCompaction(size_ratio=50)
    u = s.pick(NUM_LEVELS, runs([(0, 1), (0, 1), (0, 1), (0, 1), (4, 6), (5, 100)]))
    assert u is not None and [f.file_size for f in u.files] == [1, 1, 1, 1, 6] and u.output_level == 4
    u = s.pick(NUM_LEVELS, runs([(0, 1), (0, 1), (0, 1), (0, 1), (4, 7), (5, 100)]))
    assert u is not None and [f.file_size for f in u.files] == [1, 1, 1, 1] and u.output_level == 3


def test_optimization_interval_triggers_a_full_pick() -> None:
    now = [0.0]
    s = UniversalCompaction(optimization_interval_ms=60_000, clock=lambda: now[0])
    spec = [(0, 1), (5, 5)]
    assert s.pick(NUM_LEVELS, runs(spec)) is None
    now[0] = 61.0
    unit = s.pick(NUM_LEVELS, runs(spec))
    assert unit is not None and unit.output_level == 5 and len(unit.files) == 2
    assert s.pick(NUM_LEVELS, runs(spec)) is None  # the interval starts again


def test_force_up_level0_moves_level0_up_when_universal_picks_nothing() -> None:
    s = ForceUpLevel0Compaction(UniversalCompaction())
    unit = s.pick(NUM_LEVELS, runs([(0, 1), (5, 50)]))
    assert unit is not None and unit.output_level == 4 and [f.file_size for f in unit.files] == [1]
    unit = s.pick(NUM_LEVELS, runs([(0, 1), (0, 2), (3, 50), (5, 500)]))
    assert unit is not None and unit.output_level == 2 and [f.file_size for f in unit.files] == [1, 2]
    assert s.pick(NUM_LEVELS, runs([(3, 50), (5, 500)])) is None
    unit = s.pick(NUM_LEVELS, runs([(0, 1), (0, 1)]))  # only level 0: everything to the max level
    assert unit is not None and unit.output_level == 5


def test_full_compaction_picks() -> None:
    assert pick_full_compaction(NUM_LEVELS, []) is None
    assert pick_full_compaction(NUM_LEVELS, runs([(5, 10)])) is None
    unit = pick_full_compaction(NUM_LEVELS, runs([(0, 1), (3, 3)]))
    assert unit is not None and unit.output_level == 5 and len(unit.files) == 2
    from lsmlake.mergetree.sorted_run import LevelSortedRun, SortedRun
    with_deletes = file(10, level=5, deletes=2)
    unit = pick_full_compaction(NUM_LEVELS, [LevelSortedRun(5, SortedRun.single(with_deletes))])
    assert unit is not None and unit.file_rewrite and unit.files == (with_deletes,)


def test_early_full_compaction_every_n_commits() -> None:
    e = EarlyFullCompaction(3)
    spec = runs([(0, 1), (5, 5)])
    for _ in range(2):
        e.on_commit()
        assert e.pick(NUM_LEVELS, spec) is None
    e.on_commit()
    unit = e.pick(NUM_LEVELS, spec)
    assert unit is not None and unit.output_level == 5
    assert not e.due()
    assert EarlyFullCompaction(None).pick(NUM_LEVELS, spec) is None
