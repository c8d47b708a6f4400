"""The size-ratio window of universal compaction, against the picks Paimon master makes.

Since apache/paimon#9185 (commit d2a22e0947, 2026-08-12; on master only, after release 2.0.0) a run that fails
the size ratio ends the window only when nothing is picked yet or the run is on level 2 or above; a run on
level 0 or 1 is taken once the pick is certain, and the runs above are weighed against the bigger sum.
The rows are the cases of that change, of apache/paimon#8993 (force-up with a level-1 run) and the
neighbouring cases of Paimon's `UniversalCompactionTest`, as inputs and expected picks.
"""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from lsmlake.mergetree.compact.force_up_level0 import ForceUpLevel0Compaction
from lsmlake.mergetree.compact.unit import CompactUnit
from lsmlake.mergetree.compact.universal import UniversalCompaction
from tests.support.compaction import runs

Spec = list[tuple[int, int]]  # (level, size), newest first


def _shape(unit: CompactUnit | None) -> tuple[list[int], int] | None:
    return None if unit is None else ([f.file_size for f in unit.files], unit.output_level)


@pytest.mark.parametrize(("force_up", "max_amp", "trigger", "levels", "spec", "expected"), [
    # force-up: level 0 alone fails against level 1, but is forced; level 0 + 1 = 100 may take level 2 = 100
    (True, 200, 5, 3, [(0, 1), (1, 99), (2, 100)], ([1, 99, 100], 2)),
    (True, 200, 5, 3, [(0, 1), (1, 99), (2, 102)], ([1, 99], 1)),  # 100 * 1.01 < 102: level 2 stays
    # size ratio: 10 + 10 picks; 100 and 10 are level 0, taken; 130 * 1.01 < 10000 on level 3 ends it
    (False, 200, 5, 5, [(0, 10), (0, 10), (0, 100), (0, 10), (3, 10000)], ([10, 10, 100, 10], 2)),
    # file number (4 > 3) picks 10 + 20; 97 on level 1 is taken; 127 * 1.01 >= 100 takes level 2
    (False, 200, 3, 3, [(0, 10), (0, 20), (1, 97), (2, 100)], ([10, 20, 97, 100], 2)),
    # nothing picked yet: a too-big level-0 run still ends the window (3 runs: no file-number pick)
    (False, 200, 3, 3, [(0, 10), (0, 100), (2, 1000)], None),
    # UniversalCompactionTest.testNoOutputLevel0
    (False, 25, 3, 3, [(0, 1), (0, 1), (1, 1), (2, 50)], ([1, 1, 1], 1)),
    (False, 25, 3, 3, [(0, 1), (0, 2), (1, 3), (2, 50)], ([1, 2, 3], 1)),
    # UniversalCompactionTest.testPick, by size ratio and by file number
    (False, 25, 3, 4, [(0, 1), (1, 1), (2, 1), (3, 50)], ([1, 1, 1], 2)),
    (False, 25, 3, 4, [(0, 1), (1, 2), (2, 3), (3, 50)], ([1, 2, 3], 2)),
    # UniversalCompactionTest.testExtremeCaseNoOutputLevel0
    (False, 200, 5, 6, [(0, 1), (0, 1), (0, 1), (0, 1024), (0, 1 << 20)], ([1, 1, 1, 1024, 1 << 20], 5)),
    # UniversalCompactionTest.testLookup (force-up, amplification 25, trigger 3)
    (True, 25, 3, 3, [(0, 1), (0, 2), (0, 2), (0, 2)], ([1, 2, 2, 2], 2)),
    (True, 25, 3, 3, [(0, 1), (1, 2), (2, 2)], ([1, 2, 2], 2)),
    (True, 25, 3, 3, [(0, 1), (2, 2)], ([1], 1)),
])
def test_paimon_picks(force_up: bool, max_amp: int, trigger: int, levels: int, spec: Spec,
                      expected: tuple[list[int], int] | None) -> None:
    universal = UniversalCompaction(max_size_amp=max_amp, size_ratio=1, num_run_trigger=trigger)
    strategy = ForceUpLevel0Compaction(universal) if force_up else universal
    assert _shape(strategy.pick(levels, runs(spec))) == expected


def _ratio_pick(strategy: UniversalCompaction, sizes: list[int]) -> list[int]:
    """Paimon's size-ratio helper: the i-th run on level i; the picked prefix becomes one run."""
    unit = strategy.pick_for_size_ratio(len(sizes), runs([(i, s) for i, s in enumerate(sizes)]))
    if unit is None:
        return sizes
    n = len(unit.files)
    return [sum(sizes[:n])] + sizes[n:]


def test_paimon_size_ratio_chain() -> None:
    """UniversalCompactionTest.testSizeRatio: amplification 25, ratio 1, trigger 5; a run of 1 is added each step."""
    expected = ["5", "1 5", "1 1 5", "1 1 1 5", "4 5", "1 4 5", "1 1 4 5", "3 4 5", "1 3 4 5", "2 3 4 5",
                "1 2 3 4 5", "16", "1 16", "1 1 16", "1 1 1 16", "4 16", "1 4 16", "1 1 4 16", "3 4 16",
                "1 3 4 16", "2 3 4 16", "1 2 3 4 16", "11 16"]
    strategy = UniversalCompaction(max_size_amp=25, size_ratio=1, num_run_trigger=5)
    sizes = [1, 1, 1, 1]
    seen = []
    for _ in expected:
        sizes = _ratio_pick(strategy, [1] + sizes)
        seen.append(" ".join(map(str, sizes)))
    assert seen == expected


@pytest.mark.parametrize(("ratio", "expected"), [(10, [8, 9, 10]), (20, [27])])
def test_paimon_size_ratio_threshold(ratio: int, expected: list[int]) -> None:
    """UniversalCompactionTest.testSizeRatioThreshold: 8 * 1.1 < 9 on level 1 ends a window not yet picked."""
    strategy = UniversalCompaction(max_size_amp=25, size_ratio=ratio, num_run_trigger=2)
    assert _ratio_pick(strategy, [8, 9, 10]) == expected


@st.composite
def _bucket(draw: st.DrawFn) -> tuple[int, Spec]:
    """Runs as a bucket holds them: any number on level 0, then at most one per level, levels increasing."""
    num_levels = draw(st.integers(2, 6))
    level0 = draw(st.integers(0, 6))
    upper = sorted(draw(st.sets(st.integers(1, num_levels - 1), max_size=num_levels - 1)))
    levels = [0] * level0 + upper
    sizes = draw(st.lists(st.integers(1, 1000), min_size=len(levels), max_size=len(levels)))
    return num_levels, list(zip(levels, sizes, strict=True))


@settings(max_examples=400, deadline=None)
@given(_bucket(), st.integers(2, 6), st.integers(0, 50), st.booleans())
def test_a_pick_never_leaves_level_1_behind(bucket: tuple[int, Spec], trigger: int, ratio: int,
                                            force_up: bool) -> None:
    """A pick is a prefix written above every run it takes and below the next run, never to level 0;
    short of everything, it stops before a run on level 2 or above (level 1 cannot inflate)."""
    num_levels, spec = bucket
    universal = UniversalCompaction(size_ratio=ratio, num_run_trigger=trigger)
    strategy = ForceUpLevel0Compaction(universal) if force_up else universal
    unit = strategy.pick(num_levels, runs(spec))
    if unit is None:
        return
    n = len(unit.files)
    assert [f.file_size for f in unit.files] == [size for _, size in spec[:n]]
    assert unit.output_level >= max(1, *(level for level, _ in spec[:n]))
    if n < len(spec):
        assert spec[n][0] >= 2 and unit.output_level < spec[n][0]
    else:
        assert unit.output_level == num_levels - 1
