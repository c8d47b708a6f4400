"""Rewrites the sections of a compaction unit into new files by a merge on (key, sequence number).

The merge is vectorised and streams: a section's sorted runs are read a file at a time and cut into
chunks by key (every version of a chunk's keys, from every run), each chunk is folded to the newest row
per key in Arrow, and the merged rows go out in whole target-size files as soon as that much is pending.
Memory stays bounded by about one file per run plus two output files, however big the bucket.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lsmlake.format.data_file_meta import FILE_SOURCE_COMPACT, DataFileMeta
from lsmlake.format.data_file_read import DataFileRead, constant_array, decode_pool, read_all
from lsmlake.format.data_file_writer import DataFileWriter
from lsmlake.format.numpy_columns import arrow_of, fixed_numpy, mask_of
from lsmlake.format.row_kind import is_retract
from lsmlake.format.schema import SEQUENCE_NUMBER, VALUE_KIND, TableSchema
from lsmlake.fs.file_io import FileIO
from lsmlake.mergetree import changelog
from lsmlake.mergetree.compact.unit import CompactResult
from lsmlake.mergetree.merge.deduplicate import Deduplicate
from lsmlake.mergetree.merge.factory import merge_function_for
from lsmlake.mergetree.merge.merge_function import MergeFunction
from lsmlake.mergetree.sorted_run import SortedRun

_LEVEL = "__lsmlake_level"
DATA_PREFIX = "data-"
CHANGELOG_PREFIX = "changelog-"


def changelog_prefix(file_prefix: str) -> str:
    """The changelog-file prefix that goes with a data-file prefix: `data-x-` -> `changelog-x-`.

    Changelog files keep Paimon's `changelog-` start, and still carry the run's own part of the prefix,
    so the outputs of one compaction run can be found (and rolled back) by prefix.
    """
    return CHANGELOG_PREFIX + file_prefix.removeprefix(DATA_PREFIX)


class MergeTreeCompactRewriter:
    """Rewrites or upgrades the files of one bucket."""

    def __init__(self, fio: FileIO, schema: TableSchema, bucket_dir: str, file_prefix: str = DATA_PREFIX,
                 partition: Mapping[str, Any] | None = None) -> None:
        """`file_prefix`: how the names of the data files it writes start (changelog: `changelog_prefix`).
        `partition`: the bucket's partition values, by partition column; its files hold them in every row, so
        they are made from the values instead of decoded (as a read does)."""
        self.file_prefix = file_prefix
        self.partition = dict(partition or {})
        self.io = fio
        self.schema = schema
        self.bucket_dir = bucket_dir
        self.writer = DataFileWriter(fio, schema)
        self.merge_function = merge_function_for(schema)
        self._slim_merge = self._partition_free_merge()

    def _partition_free_merge(self) -> Deduplicate | None:
        """The deduplicate merge on the key without the partition columns, when those are key columns.

        A bucket's rows all hold its partition's values there: the merge orders and groups by the rest of the
        key alike, so the partition columns need not be made for every row read, taken by the merge, and
        sorted on; they are made once for the merged rows. Other engines get every column.
        """
        mf = self.merge_function
        parts = set(self.partition)
        if not isinstance(mf, Deduplicate) or not parts or not self.schema.trimmed_primary_keys:
            return None
        if not parts <= set(self.schema.primary_keys) or parts & set(mf.ordering.sequence_fields):
            return None
        return Deduplicate(self.schema.trimmed_primary_keys, mf.ordering, mf.ignore_delete)

    def read_section(self, runs: Sequence[SortedRun], with_level: bool = False, slim: bool = False) -> pa.Table:
        """All rows of a section's files with their sequence numbers and kinds (and file level); `slim`: without
        the partition columns."""
        files = [f for r in runs for f in r.files]
        columns = [c for c in self.schema.field_names if not (slim and c in self.partition)]
        # every file of the section is read whole: on an object store, fetch them all at once first
        paths = [f.path_in(self.bucket_dir) for f in files]
        self.io.prefetch(paths)
        try:
            reads = []
            try:
                for path in paths:
                    reads.append(DataFileRead(self.io, path, self.schema, columns,
                                              [SEQUENCE_NUMBER, VALUE_KIND], constants=self.partition))
            except BaseException:
                for r in reads:
                    r.close()
                raise
            # the files' columns decode as tasks on every core, not one file after another
            tables = read_all(reads, decode_pool())
        finally:
            self.io.forget_prefetched(paths)
        if with_level:
            tables = [t.append_column(_LEVEL, arrow_of(np.full(t.num_rows, f.level, np.int32)))
                      for t, f in zip(tables, files, strict=True)]
        return pa.concat_tables(tables) if len(tables) > 1 else tables[0]

    def section_chunks(self, runs: Sequence[SortedRun], with_level: bool = False,
                       slim: bool = False) -> Iterator[pa.Table]:
        """A section's rows in chunks of ascending, disjoint key ranges; a chunk holds every row of its keys
        from every run. At most one file per run is held at a time. `slim`: without the partition columns."""
        if sum(len(r.files) for r in runs) <= len(runs):  # one file per run: one chunk, no cutting needed
            yield self.read_section(runs, with_level, slim)
            return
        for chunk in self._cut_chunks(runs, with_level):
            yield chunk.drop_columns([c for c in self.partition if c in chunk.column_names]) if slim else chunk

    def _cut_chunks(self, runs: Sequence[SortedRun], with_level: bool) -> Iterator[pa.Table]:
        cursors = [_RunCursor(self, r, with_level) for r in runs]
        while True:
            live = [c for c in cursors if c.fill()]
            if not live:
                return
            # No run holds a key <= cut beyond what is buffered: each run's later files start above its
            # buffered file's last key, and cut is the smallest of those.
            cut = min((c.last_key() for c in live), key=functools.cmp_to_key(_compare))
            parts = [p for p in (c.take_through(cut) for c in live) if p.num_rows]
            yield pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    def merge(self, rows: pa.Table, drop_delete: bool, slim: bool = False) -> pa.Table:
        """One row per key, in key order, by the table's merge engine; retractions dropped when `drop_delete`.
        `slim`: the rows lack the partition columns (see `_partition_free_merge`); the result has them."""
        if slim:
            assert self._slim_merge is not None
            return self._with_partition(self._merge_with(self._slim_merge, rows, drop_delete))
        return self._merge_with(self.merge_function, rows, drop_delete)

    def _with_partition(self, rows: pa.Table) -> pa.Table:
        """The rows with the partition columns put back in their places, made from the partition's values."""
        arrays = []
        fields = []
        for name in self.schema.field_names:
            if name in self.partition:
                af = self.schema.arrow_schema.field(name)
                arrays.append(constant_array(self.partition[name], af.type, rows.num_rows))
                fields.append(af.with_nullable(True))
            else:
                arrays.append(rows.column(name))
                fields.append(rows.schema.field(name))
        for name in rows.column_names:
            if name not in self.schema.field_names:
                arrays.append(rows.column(name))
                fields.append(rows.schema.field(name))
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    @staticmethod
    def _merge_with(merge_function: MergeFunction, rows: pa.Table, drop_delete: bool) -> pa.Table:
        merged = merge_function.merge(rows)
        if drop_delete and merged.num_rows:
            keep = ~is_retract(fixed_numpy(merged.column(VALUE_KIND)))
            if not keep.all():
                merged = merged.filter(mask_of(keep))
        return merged

    def rewrite(self, output_level: int, drop_delete: bool, sections: Sequence[Sequence[SortedRun]],
                full_changelog_level: int | None = None) -> CompactResult:
        """Merge each section and write the result at `output_level`.

        With `full_changelog_level` (changelog-producer = full-compaction), also write the changelog
        from the rows that were on that (max) level before to the merged result.
        """
        before = [f for section in sections for r in section for f in r.files]
        if not before:
            return CompactResult()
        # Memory stays bounded by one section plus about one output file: merged sections are written out
        # in whole target-size files as soon as that much is pending, the remainder waits for the next one.
        pending: list[pa.Table] = []
        pending_bytes = 0
        after: list[DataFileMeta] = []
        changes = []
        # the changelog diff compares whole rows: it gets every column
        slim = self._slim_merge is not None and full_changelog_level is None
        for section in sections:
            for rows in self.section_chunks(section, with_level=full_changelog_level is not None, slim=slim):
                if full_changelog_level is not None:
                    levels = rows.column(_LEVEL).to_numpy()
                    rows = rows.drop_columns([_LEVEL])
                    out = self.merge(rows, drop_delete)
                    old = self.merge_function.merge(rows.filter(pa.array(levels == full_changelog_level)))
                    changes.append(changelog.diff(old, out, self.schema.primary_keys, self._value_fields))
                else:
                    out = self.merge(rows, drop_delete, slim)
                del rows
                if out.num_rows:
                    pending.append(out)
                    pending_bytes += out.nbytes
                if pending_bytes >= 2 * self.writer.target_size:
                    pending, pending_bytes = self._write_whole_files(pending, output_level, after)
        if pending:
            self._write_rows(pa.concat_tables(pending), output_level, after)
        return CompactResult(before=before, after=after, changelog=self.write_changelog(changes))

    def _write_rows(self, rows: pa.Table, output_level: int, after: list[DataFileMeta]) -> None:
        seq = fixed_numpy(rows.column(SEQUENCE_NUMBER))
        kinds = fixed_numpy(rows.column(VALUE_KIND)).astype(np.int8, copy=False)
        after.extend(self.writer.write(self.bucket_dir, rows.select(self.schema.field_names), seq, kinds,
                                       level=output_level, file_source=FILE_SOURCE_COMPACT, prefix=self.file_prefix))

    def _write_whole_files(self, pending: list[pa.Table], output_level: int,
                           after: list[DataFileMeta]) -> tuple[list[pa.Table], int]:
        """Write the pending rows that fill whole target-size files; the rest stays pending."""
        rows = pa.concat_tables(pending)
        per_file = max(1, int(self.writer.target_size // max(1, rows.nbytes // max(1, rows.num_rows))))
        whole = rows.num_rows // per_file * per_file
        if whole == 0:
            return [rows], rows.nbytes
        self._write_rows(rows.slice(0, whole), output_level, after)
        rest = rows.slice(whole)
        return ([rest], rest.nbytes) if rest.num_rows else ([], 0)

    def write_changelog(self, parts: Sequence[pa.Table]) -> list[DataFileMeta]:
        parts = [p for p in parts if p.num_rows]
        if not parts:
            return []
        rows = pa.concat_tables(parts)
        return self.writer.write(self.bucket_dir, rows.select(self.schema.field_names),
                                 rows.column(SEQUENCE_NUMBER).to_numpy(),
                                 rows.column(VALUE_KIND).to_numpy().astype(np.int8),
                                 prefix=changelog_prefix(self.file_prefix))

    @property
    def _value_fields(self) -> list[str]:
        return [f for f in self.schema.field_names if f not in self.schema.primary_keys]

    @staticmethod
    def upgrade(output_level: int, f: DataFileMeta) -> CompactResult:
        """Move a file to another level without rewriting it."""
        return CompactResult(before=[f], after=[f.upgrade(output_level)])


class _RunCursor:
    """Reads one sorted run a file at a time and hands out its rows up to a key."""

    def __init__(self, rewriter: MergeTreeCompactRewriter, run: SortedRun, with_level: bool) -> None:
        self.rewriter = rewriter
        self.files = list(run.files)
        self.with_level = with_level
        self.keys = rewriter.schema.primary_keys
        self.buffer: pa.Table | None = None

    def fill(self) -> bool:
        """Load the next non-empty file when the buffer is used up; False once the run is exhausted."""
        while self.buffer is None or self.buffer.num_rows == 0:
            if not self.files:
                return False
            f = self.files.pop(0)
            t = self.rewriter.read_section([SortedRun.single(f)], self.with_level)
            self.buffer = t if _sorted_by(t, self.keys) else t.sort_by([(k, "ascending") for k in self.keys])
        return True

    def key_at(self, i: int) -> list[pa.Scalar]:
        assert self.buffer is not None
        return [self.buffer.column(k)[i] for k in self.keys]

    def last_key(self) -> list[pa.Scalar]:
        assert self.buffer is not None
        return self.key_at(self.buffer.num_rows - 1)

    def take_through(self, cut: list[pa.Scalar]) -> pa.Table:
        """The buffered rows with key <= cut (a prefix: the buffer is sorted); the rest stays buffered."""
        assert self.buffer is not None
        lo, hi = 0, self.buffer.num_rows  # first row whose key is above cut
        while lo < hi:
            mid = (lo + hi) // 2
            if _compare(self.key_at(mid), cut) <= 0:
                lo = mid + 1
            else:
                hi = mid
        head, self.buffer = self.buffer.slice(0, lo), self.buffer.slice(lo)
        return head


def _compare(a: Sequence[pa.Scalar], b: Sequence[pa.Scalar]) -> int:
    """Keys compared column by column as Arrow orders them (the merge's sort order), not as Python does:
    nanosecond timestamps, for one, tie after `as_py` when pandas is absent (datetime has microseconds)."""
    for x, y in zip(a, b, strict=True):
        if pc.less(x, y).as_py():
            return -1
        if not pc.equal(x, y).as_py():
            return 1
    return 0


def _sorted_by(t: pa.Table, keys: Sequence[str]) -> bool:
    """Whether the rows are in ascending key order (ties allowed): files should be, checked all the same,
    since the chunked merge would be wrong on a file that is not."""
    if t.num_rows < 2:
        return True
    tied = np.ones(t.num_rows - 1, dtype=bool)  # rows i and i+1 equal on the keys compared so far
    for k in keys:
        col = t.column(k)
        a, b = col.slice(0, t.num_rows - 1), col.slice(1)
        if bool(np.any(tied & pc.greater(a, b).to_numpy(zero_copy_only=False))):
            return False
        tied &= pc.equal(a, b).to_numpy(zero_copy_only=False)
        if not tied.any():
            return True
    return True
