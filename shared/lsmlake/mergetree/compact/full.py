"""Full compaction: everything into the max level; and the early full compaction every N commits."""

from __future__ import annotations

from collections.abc import Sequence

from lsmlake.mergetree.compact.unit import CompactUnit
from lsmlake.mergetree.sorted_run import LevelSortedRun


def pick_full_compaction(num_levels: int, runs: Sequence[LevelSortedRun]) -> CompactUnit | None:
    """All runs into the max level; a lone max-level run is rewritten only for its files holding deletes."""
    max_level = num_levels - 1
    if not runs:
        return None
    if len(runs) == 1 and runs[0].level == max_level:
        with_deletes = tuple(f for f in runs[0].run.files if (f.delete_row_count or 0) > 0)
        return CompactUnit(max_level, with_deletes, file_rewrite=True) if with_deletes else None
    return CompactUnit.from_level_runs(max_level, runs)


class EarlyFullCompaction:
    """Triggers a full compaction once `delta_commits` commits have happened since the last full one."""

    def __init__(self, delta_commits: int | None) -> None:
        self.delta_commits = delta_commits
        self.commits_since_full = 0

    def on_commit(self) -> None:
        self.commits_since_full += 1

    def on_full_compaction(self) -> None:
        self.commits_since_full = 0

    def due(self) -> bool:
        return self.delta_commits is not None and self.commits_since_full >= self.delta_commits

    def pick(self, num_levels: int, runs: Sequence[LevelSortedRun]) -> CompactUnit | None:
        if not self.due():
            return None
        unit = pick_full_compaction(num_levels, runs)
        self.on_full_compaction()
        return unit
