"""A sorted run: files whose key ranges do not overlap, ordered by key."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lsmlake.errors import InvariantError
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.mergetree.file_keys import FileKeys


@dataclass(frozen=True)
class SortedRun:
    """Non-overlapping files in key order; the unit universal compaction counts and sizes."""

    files: tuple[DataFileMeta, ...]

    @staticmethod
    def of(files: Sequence[DataFileMeta], keys: FileKeys) -> SortedRun:
        """Sort the files by min key and check that no two overlap."""
        ordered = sorted(files, key=keys.min)
        for a, b in zip(ordered, ordered[1:], strict=False):
            if not keys.max(a) < keys.min(b):
                raise InvariantError(f"files {a.file_name} and {b.file_name} overlap in key range "
                                          "and cannot form one sorted run")
        return SortedRun(tuple(ordered))

    @staticmethod
    def single(f: DataFileMeta) -> SortedRun:
        return SortedRun((f,))

    @property
    def total_size(self) -> int:
        return sum(f.file_size for f in self.files)

    def is_empty(self) -> bool:
        return not self.files


@dataclass(frozen=True)
class LevelSortedRun:
    """A sorted run and the level it lives on."""

    level: int
    run: SortedRun

    @property
    def total_size(self) -> int:
        return self.run.total_size
