"""Reading splits: raw reads of files that need no merge, merge-on-read of the rest.

Merge-on-read keeps the row with the highest sequence number of every key (the deduplicate merge
engine) and drops keys whose newest row retracts (-U, -D). Files written with another schema version
are mapped to the reader's schema by field id before any merge, as Paimon does: a renamed column
keeps its values, a column added later reads as nulls.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from lsmlake.format import deletion_vector
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.format.data_file_read import DataFileRead, decode_pool, read_all
from lsmlake.format.data_file_writer import bucket_dir
from lsmlake.format.index_manifest import IndexEntry
from lsmlake.format.predicate import Predicate, Term
from lsmlake.format.row_kind import without_retractions
from lsmlake.format.schema import SEQUENCE_NUMBER, VALUE_KIND, SchemaHistory, SchemaManager, TableSchema
from lsmlake.fs.file_io import FileIO
from lsmlake.mergetree.merge.factory import merge_function_for
from lsmlake.table.scan import Split

FILES_AT_ONCE = 64  # data files of a split open (and decoding) at one time


class TableRead:
    """Turns splits into Arrow tables with the table's (or the projected) columns."""

    def __init__(self, fio: FileIO, table_path: str, schema: TableSchema,
                 projection: Sequence[str] | None = None, predicate: Predicate | None = None) -> None:
        self.io = fio
        self.table_path = table_path
        self.schema = schema
        # columns checked, literals of the columns' types: Arrow compares no others
        self.predicate = (predicate or Predicate()).bind(schema.arrow_schema)
        names = list(projection) if projection is not None else schema.field_names
        for n in names:
            schema.field(n)  # raises on an unknown column
        self.projection = names
        self.merge_function = merge_function_for(schema) if schema.is_primary_key_table else None
        self.history = schema.history or SchemaHistory(SchemaManager(fio, table_path))

    def read(self, splits: Sequence[Split]) -> pa.Table:
        """All rows of the splits, merged, filtered and projected."""
        out_schema = pa.schema([self.schema.arrow_schema.field(n) for n in self.projection])
        if not splits:
            return out_schema.empty_table()
        # Splits are planned and merged two at a time (one on this thread), their files decoded on the shared pool.
        if len(splits) == 1:
            parts = [t for t in [self.read_split(splits[0])] if t.num_rows]
        else:
            with ThreadPoolExecutor(max_workers=2) as pool:
                parts = [t for t in pool.map(self.read_split, splits) if t.num_rows]
        if not parts:
            return out_schema.empty_table()
        table = pa.concat_tables(parts)
        try:
            return table.cast(out_schema)  # restore NOT NULL markers dropped to concatenate files
        except (pa.ArrowInvalid, ValueError):
            return table  # a NOT NULL column added by schema evolution reads as null in old files

    def read_batches(self, splits: Sequence[Split]) -> Iterator[pa.Table]:
        """One table per split, for callers that stream."""
        for s in splits:
            t = self.read_split(s)
            if t.num_rows:
                yield t

    def read_split(self, split: Split, pool: Executor | None = None) -> pa.Table:
        """One split's rows; its files' columns decode on `pool` (the shared decode pool when not given)."""
        schema = self.schema
        directory = bucket_dir(self.table_path, schema.partition_dir(split.partition_values), split.bucket)
        wanted = list(dict.fromkeys(self.projection + sorted(self.predicate.columns())))
        merge = schema.is_primary_key_table and not split.raw_convertible
        if merge:
            assert self.merge_function is not None  # primary-key tables have one
            needed = self.merge_function.required_columns(wanted)
            system = [SEQUENCE_NUMBER, VALUE_KIND]
        else:
            needed, system = wanted, []
        vectors = load_vectors(self.io, self.table_path, split.dv_index)
        partition = dict(zip(schema.partition_keys, split.partition_values, strict=True))

        def read(files: Sequence[DataFileMeta], on: Executor) -> list[pa.Table]:
            return read_all([DataFileRead(self.io, f.path_in(directory), schema, needed, system,
                                          vectors.get(f.file_name), constants=partition,
                                          file_schema=self.history.file_schema(f.schema_id, schema))
                             for f in files], on)

        def read_files(on: Executor) -> list[pa.Table]:
            # a bucket that was never compacted can hold thousands of files: open a bounded number at once
            return [t for lo in range(0, len(split.files), FILES_AT_ONCE)
                    for t in read(split.files[lo:lo + FILES_AT_ONCE], on)]

        tables = read_files(pool or decode_pool())
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        if merge:
            assert self.merge_function is not None
            table = self.merge_function.merge(table)
            table = without_retractions(table)
        return filter_rows(table, self.predicate).select(self.projection)


def filter_rows(table: pa.Table, predicate: Predicate) -> pa.Table:
    """The rows of `table` that `predicate` (bound to the table's schema) accepts; a null comparison filters out.

    The mask is computed with compute kernels rather than by filtering with `predicate.expression()`: filtering a
    table with an Expression runs an Acero plan, whose worker threads may drop the plan's last references to the
    input after the call returned. Buffers Python owns (numpy arrays, bytes, such as the constant columns of
    `data_file_read`) then release their Python object from an Arrow thread; when that happens while the
    interpreter shuts down, the thread is unwound through a noexcept frame and the process aborts
    ("terminate called without an active exception") after a successful read.
    """
    if predicate.accepts_all:
        return table
    return table.filter(row_mask(table, predicate))


def row_mask(table: pa.Table, node: Predicate | Term) -> pa.Array:
    """What `node.expression()` evaluates to on `table`, by compute kernels on the calling thread.

    Each mask is made one array before masks are combined: a table's columns may be chunked differently (a
    partition column one chunk per file, a merged column one chunk), and pyarrow 19's `and_kleene` of chunked
    arrays chunked differently took `TRUE AND NULL` for true. A mask is a bit per row: the copy is cheap."""
    if isinstance(node, Term):
        mask = _term_mask(table.column(node.column), node)
        return mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask
    masks = [row_mask(table, c) for c in node.children]
    combine = pc.or_kleene if node.any else pc.and_kleene
    out = masks[0]
    for m in masks[1:]:
        out = combine(out, m)
    return out


def _term_mask(column: pa.ChunkedArray, term: Term) -> pa.ChunkedArray:
    if term.op == "is_null":
        return pc.is_null(column)
    if term.op == "is_not_null":
        return pc.is_valid(column)
    if term.op == "in":
        if not term.value:  # matches nothing, as the expression does
            return pc.and_kleene(pc.is_null(column), pc.is_valid(column))
        return pc.is_in(column, value_set=pa.array(list(term.value), column.type))
    # the literal was cast to the column's type by `bind`: typed so, it compares as the expression's does
    value = pa.scalar(term.value, column.type)
    kernel = {"=": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater,
              ">=": pc.greater_equal}[term.op]
    return kernel(column, value)


def load_vectors(fio: FileIO, table_path: str, entry: IndexEntry | None) -> dict[str, BitMap]:
    """The deletion vectors of a bucket, by data file name."""
    if entry is None or not entry.dv_ranges:
        return {}
    data = fio.read_bytes(f"{table_path}/index/{entry.file_name}")
    return deletion_vector.deserialize(data, list(entry.dv_ranges))
