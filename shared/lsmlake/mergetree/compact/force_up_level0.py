"""Force-up-level-0: universal compaction, and when it picks nothing, still move level-0 files up.

Used when lookup or deletion vectors are on: readers skip level 0 there, so new data becomes
visible only once it leaves level 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from lsmlake.mergetree.compact.unit import CompactUnit
from lsmlake.mergetree.compact.universal import UniversalCompaction
from lsmlake.mergetree.sorted_run import LevelSortedRun


class ForceUpLevel0Compaction:
    """Wraps universal compaction; any level-0 file is always compacted up."""

    def __init__(self, universal: UniversalCompaction) -> None:
        self.universal = universal

    def pick(self, num_levels: int, runs: Sequence[LevelSortedRun]) -> CompactUnit | None:
        unit = self.universal.pick(num_levels, runs)
        if unit is not None:
            return unit
        level0 = 0
        for r in runs:
            if r.level > 0:
                break
            level0 += 1
        if level0 == 0:
            return None
        return self.universal.pick_for_size_ratio(num_levels - 1, runs, level0, force=True)
