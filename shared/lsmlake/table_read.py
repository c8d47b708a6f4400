"""Reading splits: raw reads of files that need no merge, merge-on-read of the rest.

Merge-on-read keeps the row with the highest sequence number of every key (the deduplicate merge
engine) and drops keys whose newest row retracts (-U, -D). Files written with another schema version
are mapped to the reader's schema by field id before any merge, as Paimon does: a renamed column
keeps its values, a column added later reads as nulls.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyroaring import BitMap

from . import deletion_vector
from .data_file_meta import DataFileMeta
from .data_file_writer import bucket_dir
from .errors import InvalidInputError
from .fileio import FileIO
from .index_manifest import IndexEntry
from .merge.factory import merge_function_for
from .predicate import Predicate
from .row_kind import without_retractions
from .scan import Split
from .schema import SEQUENCE_NUMBER, VALUE_KIND, SchemaHistory, SchemaManager, TableSchema


class TableRead:
    """Turns splits into Arrow tables with the table's (or the projected) columns."""

    def __init__(self, fio: FileIO, table_path: str, schema: TableSchema,
                 projection: Sequence[str] | None = None, predicate: Predicate | None = None) -> None:
        self.io = fio
        self.table_path = table_path
        self.schema = schema
        self.predicate = predicate or Predicate()
        names = list(projection) if projection is not None else schema.field_names
        for n in list(names) + sorted(self.predicate.columns()):
            schema.field(n)  # raises on an unknown column
        self.projection = names
        self.merge_function = merge_function_for(schema) if schema.is_primary_key_table else None
        self.history = schema.history or SchemaHistory(SchemaManager(fio, table_path))

    def read(self, splits: Sequence[Split]) -> pa.Table:
        """All rows of the splits, merged, filtered and projected."""
        out_schema = pa.schema([self.schema.arrow_schema.field(n) for n in self.projection])
        if not splits:
            return out_schema.empty_table()
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

    def read_split(self, split: Split) -> pa.Table:
        schema = self.schema
        directory = bucket_dir(self.table_path, schema.partition_dir(split.partition_values), split.bucket)
        wanted = list(dict.fromkeys(self.projection + sorted(self.predicate.columns())))
        merge = schema.is_primary_key_table and not split.raw_convertible
        if merge:
            needed = self.merge_function.required_columns(wanted)
            system = [SEQUENCE_NUMBER, VALUE_KIND]
        else:
            needed, system = wanted, []
        vectors = load_vectors(self.io, self.table_path, split.dv_index)
        partition = dict(zip(schema.partition_keys, split.partition_values, strict=True))

        def read(f: DataFileMeta) -> pa.Table:
            return read_data_file(self.io, f"{directory}/{f.file_name}", schema, needed, system,
                                  vectors.get(f.file_name), file_schema=self.history.file_schema(f.schema_id, schema),
                                  constants=partition)

        if len(split.files) > 1 and not merge:
            with ThreadPoolExecutor(max_workers=2) as pool:  # raw files decode independently
                tables = list(pool.map(read, split.files))
        else:
            tables = [read(f) for f in split.files]
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        if merge:
            table = self.merge_function.merge(table)
            table = without_retractions(table)
        expr = self.predicate.expression()
        if expr is not None:
            table = table.filter(expr)
        return table.select(self.projection)


def load_vectors(fio: FileIO, table_path: str, entry: IndexEntry | None) -> dict[str, BitMap]:
    """The deletion vectors of a bucket, by data file name."""
    if entry is None or not entry.dv_ranges:
        return {}
    data = fio.read_bytes(f"{table_path}/index/{entry.file_name}")
    return deletion_vector.deserialize(data, list(entry.dv_ranges))


def read_data_file(fio: FileIO, path: str, schema: TableSchema, columns: list[str], system: list[str],
                   deleted: BitMap | None = None, positions: bool = False,
                   file_schema: TableSchema | None = None, constants: Mapping[str, Any] | None = None) -> pa.Table:
    """Read table columns (named and typed as in `schema`; absent ones as nulls) plus system columns.

    `file_schema` is the schema the file was written with (its `schema_id`); columns are found in
    the file by field id through it. Without it the file's schema comes from `schema.history` when
    the table ever renamed a column, else columns are found by name. Rows whose position is in
    `deleted` (the file's deletion vector) are skipped; with `positions`, a `_ROW_POSITION` column
    gives each row's position in the file. `constants` are columns with one value in the whole file (a
    partition's keys, which Paimon writes into every row): they are built from that value, not decoded.
    """
    constants = {c: v for c, v in (constants or {}).items() if c in columns}
    if file_schema is None and schema.history is not None:
        file_schema = schema.history.for_file(path.rsplit("/", 1)[-1], schema)
    if file_schema is None or file_schema is schema or file_schema.id == schema.id:
        source = {c: c for c in columns}
    else:
        by_id = schema.names_in(file_schema)
        source = {c: by_id[c] for c in columns}
    with fio.open_input(path) as f:
        pf = pq.ParquetFile(f)
        present = set(pf.schema_arrow.names)
        wanted = [s for c, s in source.items() if s is not None and s in present and c not in constants]
        t = pf.read(columns=wanted + [c for c in system if c in present])
    pos = None
    if deleted is not None and len(deleted):
        keep = np.ones(t.num_rows, dtype=bool)
        gone = np.frombuffer(deleted.to_array(), dtype=np.uint32)
        keep[gone[gone < t.num_rows]] = False
        pos = np.flatnonzero(keep)
        t = t.take(pa.array(pos))
    rows = t.num_rows if pos is None else len(pos)  # a table of no columns (all constant) forgets its length
    if positions and pos is None:
        pos = np.arange(t.num_rows, dtype=np.int64)
    arrays = []
    fields = []
    for c in columns:
        af = schema.arrow_schema.field(c)
        src = source[c]
        if c in constants:
            col = pa.repeat(pa.scalar(constants[c], af.type), rows)
        elif src is not None and src in present:
            col = t.column(src)
            if not col.type.equals(af.type):
                try:
                    col = col.cast(af.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise InvalidInputError(f"file {path}: column {c!r} cannot be read as {af.type}: {e}") from None
        else:
            col = pa.nulls(rows, af.type)
        arrays.append(col)
        fields.append(af.with_nullable(True))
    for c in system:
        arrays.append(t.column(c))
        fields.append(pa.field(c, t.schema.field(c).type))
    if positions:
        assert pos is not None
        arrays.append(pa.array(pos, pa.int64()))
        fields.append(pa.field(ROW_POSITION, pa.int64()))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


ROW_POSITION = "_ROW_POSITION"
