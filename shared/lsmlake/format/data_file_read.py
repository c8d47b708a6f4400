"""Reading one data file as the table sees it, and decoding many files' columns at once.

A file is read in three steps: plan (which of its columns to decode, found by field id when the
file was written with another schema; which rows its deletion vector drops), decode (Parquet pages
to Arrow, the deleted rows taken out), assemble (the table's columns in order, constants and
columns the file lacks filled in). The steps are apart so that a reader of several files can decode
every file's columns as independent tasks on a pool: a file of one row group decodes its columns in
parallel at best, and the deletion vector of one column is applied while the next decodes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, wait
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyroaring import BitMap

from lsmlake.errors import InvalidInputError
from lsmlake.format.schema import TableSchema
from lsmlake.fs.file_io import FileIO
from lsmlake.runtime.thread_pools import SharedPool

ROW_POSITION = "_ROW_POSITION"

DECODE_THREADS = max(2, os.cpu_count() or 2)
_DECODE = SharedPool("lsmlake-decode", DECODE_THREADS)

# Columns are packed into decode tasks of at least this many uncompressed bytes, so a small file
# (or a file of many narrow columns) is not cut into tasks that cost more to schedule than to run.
MIN_TASK_BYTES = 1 << 20


class DataFileRead:
    """The planned read of one data file: table columns (named and typed as in `schema`; absent ones
    as nulls) plus system columns.

    `file_schema` is the schema the file was written with (its `schema_id`); columns are found in the
    file by field id through it. Without it the file's schema comes from `schema.history` when the
    table ever renamed a column, else columns are found by name. Rows whose position is in `deleted`
    (the file's deletion vector) are skipped; with `positions`, a `_ROW_POSITION` column gives each
    row's position in the file. `constants` are columns with one value in the whole file (a
    partition's keys, which Paimon writes into every row): they are built from that value, not decoded.
    """

    def __init__(self, fio: FileIO, path: str, schema: TableSchema, columns: list[str], system: list[str],
                 deleted: BitMap | None = None, positions: bool = False,
                 file_schema: TableSchema | None = None, constants: Mapping[str, Any] | None = None) -> None:
        self.io = fio
        self.path = path
        self.schema = schema
        self.columns = columns
        self.positions = positions
        self.constants = {c: v for c, v in (constants or {}).items() if c in columns}
        if file_schema is None and schema.history is not None:
            file_schema = schema.history.for_file(path.rsplit("/", 1)[-1], schema)
        if file_schema is None or file_schema is schema or file_schema.id == schema.id:
            self.source: dict[str, str | None] = {c: c for c in columns}
        else:
            by_id = schema.names_in(file_schema)
            self.source = {c: by_id[c] for c in columns}
        # one handle for every decode task: Parquet reads at offsets (ReadAt), which Arrow files serve
        # to several threads at once; `close` (or `read`, `read_all`) releases it
        self._file = fio.open_input(path)
        try:
            self.metadata = pq.ParquetFile(self._file).metadata
        except BaseException:
            self._file.close()
            raise
        self.present = set(self.metadata.schema.to_arrow_schema().names)
        self.system = [c for c in system if c in self.present]
        wanted = [s for c, s in self.source.items() if s is not None and s in self.present and c not in self.constants]
        self.decoded = list(dict.fromkeys(wanted + self.system))
        self.num_rows = self.metadata.num_rows
        self.kept: np.ndarray | None = None  # positions of the rows that survive the deletion vector
        if deleted is not None and len(deleted):
            # positions past the end (a vector written for a longer file) are ignored
            self.kept = np.frombuffer((BitMap(range(self.num_rows)) - deleted).to_array(), dtype=np.uint32)
            self._kept_array = pa.array(self.kept)
            self.num_rows = len(self.kept)
        self._constant_columns: dict[str, pa.Array] | None = None

    def tasks(self) -> list[tuple[list[str], int]]:
        """The decoded columns cut into independent tasks, each with its uncompressed size, largest first."""
        size = dict.fromkeys(self.decoded, 0)
        for g in range(self.metadata.num_row_groups):
            group = self.metadata.row_group(g)
            for i in range(group.num_columns):
                chunk = group.column(i)
                top = chunk.path_in_schema.split(".", 1)[0]
                if top in size:
                    size[top] += chunk.total_uncompressed_size
        out: list[tuple[list[str], int]] = []
        small: list[str] = []
        small_bytes = 0
        for name in sorted(self.decoded, key=lambda n: -size[n]):
            if size[name] >= MIN_TASK_BYTES:
                out.append(([name], size[name]))
                continue
            small.append(name)
            small_bytes += size[name]
            if small_bytes >= MIN_TASK_BYTES:
                out.append((small, small_bytes))
                small, small_bytes = [], 0
        if small or not out:
            out.append((small, small_bytes))
        return out

    def decode(self, names: Sequence[str], use_threads: bool = False) -> pa.Table:
        """Some of the decoded columns, the deleted rows taken out."""
        t = pq.ParquetFile(self._file, metadata=self.metadata).read(columns=list(names), use_threads=use_threads)
        if self.kept is not None:
            if t.num_rows != self.metadata.num_rows:  # the unchecked take below trusts this count
                raise InvalidInputError(f"file {self.path}: {t.num_rows} rows decoded, its footer says "
                                        f"{self.metadata.num_rows}")
            t = pc.take(t, self._kept_array, boundscheck=False)  # kept positions are below that count
        return t

    def constant_columns(self) -> dict[str, pa.Array]:
        """The constant columns, built once (a caller may build them while the decoding runs)."""
        if self._constant_columns is None:
            types = self.schema.arrow_schema
            self._constant_columns = {c: constant_array(v, types.field(c).type, self.num_rows)
                                      for c, v in self.constants.items()}
        return self._constant_columns

    def assemble(self, parts: Sequence[pa.Table]) -> pa.Table:
        """The table's columns in order from the decoded parts (together they hold every decoded column)."""
        decoded: dict[str, pa.ChunkedArray] = {}
        for p in parts:
            decoded.update(zip(p.column_names, p.columns, strict=True))
        rows = self.num_rows
        constants = self.constant_columns()
        arrays = []
        fields = []
        for c in self.columns:
            af = self.schema.arrow_schema.field(c)
            src = self.source[c]
            if c in constants:
                col = constants[c]
            elif src is not None and src in self.present:
                col = decoded[src]
                if not col.type.equals(af.type):
                    try:
                        col = col.cast(af.type)
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                        raise InvalidInputError(
                            f"file {self.path}: column {c!r} cannot be read as {af.type}: {e}") from None
            else:
                col = pa.nulls(rows, af.type)
            arrays.append(col)
            fields.append(af.with_nullable(True))
        for c in self.system:
            arrays.append(decoded[c])
            fields.append(pa.field(c, decoded[c].type))
        if self.positions:
            pos = self.kept if self.kept is not None else np.arange(rows, dtype=np.int64)
            arrays.append(pa.array(pos, pa.int64()))
            fields.append(pa.field(ROW_POSITION, pa.int64()))
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    def read(self) -> pa.Table:
        """The whole planned read on the calling thread (Arrow decodes columns on its own threads)."""
        try:
            return self.assemble([self.decode(self.decoded, use_threads=True)])
        finally:
            self.close()

    def close(self) -> None:
        self._file.close()


def constant_array(value: Any, typ: pa.DataType, n: int) -> pa.Array:
    """`value` repeated `n` times. A string or binary value is laid out directly (its bytes repeated,
    offsets in steps of its length), several times cheaper than Arrow's generic repeat."""
    if value is not None and (pa.types.is_string(typ) or pa.types.is_binary(typ)):
        raw = value.encode() if isinstance(value, str) else bytes(value)
        if len(raw) * n < 2**31 - 1:  # 32-bit offsets
            offsets = np.arange(0, (n + 1) * len(raw), len(raw), dtype=np.int32) if raw else np.zeros(n + 1, np.int32)
            return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])
    return pa.repeat(pa.scalar(value, typ), n)


def decode_pool() -> Executor:
    """The process's decode pool, shared by every read and compaction: started on first use, so a read pays no
    thread start-up, and concurrent reads together decode on DECODE_THREADS threads. Its tasks never
    wait on it, so readers waiting on their tasks cannot starve it."""
    return _DECODE.get()


def read_data_file(fio: FileIO, path: str, schema: TableSchema, columns: list[str], system: list[str],
                   deleted: BitMap | None = None, positions: bool = False,
                   file_schema: TableSchema | None = None, constants: Mapping[str, Any] | None = None) -> pa.Table:
    """One data file read as `DataFileRead` describes."""
    return DataFileRead(fio, path, schema, columns, system, deleted, positions, file_schema, constants).read()


def read_all(reads: Sequence[DataFileRead], pool: Executor | None) -> list[pa.Table]:
    """Every planned read, its files' column tasks run on `pool` largest first (so no long task is
    left to start last). Tasks only decode: they never wait on the pool themselves."""
    tasks = [(r, names, size) for r in reads for names, size in r.tasks()]
    if pool is None or len(tasks) < 2:
        return [r.read() for r in reads]
    tasks.sort(key=lambda t: -t[2])
    futures = [(r, pool.submit(r.decode, names)) for r, names, _ in tasks]
    try:
        for r in reads:
            r.constant_columns()  # while the pool decodes
        parts: dict[int, list[pa.Table]] = {id(r): [] for r in reads}
        for r, fut in futures:
            parts[id(r)].append(fut.result())
    finally:
        for _, fut in futures:  # no task may still read a file about to be closed
            fut.cancel()
        wait([fut for _, fut in futures])
        for r in reads:
            r.close()
    return [r.assemble(parts[id(r)]) for r in reads]
