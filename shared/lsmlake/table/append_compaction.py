"""Small-file compaction of append-only buckets: neighbouring small files are concatenated in order.

Files are ordered by sequence number (then creation time and name, for writers that record none),
so the rows of a bucket keep their order.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from lsmlake.format import options as opts
from lsmlake.format.data_file_meta import FILE_SOURCE_COMPACT, DataFileMeta
from lsmlake.format.data_file_read import read_data_file
from lsmlake.format.data_file_writer import DataFileWriter
from lsmlake.mergetree.compact.lookup import DvCompactResult
from lsmlake.mergetree.compact.rewriter import DATA_PREFIX
from lsmlake.mergetree.compact.unit import CompactResult, CompactUnit
from lsmlake.table.read import load_vectors
from lsmlake.table.scan import Split

if TYPE_CHECKING:
    from lsmlake.table.file_store import FileStore


def _order(f: DataFileMeta) -> tuple[int, int, int, str]:
    return (f.min_sequence_number, f.max_sequence_number, f.creation_time_ms or 0, f.file_name)


class AppendCompactManager:
    """Picks and concatenates the small files of one append-only bucket."""

    def __init__(self, table: FileStore, split: Split, bucket_dir: str, file_prefix: str = DATA_PREFIX) -> None:
        """Deleted rows (the split's deletion vectors) are dropped by the rewrite; new files start with
        `file_prefix`."""
        o = table.options
        self.file_prefix = file_prefix
        self.split = split
        self.table = table
        self.files = sorted(split.files, key=_order)
        self.bucket_dir = bucket_dir
        self.target = o.target_file_size(False)
        self.min_num = o.require(opts.COMPACTION_MIN_FILE_NUM)
        self.max_num = o.require(opts.COMPACTION_MAX_FILE_NUM)

    @cached_property
    def vectors(self) -> dict[str, BitMap]:
        """The bucket's deletion vectors, read on first use (planning needs none)."""
        return load_vectors(self.table.io, self.table.path, self.split.dv_index)

    def pick(self, full: bool = False) -> list[DataFileMeta]:
        """A window of consecutive files: full takes all; otherwise enough small files to fill a target."""
        if full:
            return self.files if len(self.files) > 1 else []
        window: list[DataFileMeta] = []
        size = 0
        for f in self.files:
            window.append(f)
            size += f.file_size
            if (size >= self.target and len(window) >= self.min_num) or len(window) >= self.max_num:
                return window
            if size >= self.target:  # too few files for their size: slide the window on
                size -= window.pop(0).file_size
        return []

    def plan(self, full: bool = False) -> CompactUnit | None:
        """The unit `compact` would run (output level 0), or None when fewer than two files qualify; a file with
        too many deleted rows (`too_deleted`) qualifies alone."""
        picked = [f for f in self.pick(full) if f.row_count > 0] if full else self.pick(full)
        heavy = [] if full else self.too_deleted()
        if heavy:
            names = {f.file_name for f in picked}
            picked = sorted(picked + [f for f in heavy if f.file_name not in names], key=_order)
            return CompactUnit(0, tuple(picked))
        return CompactUnit(0, tuple(picked)) if len(picked) >= 2 else None

    def too_deleted(self) -> list[DataFileMeta]:
        """Paimon's rule for bucket -1 append tables with deletion vectors: the files whose vector marks more than
        `compaction.delete-ratio-threshold` of their rows (or whose vector's cardinality is unknown)."""
        o = self.table.options
        dv_index = getattr(self.split, "dv_index", None)
        if o.bucket() != -1 or not o.get(opts.DELETION_VECTORS_ENABLED) or dv_index is None:
            return []
        cardinality = {r.file_name: r.cardinality for r in dv_index.dv_ranges or ()}
        threshold = o.require(opts.COMPACTION_DELETE_RATIO_THRESHOLD)
        return [f for f in self.files if f.file_name in cardinality
                and (cardinality[f.file_name] is None or cardinality[f.file_name] > f.row_count * threshold)]

    def compact(self, full: bool = False) -> CompactResult | None:
        unit = self.plan(full)
        return None if unit is None else self.run(unit)

    def run(self, unit: CompactUnit) -> CompactResult:
        """Concatenate the unit's files, in the unit's order, into new level-0 files."""
        picked = list(unit.files)
        schema = self.table.schema
        tables = [read_data_file(self.table.io, f.path_in(self.bucket_dir), schema, schema.field_names, [],
                                 self.vectors.get(f.file_name))
                  for f in picked]
        rows = pa.concat_tables(tables)
        counts = np.array([t.num_rows for t in tables], np.int64)
        seq = np.concatenate([np.full(c, f.min_sequence_number, np.int64) for c, f in zip(counts, picked, strict=True)])
        nonempty = counts > 0
        ends = np.cumsum(counts)[nonempty] - 1
        seq[ends] = np.array([f.max_sequence_number for f in picked], np.int64)[nonempty]
        after = DataFileWriter(self.table.io, schema).write(self.bucket_dir, rows, seq, None, level=0,
                                                             file_source=FILE_SOURCE_COMPACT, prefix=self.file_prefix)
        if self.vectors:
            gone = {f.file_name for f in picked}
            return DvCompactResult(before=list(picked), after=after,
                                   vectors={n: v for n, v in self.vectors.items() if n not in gone})
        return CompactResult(before=list(picked), after=after)
