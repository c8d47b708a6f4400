"""Rewrites the sections of a compaction unit into new files by a merge on (key, sequence number).

The merge is vectorised: the files of a section are read whole, concatenated and folded to the
newest row per key in Arrow; sections are disjoint in key range, so their outputs concatenate in
key order and roll into files at the target size.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from .. import changelog
from ..data_file_meta import FILE_SOURCE_COMPACT, DataFileMeta
from ..data_file_writer import DataFileWriter
from ..fileio import FileIO
from ..merge.factory import merge_function_for
from ..row_kind import without_retractions
from ..schema import SEQUENCE_NUMBER, VALUE_KIND, TableSchema
from ..table_read import read_data_file
from .sorted_run import SortedRun
from .unit import CompactResult

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

    def __init__(self, fio: FileIO, schema: TableSchema, bucket_dir: str, file_prefix: str = DATA_PREFIX) -> None:
        """`file_prefix`: how the names of the data files it writes start (changelog: `changelog_prefix`)."""
        self.file_prefix = file_prefix
        self.io = fio
        self.schema = schema
        self.bucket_dir = bucket_dir
        self.writer = DataFileWriter(fio, schema)
        self.merge_function = merge_function_for(schema)

    def read_section(self, runs: Sequence[SortedRun], with_level: bool = False) -> pa.Table:
        """All rows of a section's files with their sequence numbers and kinds (and file level)."""
        tables = []
        for r in runs:
            for f in r.files:
                t = read_data_file(self.io, f"{self.bucket_dir}/{f.file_name}", self.schema,
                                   self.schema.field_names, [SEQUENCE_NUMBER, VALUE_KIND])
                if with_level:
                    t = t.append_column(_LEVEL, pa.array(np.full(t.num_rows, f.level, np.int32)))
                tables.append(t)
        return pa.concat_tables(tables) if len(tables) > 1 else tables[0]

    def merge(self, rows: pa.Table, drop_delete: bool) -> pa.Table:
        """One row per key, in key order, by the table's merge engine; retractions dropped when `drop_delete`."""
        merged = self.merge_function.merge(rows)
        if drop_delete:
            merged = without_retractions(merged)
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
        for section in sections:
            rows = self.read_section(section, with_level=full_changelog_level is not None)
            if full_changelog_level is not None:
                levels = rows.column(_LEVEL).to_numpy()
                rows = rows.drop_columns([_LEVEL])
                out = self.merge(rows, drop_delete)
                old = self.merge_function.merge(rows.filter(pa.array(levels == full_changelog_level)))
                changes.append(changelog.diff(old, out, self.schema.primary_keys, self._value_fields))
            else:
                out = self.merge(rows, drop_delete)
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
        seq = rows.column(SEQUENCE_NUMBER).to_numpy()
        kinds = rows.column(VALUE_KIND).to_numpy().astype(np.int8)
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
