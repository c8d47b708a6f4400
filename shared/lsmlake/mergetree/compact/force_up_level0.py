"""Force-up-level-0: universal compaction, and when it picks nothing, still move level-0 files up.

Used for tables that look up (deletion vectors, changelog-producer lookup, first-row, force-lookup; or
`compaction.force-up-level-0`): readers skip level 0 there, so new data becomes visible only once it leaves
level 0. `lookup-compact = gentle` trades that freshness for fewer rewrites (see `ForceUpLevel0Compaction`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lsmlake.mergetree.compact.unit import CompactUnit
from lsmlake.mergetree.compact.universal import UniversalCompaction
from lsmlake.mergetree.sorted_run import LevelSortedRun


@dataclass
class TriggerCount:
    """How many compaction triggers of a bucket found nothing due since level 0 last moved up (gentle mode).

    Paimon keeps it in the bucket's writer, which picks only when no compaction runs and submits what it picks;
    lsmlake's compactor keeps it with the bucket it owns and plans with a copy, kept only when the plan is sent
    (or nothing was due), since a plan may still be dropped.
    """

    count: int = 0


class ForceUpLevel0Compaction:
    """Wraps universal compaction; level-0 files are compacted up when it picks nothing.

    Radical (`max_interval` None): at every trigger. Gentle: at every `max_interval`-th trigger that found
    nothing else due, counted in `triggers` (a trigger where universal compaction picks does not count).
    """

    def __init__(self, universal: UniversalCompaction, max_interval: int | None = None,
                 triggers: TriggerCount | None = None) -> None:
        self.universal = universal
        self.max_interval = max_interval
        self.triggers = triggers if triggers is not None else TriggerCount()

    def pick(self, num_levels: int, runs: Sequence[LevelSortedRun]) -> CompactUnit | None:
        unit = self.universal.pick(num_levels, runs)
        if unit is not None:
            return unit
        if self.max_interval is not None:
            self.triggers.count += 1
            if self.triggers.count < self.max_interval:
                return None
            self.triggers.count = 0
        level0 = 0
        for r in runs:
            if r.level > 0:
                break
            level0 += 1
        if level0 == 0:
            return None
        return self.universal.pick_for_size_ratio(num_levels - 1, runs, level0, force=True)
