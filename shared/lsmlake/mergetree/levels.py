"""The levels of one bucket's LSM tree.

Level 0 holds one sorted run per file (newest first by max sequence number); each level >= 1 holds
exactly one sorted run whose files do not overlap in key range.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from lsmlake.errors import InvariantError
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.mergetree.file_keys import FileKeys
from lsmlake.mergetree.sorted_run import LevelSortedRun, SortedRun


def writers_stall(sorted_runs: int, stop_trigger: int) -> bool:
    """Whether writers of a bucket with this many sorted runs wait for compaction (`num-sorted-run.stop-trigger`):
    past the trigger each new run makes every read merge one more, so writing on would outrun compaction."""
    return sorted_runs > stop_trigger


def _level0_order(f: DataFileMeta) -> tuple[int, int, int, str]:
    # newest first; ties broken deterministically
    return (-f.max_sequence_number, f.min_sequence_number, f.creation_time_ms or 0, f.file_name)


class Levels:
    """Files of a bucket arranged in levels; updated as files are added and compactions land."""

    def __init__(self, keys: FileKeys, files: Iterable[DataFileMeta], num_levels: int) -> None:
        files = list(files)
        if num_levels < 2:
            raise InvariantError(f"num-levels must be at least 2, got {num_levels}")
        highest = max((f.level for f in files), default=0)
        # A table written with more levels than configured keeps its files where they are.
        self.num_levels = max(num_levels, highest + 1)
        self.keys = keys
        self.level0: list[DataFileMeta] = []
        self.runs: list[SortedRun] = [SortedRun(()) for _ in range(self.num_levels)]
        self._add(files)
        placed = len(self.level0) + sum(len(r.files) for r in self.runs[1:])
        if placed != len(files):
            raise InvariantError(f"{len(files)} files restored but {placed} placed in levels")

    # -- queries -------------------------------------------------------------------------------

    @property
    def max_level(self) -> int:
        return self.num_levels - 1

    def run_of(self, level: int) -> SortedRun:
        return self.runs[level]

    def number_of_sorted_runs(self) -> int:
        return len(self.level0) + sum(1 for r in self.runs[1:] if r.files)

    def non_empty_highest_level(self) -> int:
        """The highest level holding a file; -1 when the bucket is empty."""
        for level in range(self.max_level, 0, -1):
            if self.runs[level].files:
                return level
        return 0 if self.level0 else -1

    def level_sorted_runs(self) -> list[LevelSortedRun]:
        """Every sorted run, newest first: level-0 files one by one, then levels 1, 2, ..."""
        out = [LevelSortedRun(0, SortedRun.single(f)) for f in self.level0]
        out.extend(LevelSortedRun(i, r) for i, r in enumerate(self.runs) if i > 0 and r.files)
        return out

    def all_files(self) -> list[DataFileMeta]:
        return list(self.level0) + [f for r in self.runs[1:] for f in r.files]

    def total_size(self) -> int:
        return sum(f.file_size for f in self.all_files())

    # -- changes -------------------------------------------------------------------------------

    def add_level0_file(self, f: DataFileMeta) -> None:
        if f.level != 0:
            raise InvariantError(f"file {f.file_name} is on level {f.level}, not 0")
        self._add([f])

    def update(self, before: Sequence[DataFileMeta], after: Sequence[DataFileMeta]) -> None:
        """Replace compaction inputs by its outputs."""
        gone = {(f.level, f.file_name) for f in before}
        self.level0 = [f for f in self.level0 if (0, f.file_name) not in gone]
        for level in range(1, self.num_levels):
            run = self.runs[level]
            if any((level, f.file_name) in gone for f in run.files):
                self.runs[level] = SortedRun(tuple(f for f in run.files if (level, f.file_name) not in gone))
        self._add(after)

    def _add(self, files: Iterable[DataFileMeta]) -> None:
        by_level: dict[int, list[DataFileMeta]] = {}
        for f in files:
            if not 0 <= f.level < self.num_levels:
                raise InvariantError(f"file {f.file_name} has level {f.level} outside 0..{self.max_level}")
            by_level.setdefault(f.level, []).append(f)
        if 0 in by_level:
            self.level0 = sorted(self.level0 + by_level.pop(0), key=_level0_order)
        for level, new in by_level.items():
            self.runs[level] = SortedRun.of(list(self.runs[level].files) + new, self.keys)
