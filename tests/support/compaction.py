"""Building files and runs for strategy tests (sizes matter, keys are disjoint)."""

from __future__ import annotations

import itertools

from lsmlake.format.binary_row import serialize_row
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.format.stats import EMPTY_STATS
from lsmlake.format.types import DataType
from lsmlake.mergetree.sorted_run import LevelSortedRun, SortedRun

INT = DataType("BIGINT", nullable=False)
_names = itertools.count()


def file(size: int, level: int = 0, min_key: int = 0, max_key: int = 0, seq: int = 0,
         deletes: int = 0) -> DataFileMeta:
    return DataFileMeta(
        file_name=f"f{next(_names)}", file_size=size, row_count=1, min_key=serialize_row([min_key], [INT]),
        max_key=serialize_row([max_key], [INT]), key_stats=EMPTY_STATS, value_stats=EMPTY_STATS,
        min_sequence_number=seq, max_sequence_number=seq, schema_id=0, level=level, delete_row_count=deletes)


def runs(spec: list[tuple[int, int]]) -> list[LevelSortedRun]:
    """[(level, size), ...] newest first -> level sorted runs of one file each."""
    return [LevelSortedRun(level, SortedRun.single(file(size, level))) for level, size in spec]


