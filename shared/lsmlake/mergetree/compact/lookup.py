"""Compaction of deletion-vector buckets: merge the unit, and mark older versions deleted instead of rewriting.

Readers of such tables read every file above level 0 raw and skip the rows in its deletion vector,
so after each compaction every key must have exactly one live row on levels >= 1. The unit's rows
are merged and written at the output level; every key they hold is looked up in the older files
outside the unit, whose matching rows are marked deleted in their deletion vectors. The lookup
reads only key columns for deduplicate without a sequence field or changelog; otherwise whole rows,
which join the merge.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from lsmlake.format.data_file_meta import FILE_SOURCE_COMPACT, DataFileMeta
from lsmlake.format.data_file_read import ROW_POSITION, read_data_file
from lsmlake.format.row_kind import without_retractions
from lsmlake.format.schema import SEQUENCE_NUMBER, VALUE_KIND
from lsmlake.mergetree import changelog
from lsmlake.mergetree.compact.rewriter import MergeTreeCompactRewriter
from lsmlake.mergetree.compact.unit import CompactResult, CompactUnit
from lsmlake.mergetree.lookup_cache import LookupCache

_FILE = "__lsmlake_file"


@dataclass
class DvCompactResult(CompactResult):
    """A compaction result plus the bucket's deletion vectors afterwards."""

    vectors: dict[str, BitMap] = field(default_factory=dict)


def semi_join(rows: pa.Table, probe: pa.Table, keys: Sequence[str]) -> np.ndarray:
    """Mask of `rows` whose key appears in `probe` (vectorised hash join)."""
    if rows.num_rows == 0 or probe.num_rows == 0:
        return np.zeros(rows.num_rows, dtype=bool)
    distinct = pa.table([probe.column(k) for k in keys], names=list(keys)).group_by(list(keys)).aggregate([])
    idx = pa.table([rows.column(k) for k in keys] + [pa.array(np.arange(rows.num_rows), pa.int64())],
                   names=list(keys) + ["__row"])
    hit = np.zeros(rows.num_rows, dtype=bool)
    hit[idx.join(distinct, keys=list(keys), join_type="inner").column("__row").to_numpy()] = True
    return hit


class LookupCompaction:
    """Runs one unit of a deletion-vector bucket."""

    def __init__(self, rewriter: MergeTreeCompactRewriter, vectors: dict[str, BitMap], all_files: list[DataFileMeta],
                 changelog_producer: str, cache: LookupCache | None = None) -> None:
        self.cache = cache
        self.rewriter = rewriter
        self.schema = rewriter.schema
        self.vectors = vectors
        self.all_files = all_files
        self.changelog_producer = changelog_producer
        mf = rewriter.merge_function
        self.key_only = (type(mf).__name__ == "Deduplicate" and not mf.ordering.sequence_fields  # type: ignore
                         and changelog_producer == "none")

    def _cached_keys(self, f: DataFileMeta, keys: list[str]) -> pa.Table:
        """Keys and positions of a file from the lookup cache, with the file's deletion vector applied."""
        assert self.cache is not None
        table = self.cache.get(f.file_name, lambda: read_data_file(
            self.rewriter.io, f.path_in(self.rewriter.bucket_dir), self.schema, keys, [], None, True))
        deleted = self.vectors.get(f.file_name)
        if deleted is None or not len(deleted):
            return table
        gone = np.fromiter(deleted, dtype=np.int64, count=len(deleted))
        return table.filter(pa.array(~np.isin(table.column(ROW_POSITION).to_numpy(), gone)))

    def _read(self, f: DataFileMeta, columns: list[str], system: list[str], positions: bool = False) -> pa.Table:
        return read_data_file(self.rewriter.io, f.path_in(self.rewriter.bucket_dir), self.schema, columns,
                              system, self.vectors.get(f.file_name), positions)

    def run(self, unit: CompactUnit) -> DvCompactResult:
        schema = self.schema
        keys = list(schema.primary_keys)
        cols = schema.field_names
        system = [SEQUENCE_NUMBER, VALUE_KIND]
        in_unit = {(f.level, f.file_name) for f in unit.files}
        older = [f for f in self.all_files if f.level > 0 and (f.level, f.file_name) not in in_unit]
        unit_parts = []
        for f in unit.files:
            t = self._read(f, cols, system)
            unit_parts.append(t.append_column("__l0", pa.array(np.full(t.num_rows, f.level == 0))))
        unit_rows = pa.concat_tables(unit_parts)
        marks: dict[str, list[np.ndarray]] = {}
        matched_parts = []
        for f in older:
            if self.key_only and self.cache is not None:
                t = self._cached_keys(f, keys)
            else:
                t = self._read(f, keys if self.key_only else cols, [] if self.key_only else system, positions=True)
            hit = semi_join(t, unit_rows, keys)
            if hit.any():
                marks.setdefault(f.file_name, []).append(t.column(ROW_POSITION).to_numpy()[hit])
                if not self.key_only:
                    matched_parts.append(t.filter(pa.array(hit)).drop_columns([ROW_POSITION]).append_column(
                        "__l0", pa.array(np.zeros(int(hit.sum()), dtype=bool))))
        all_rows = pa.concat_tables([unit_rows] + matched_parts) if matched_parts else unit_rows
        l0 = all_rows.column("__l0").to_numpy(zero_copy_only=False).astype(bool)
        all_rows = all_rows.drop_columns(["__l0"])
        merged = self.rewriter.merge_function.merge(all_rows)
        merged = without_retractions(merged)
        after = self.rewriter.writer.write(
            self.rewriter.bucket_dir, merged.select(cols), merged.column(SEQUENCE_NUMBER).to_numpy(),
            merged.column(VALUE_KIND).to_numpy().astype(np.int8), level=unit.output_level,
            file_source=FILE_SOURCE_COMPACT, prefix=self.rewriter.file_prefix)
        vectors = {name: BitMap(bm) for name, bm in self.vectors.items()
                   if name not in {f.file_name for f in unit.files}}
        for name, parts in marks.items():
            bm = vectors.setdefault(name, BitMap())
            for p in parts:
                bm.update(p.astype(np.uint32))
        result = DvCompactResult(before=list(unit.files), after=after, vectors=vectors)
        if self.cache is not None:
            self.cache.forget([f.file_name for f in unit.files])
        if self.changelog_producer == "lookup" and l0.any():
            new_keys = all_rows.filter(pa.array(l0))
            before = all_rows.filter(pa.array(~l0))
            before = self.rewriter.merge_function.merge(before.filter(pa.array(semi_join(before, new_keys, keys))))
            after_rows = merged.filter(pa.array(semi_join(merged, new_keys, keys)))
            values = [c for c in cols if c not in keys]
            result.changelog = self.rewriter.write_changelog([changelog.diff(before, after_rows, keys, values)])
        return result
