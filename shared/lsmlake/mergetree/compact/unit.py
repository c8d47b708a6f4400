"""What a strategy picks (a compaction unit) and what a merge task returns (a compaction result)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.mergetree.sorted_run import LevelSortedRun


@dataclass(frozen=True)
class CompactUnit:
    """Input files of a compaction and the level its output goes to."""

    output_level: int
    files: tuple[DataFileMeta, ...]
    file_rewrite: bool = False  # rewrite even single files (full compaction of a max-level run with deletes)

    @staticmethod
    def from_level_runs(output_level: int, runs: Sequence[LevelSortedRun]) -> CompactUnit:
        return CompactUnit(output_level, tuple(f for r in runs for f in r.run.files))

    def is_noop(self) -> bool:
        """A unit with no file, or one file that would stay on its own level, changes nothing."""
        return not self.files or (len(self.files) == 1 and self.files[0].level == self.output_level
                                  and not self.file_rewrite)


@dataclass
class CompactResult:
    """Files a compaction removed and the files that replace them (upgrades appear in both)."""

    before: list[DataFileMeta] = field(default_factory=list)
    after: list[DataFileMeta] = field(default_factory=list)
    changelog: list[DataFileMeta] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not self.before and not self.after

    def merge(self, other: CompactResult) -> None:
        self.before.extend(other.before)
        self.after.extend(other.after)
        self.changelog.extend(other.changelog)
